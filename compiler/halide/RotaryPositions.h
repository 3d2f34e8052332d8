// Rotary positions (the spec's `rope`) in the Halide layer: the cos and sin
// of every (frequency, token) pair, computed once per call in double, and
// the rotation of a projected head's channels as plain math
// (docs/design.md §1, "Rotary positions").
#ifndef MHAGEN_HALIDE_ROTARYPOSITIONS_H
#define MHAGEN_HALIDE_ROTARYPOSITIONS_H

#include "mhagen/spec/AttentionSpec.h"

#include <Halide.h>

namespace mhagen::hl {

struct RotaryPositions {
  /// (cos, sin) of the angle at frequency j, in f32, times the attention
  /// factor: cosSin(j, t) of token t when positions are implicit (every
  /// batch shares them), cosSin(j, t, b) of token t of batch b when they
  /// are a call argument.
  Halide::Func cosSin;
  bool perBatch = false;
  /// The table's entry for frequency j of token t of batch b.
  Halide::Tuple at(Halide::Expr j, Halide::Expr t, Halide::Expr b) const {
    return perBatch ? cosSin(j, t, b) : cosSin(j, t);
  }
};

/// The table for `spec.rope` (enabled) over tokens `t` of batches `b`:
/// inverse frequencies from the spec, embedded as constants; token t sits
/// at position t, at firstPosition(b) + t (a layer's cache: the tokens
/// before the call; a defined Expr of b), or at positions(t, b)
/// (positions = runtime; a defined ImageParam, T tokens wide).
RotaryPositions defineRotaryTable(const AttentionSpec &spec, Halide::Var j,
                                  Halide::Var t, Halide::Var b,
                                  Halide::ImageParam positions,
                                  Halide::Expr firstPosition);
/// Channel c of head `head` of `proj` (out(n, t, b), head i in columns
/// i*dk..(i+1)*dk-1) after the rotation: x[c] cos - x[partner] sin for the
/// first of a pair, x[c] cos + x[partner] sin for the second; unrotated
/// channels pass. c and head are separate so that bounds inference keeps
/// every read inside the head.
Halide::Expr rotateChannel(const AttentionSpec &spec,
                           const RotaryPositions &rope, Halide::Func proj,
                           Halide::Expr c, Halide::Expr head, Halide::Expr t,
                           Halide::Expr b);

} // namespace mhagen::hl

#endif
