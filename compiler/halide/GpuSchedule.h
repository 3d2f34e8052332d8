// GPU schedules (CUDA PTX, OpenCL) for the same attention algorithm:
// one thread block per (batch, head block, query tile); the block walks the
// visible key tiles serially, staging each K and V tile in shared memory,
// with threads over the tile's rows (and keys or channels) in every stage.
#ifndef MHAGEN_HALIDE_GPUSCHEDULE_H
#define MHAGEN_HALIDE_GPUSCHEDULE_H

#include "AttentionAlgorithm.h"
#include "HalideTargets.h"

#include "mhagen/spec/BackendResult.h"
#include "mhagen/spec/ScheduleParams.h"

namespace mhagen::hl {

/// The GPU schedule parameters for a spec: names, values, defaults,
/// constraints (threads per block, shared memory per block).
ScheduleSpace gpuScheduleSpace(const AttentionSpec &spec,
                               const HalideTargetInfo &target);

AttentionTiles gpuAttentionTiles(const AttentionSpec &spec,
                                 const ScheduleParams &p);

/// Schedules the attention stages (and, for op = layer, the projections)
/// for the GPU. `output` stores out(c, hd, t, b).
void scheduleAttentionGpu(AttentionStages st, Halide::Func output,
                          const AttentionVars &v, const AttentionSpec &spec,
                          const ScheduleParams &p);
void scheduleProjectionGpu(Projection proj, const AttentionVars &v,
                           int64_t outFeatures, const ScheduleParams &p,
                           bool isOutput);

/// The device code Halide embedded in a module (PTX for CUDA, OpenCL C
/// for OpenCL), or "" if there is none.
std::string deviceSource(const Halide::Module &m);

} // namespace mhagen::hl

#endif
