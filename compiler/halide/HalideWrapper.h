// The C ABI wrapper of a Halide kernel: the ABI wrapper plan
// (mhagen/backend/AbiWrapper.h) in the halide_buffer_t convention, plus
// the GPU glue (host/device copies, CUDA device pointers).
#ifndef MHAGEN_HALIDE_HALIDEWRAPPER_H
#define MHAGEN_HALIDE_HALIDEWRAPPER_H

#include "mhagen/spec/AttentionSpec.h"

#include <string>

namespace mhagen::hl {

std::string wrapperSource(const AttentionSpec &s, const std::string &symbol,
                          const std::string &target, bool gpu);

} // namespace mhagen::hl

#endif
