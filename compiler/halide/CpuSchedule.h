// CPU schedules for the attention algorithm (AttentionAlgorithm.h) and the
// layer's projections, and the search space of their parameters.
#ifndef MHAGEN_HALIDE_CPUSCHEDULE_H
#define MHAGEN_HALIDE_CPUSCHEDULE_H

#include "AttentionAlgorithm.h"
#include "HalideTargets.h"
#include "QkNorm.h"
#include "RotaryPositions.h"

#include "mhagen/spec/ScheduleParams.h"

#include <optional>

namespace mhagen::hl {

/// The CPU schedule parameters for a spec on a target (CpuScheduleSpace.cpp):
/// every name, its allowed values, the default point, and the constraints.
ScheduleSpace cpuScheduleSpace(const AttentionSpec &spec,
                               const HalideTargetInfo &target);

/// The tile shape the algorithm is built with, from schedule parameters.
AttentionTiles cpuAttentionTiles(const AttentionSpec &spec,
                                 const ScheduleParams &p);

/// Flash attention on CPU cores: one parallel task per (batch, head block,
/// query tile); per task a query tile, per key tile register-blocked QK^T
/// and PV micro-kernels (rows vectorised), the online-softmax state in a
/// per-task scratch that does not grow with T_kv.
/// `output` is the Func that stores out(c, hd, t, b) (the pipeline output
/// for sdpa, or the attention stage itself inside a layer).
void scheduleAttentionCpu(AttentionStages st, Halide::Func output,
                          const AttentionVars &v, const AttentionSpec &spec,
                          const ScheduleParams &p);

/// The split-KV decode variant (AttentionTiles::splitTasks), or nothing
/// when decode_tokens = 0, the op is a layer without a KV cache, or the
/// spec's static T_q is longer than a decode tile.
std::optional<AttentionTiles> cpuDecodeTiles(const AttentionSpec &spec,
                                             const ScheduleParams &p,
                                             const HalideTargetInfo &target);

/// The most token rows (T * B) a layer call streams its projections'
/// weights with (gemm_stream_rows; 0 for sdpa or none).
int cpuStreamRows(const AttentionSpec &spec, const ScheduleParams &p);

/// The long-call variant (long_tokens_per_tile > 0): the schedule of the
/// second prefill pipeline a kernel runs for calls of at least
/// long_min_tokens query tokens -- `p` with the long tile as its query and
/// key tiles, and no decode variant of its own. Nothing when the spec has
/// no such variant.
std::optional<ScheduleParams> cpuLongCallParams(const AttentionSpec &spec,
                                                const ScheduleParams &p);

/// Decode (T_q <= decode_tokens): one parallel task per (key-axis chunk,
/// head block, query tile, batch) computes a partial state; a small
/// serial pass merges the chunks. With decode_layout = 1 the per-key-tile
/// micro-kernel puts K/V channels in the vector lanes and computes only
/// the call's rows; with 0 it is the prefill one (rows in lanes).
void scheduleDecodeCpu(AttentionStages st, const AttentionVars &v,
                       const AttentionSpec &spec, const ScheduleParams &p);

/// lse = true: the two thin outputs that read the finished rows -- out, a
/// copy of the values (op = sdpa; pass an undefined Func for op = layer,
/// whose output is the projection), and lse, one log per row. Both are
/// parallel over tokens x batches; they cost a pass over the output.
void scheduleRowOutputsCpu(Halide::Func out, Halide::Func lse,
                           const AttentionVars &v, const ScheduleParams &p);

/// A projection as a register-blocked GEMM: gemm_cols output features
/// (vectorised) x gemm_rows tokens per micro-kernel. With gemm_k_block > 0
/// packed and blocked for the caches (tasks of up to gemm_n_block
/// features, the input axis in chunks of gemm_k_block); with 0, unpacked
/// column panels over the whole input. `isOutput`: the pipeline's output
/// (else computed at root).
void scheduleProjectionCpu(Projection proj, const AttentionVars &v,
                           int64_t outFeatures, const ScheduleParams &p,
                           bool isOutput);

/// Rotary positions: the cos/sin table, computed once per call.
void scheduleRotaryCpu(RotaryPositions rope, const AttentionVars &v);
/// QK-norm: each group's inverse RMS once per call; the normalised
/// columns are inlined into their readers.
void scheduleRmsNormCpu(RmsNorm norm, const AttentionVars &v,
                        const ScheduleParams &p);
/// The keys after QK-norm and rotary positions, once per call.
void scheduleKeysOnceCpu(Halide::Func keys, const AttentionVars &v,
                         const ScheduleParams &p);

} // namespace mhagen::hl

#endif
