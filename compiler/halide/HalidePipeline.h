// The Halide algorithm of one spec, built on the ABI model's parameters:
// the kernel's inputs and output (one ImageParam per tensor of
// mhagen/abi_model.hpp), the projections of op = layer and the attention
// core (AttentionAlgorithm.h), and the schedules applied to them
// (CpuSchedule.h / GpuSchedule.h).
#ifndef MHAGEN_HALIDE_HALIDEPIPELINE_H
#define MHAGEN_HALIDE_HALIDEPIPELINE_H

#include "AttentionAlgorithm.h"
#include "QkNorm.h"
#include "RotaryPositions.h"

#include "mhagen/spec/AttentionSpec.h"
#include "mhagen/spec/ScheduleParams.h"

#include <Halide.h>

#include <optional>
#include <vector>

namespace mhagen::hl {

/// GPU targets keep bf16 as its 16-bit pattern and convert by hand.
bool bf16AsBits(const AttentionSpec &s);

/// Everything the schedules and the compiler need about one built pipeline.
struct BuiltPipeline {
  AttentionVars v;
  std::vector<Halide::Argument> args; ///< in the ABI model's order
  std::vector<Halide::ImageParam> inputs;
  Halide::Func output;
  /// lse = true: the second output, lse(hd, t, b). core(c, hd, t, b): the
  /// attention rows, value or (value, m, l), that the outputs read (sdpa
  /// with lse) or the output projection reads (layer).
  Halide::Func lse, core;
  AttentionStages attention;
  /// The decode variant (CPU sdpa and cached layer, T_q <= its tile), when
  /// built; the rows take it where isDecode holds.
  std::optional<AttentionStages> decode;
  Halide::Expr isDecode;
  std::vector<Projection> projections; ///< q, k, v, out (layer only)
  /// The rotary table (layer with rope only).
  std::optional<RotaryPositions> rope;
  /// The RMSNorms of q and k (layer with qk_norm only).
  std::optional<RmsNorm> qNorm, kNorm;
  /// keys(c, g, t, b): the keys normalised and rotated once per call, since
  /// every query tile reads them (layer with qk_norm or rope only).
  std::optional<Halide::Func> keys;
  /// kv_cache = contiguous in a layer: the call's tokens' K and V rows in
  /// the cache's storage type, [B, T, kv, dk]: outputs the wrapper appends
  /// to the cache after the pipeline (halide_wrapper.c.in).
  std::optional<Halide::Func> newKeys, newValues;
  /// kv_dtype = i8: the new rows in f32 (computed once), their maxima, and
  /// their scales [B, T, kv] (outputs the wrapper appends beside them).
  std::optional<Halide::Func> keyRows, valueRows, keyRowMax, valueRowMax;
  std::optional<Halide::Func> newKeyScales, newValueScales;
  std::vector<int64_t> projectionWidths;
  Halide::ImageParam kvLens;
};

/// The pipeline's outputs: the ABI model's (out, then lse), then a layer
/// cache's new K and V rows (and with kv_dtype = i8 their scales).
std::vector<Halide::Func> outputsOf(const BuiltPipeline &bp,
                                    const AttentionSpec &s);

/// The algorithm for the spec: inputs, projections (layer), attention core.
/// A layer's calls of at most `streamRows` token rows (0: none) read the
/// projections' weight-streaming sums (Projection).
BuiltPipeline
buildPipeline(const AttentionSpec &s, const AttentionTiles &tiles,
              const std::optional<AttentionTiles> &decodeTiles = {},
              int streamRows = 0);
void applyCpuSchedule(BuiltPipeline &bp, const AttentionSpec &s,
                      const ScheduleParams &p);
void applyGpuSchedule(BuiltPipeline &bp, const AttentionSpec &s,
                      const ScheduleParams &p);
/// Estimates for Halide's autoschedulers (the hand schedules ignore them).
void setEstimates(BuiltPipeline &bp, const AttentionSpec &s);

} // namespace mhagen::hl

#endif
