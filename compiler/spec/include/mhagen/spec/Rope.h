// Rotary position embedding (RoPE), the spec's `rope` field: which channels
// of each head rotate, how they pair, and the inverse frequencies of the
// rotation, with the semantics of Hugging Face transformers
// (modeling_rope_utils.py: default, linear, llama3 and yarn) and of the
// models' apply_rotary_pos_emb (docs/design.md §1, "Rotary positions").
#ifndef MHAGEN_SPEC_ROPE_H
#define MHAGEN_SPEC_ROPE_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mhagen {

/// How the rotated channels pair up.
enum class RopePairing {
  None,       ///< no rotation
  Half,       ///< channel j with j + dim/2 (GPT-NeoX, Llama, Qwen: rotate_half)
  Interleaved ///< channel 2j with 2j + 1 (GPT-J, Meta's original Llama)
};

/// Frequency scaling for contexts past the trained length.
struct RopeScaling {
  enum class Kind { None, Linear, Llama3, Yarn } kind = Kind::None;
  double factor = 1;
  double lowFreqFactor = 1, highFreqFactor = 4; ///< llama3
  int64_t originalMaxPositions = 0;             ///< llama3 and yarn
  double betaFast = 32, betaSlow = 1;           ///< yarn
  /// yarn: the factor cos and sin are multiplied by; unset:
  /// 0.1 ln(factor) + 1 (HF's default).
  std::optional<double> attentionFactor;

  bool operator==(const RopeScaling &o) const;
};

struct RopeSpec {
  RopePairing pairing = RopePairing::None;
  double theta = 10000; ///< the base of the frequencies
  /// Rotated channels per head (the first `dim`; the rest pass through);
  /// 0: all of dk.
  int64_t dim = 0;
  RopeScaling scaling;

  bool enabled() const { return pairing != RopePairing::None; }
  /// The rotated channels for head width dk.
  int64_t rotated(int64_t dk) const { return dim > 0 ? dim : dk; }
  /// Canonical text: none, half(theta = 500000), interleaved(theta =
  /// 10000, dim = 32, scaling = linear(factor = 2)), ...
  std::string str() const;
  bool operator==(const RopeSpec &o) const;
  bool operator!=(const RopeSpec &o) const { return !(*this == o); }
};

/// Parses `none` or `PAIRING(theta = T[, dim = R][, scaling = S])`, S one
/// of linear(factor = F), llama3(factor = F, low_freq_factor = L,
/// high_freq_factor = H, original_max_position_embeddings = N) and
/// yarn(factor = F, original_max_position_embeddings = N[, beta_fast = B]
/// [, beta_slow = B][, attention_factor = A]). Returns "" or what is wrong.
std::string parseRope(const std::string &text, RopeSpec &out);
/// The rule a parsed rope breaks for head width dk, or "".
std::string ropeRule(const RopeSpec &r, int64_t dk);

/// inv_freq[j] for j < rotated(dk) / 2, in double, as transformers
/// computes them (there in f32).
std::vector<double> ropeInverseFrequencies(const RopeSpec &r, int64_t dk);
/// The factor cos and sin are multiplied by (yarn's attention factor; 1
/// otherwise).
double ropeAttentionFactor(const RopeSpec &r);
/// The channel channel `c` (< rotated) pairs with, its frequency index, and
/// the sign of the partner's term: out[c] = x[c] cos - x[partner] sin for
/// the first of a pair, x[c] cos + x[partner] sin for the second.
struct RopeLane {
  int64_t partner, freq;
  double sign;
};
RopeLane ropeLane(const RopeSpec &r, int64_t dk, int64_t c);

} // namespace mhagen

#endif
