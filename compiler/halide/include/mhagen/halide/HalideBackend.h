// The Halide backend (KernelBackend.h): the algorithm in
// AttentionAlgorithm/HalidePipeline, schedules in CpuSchedule/GpuSchedule,
// code generation with Halide 14 and llc-14. Only the registry
// (compiler/backends) includes this header.
#ifndef MHAGEN_HALIDE_HALIDEBACKEND_H
#define MHAGEN_HALIDE_HALIDEBACKEND_H

#include "mhagen/backend/KernelBackend.h"

#include <memory>

namespace mhagen {

std::unique_ptr<KernelBackend> makeHalideBackend();

} // namespace mhagen

#endif
