#include "RotaryPositions.h"

#include "mhagen/spec/Rope.h"

#include <vector>

namespace mhagen::hl {

using namespace Halide;

RotaryPositions defineRotaryTable(const AttentionSpec &s, Var j, Var t, Var b,
                                  ImageParam positions, Expr firstPosition) {
  const std::vector<double> inv = ropeInverseFrequencies(s.rope, s.d_k);
  Buffer<double> table(static_cast<int>(inv.size()), "rope_inv_freq");
  for (size_t f = 0; f < inv.size(); ++f)
    table(static_cast<int>(f)) = inv[f];
  const double gain = ropeAttentionFactor(s.rope);
  // The angle and its cos and sin in double: at position 10^5 an f32 angle
  // is off by ~4e-3 rad; rounding the results to f32 adds 6e-8.
  // Tokens past the call's (whole GEMM blocks) read the last position.
  Expr position = t;
  if (s.positionsAtRuntime)
    position = positions(clamp(t, 0, positions.dim(0).extent() - 1), b);
  else if (firstPosition.defined())
    position = firstPosition + t;
  const Expr angle = cast<double>(position) * table(j);
  RotaryPositions r;
  r.cosSin = Func("rope_cos_sin");
  r.perBatch = s.positionsAtRuntime || firstPosition.defined();
  const Expr g = Expr(gain);
  const Tuple value(cast<float>(cos(angle) * g), cast<float>(sin(angle) * g));
  if (r.perBatch)
    r.cosSin(j, t, b) = value;
  else
    r.cosSin(j, t) = value;
  return r;
}

Expr rotateChannel(const AttentionSpec &s, const RotaryPositions &rope,
                   Func proj, Expr c, Expr head, Expr t, Expr b) {
  const int dk = static_cast<int>(s.d_k);
  const int dim = static_cast<int>(s.rope.rotated(s.d_k));
  const int half = dim / 2;
  const Expr base = head * dk;
  Expr partner, freq, first;
  if (s.rope.pairing == RopePairing::Interleaved) {
    first = c % 2 == 0;
    partner = select(first, c + 1, c - 1);
    freq = c / 2;
  } else {
    first = c < half;
    partner = select(first, c + half, c - half);
    freq = select(first, c, c - half);
  }
  // Unrotated channels (c >= dim) read a partner and frequency inside the
  // rotated ones, so every access stays in bounds.
  partner = clamp(partner, 0, dim - 1);
  freq = clamp(freq, 0, half - 1);
  const Expr x = proj(base + c, t, b);
  const Expr other = proj(base + partner, t, b);
  const Tuple entry = rope.at(freq, t, b);
  const Expr cosA = entry[0], sinA = entry[1];
  const Expr rotated = x * cosA + select(first, -other, other) * sinA;
  return select(c < dim, rotated, x);
}

} // namespace mhagen::hl
