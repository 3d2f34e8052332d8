// The finite stand-ins of the online softmax, shared by both backends'
// algorithms (the Halide algorithm, the MLIR lowering; docs/design.md §1).
// Every value stays finite, so fast-math lowering is exact: a hidden key's
// score is kLowestScore, and exp(kLowestScore - m) underflows to 0.
#ifndef MHAGEN_SPEC_SOFTMAXNUMERICS_H
#define MHAGEN_SPEC_SOFTMAXNUMERICS_H

namespace mhagen {

/// The running maximum before any key, and the score of a hidden key. Not
/// -inf (the identity of a max reduction): -inf - -inf is NaN, and
/// fast-math code may assume there are no infinities.
inline constexpr float kLowestScore = -1e30f;

/// Lower bound of a row's normaliser when dividing by it; a row that saw
/// no key (normaliser 0) outputs zeros instead.
inline constexpr float kTinySum = 1e-30f;

} // namespace mhagen

#endif
