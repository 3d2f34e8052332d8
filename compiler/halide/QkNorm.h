// QK-norm (the spec's `qk_norm`) in the Halide layer: the RMSNorm of the
// projected queries or keys, as plain math over a projection's columns
// (docs/design.md §1, "QK-norm").
#ifndef MHAGEN_HALIDE_QKNORM_H
#define MHAGEN_HALIDE_QKNORM_H

#include "mhagen/spec/AttentionSpec.h"

#include <Halide.h>

#include <string>

namespace mhagen::hl {

struct RmsNorm {
  /// squares(group, t, b): the sum of the group's `width` squared columns
  /// over `channels`.
  Halide::Func squares;
  Halide::RDom channels;
  int width = 0;
  /// invRms(group, t, b): 1 / sqrt(mean of the group's squares + eps); a
  /// group is a head (qk_norm = head) or the whole projection (group 0).
  Halide::Func invRms;
  /// normed(n, t, b): column n of the projection times its group's invRms
  /// and its weight.
  Halide::Func normed;
};

/// The RMSNorm of `proj` (out(n, t, b), `heads` heads of dk columns) with
/// weights `weight(w)` (f32; w < the group width) as the spec's qk_norm
/// says. `name` prefixes the Funcs (q, k).
RmsNorm defineRmsNorm(const std::string &name, const AttentionSpec &spec,
                      Halide::Func proj, Halide::Func weight, int64_t heads,
                      Halide::Var n, Halide::Var t, Halide::Var b);

} // namespace mhagen::hl

#endif
