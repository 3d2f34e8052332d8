// The reference kernels: plain loops that follow docs/design.md §1
// line by line. They are the oracle for every numerical test in mhagen, so
// they favour being obviously right over being fast.
//
// Layouts (row-major, innermost index last):
//   sdpa:  q [B, Tq, h, dk]   k [B, Tkv, kv, dk]   v [B, Tkv, kv, dv]
//          out [B, Tq, h, dv]
//   layer: x [B, T, d]  W_Q [d, h*dk]  W_K [d, kv*dk]  W_V [d, kv*dv]
//          W_O [h*dv, d]  b_Q [h*dk]  b_K [kv*dk]  b_V [kv*dv]  b_O [d]
//          y [B, T, d]
//   kvLens [B]: per-batch key lengths (mask `padding` only).
// Inputs are f32 values; callers testing bf16/f16 kernels round the inputs
// to that type first (Numerics.h), so both sides see the same numbers.
#ifndef MHAGEN_REFERENCE_REFERENCE_H
#define MHAGEN_REFERENCE_REFERENCE_H

#include "mhagen/spec/AttentionSpec.h"

#include <cstdint>
#include <vector>

namespace mhagen::ref {

/// [B, T, heads*width] -> [B, heads, T, width]: head i owns features
/// i*width .. (i+1)*width-1 of every token.
std::vector<float> splitHeads(const std::vector<float> &x, int64_t B, int64_t T,
                              int64_t heads, int64_t width);
/// Exact inverse of splitHeads: [B, heads, T, width] -> [B, T, heads*width].
std::vector<float> mergeHeads(const std::vector<float> &x, int64_t B, int64_t T,
                              int64_t heads, int64_t width);

/// Numerically stable softmax over the visible entries of one row
/// (subtract the row max); hidden entries get 0. A row with nothing
/// visible is all zeros.
template <typename Acc>
std::vector<Acc> softmax(const std::vector<Acc> &scores,
                         const std::vector<bool> &visible);

/// y[rows, out] = x[rows, in] * w[in, out] (+ bias[out]).
template <typename Acc>
std::vector<Acc> project(const float *x, int64_t rows, int64_t in,
                         const float *w, int64_t out, const float *bias);

/// The call-time values of the score modifiers (docs/design.md §2).
struct ModifierArgs {
  const float *sinks = nullptr;       ///< [h]; required with sinks = learned
  const float *alibiSlopes = nullptr; ///< [h]; required with alibi = runtime
  const float *scale = nullptr;       ///< [1]; required with scale = runtime
};

/// Softmax of one row with the spec's learned sink (a key with score
/// `sink` and value 0) in the denominator: the visible entries'
/// probabilities, which then sum to less than 1. Without a sink it is
/// softmax().
template <typename Acc>
std::vector<Acc> softmaxWithSink(const std::vector<Acc> &scores,
                                 const std::vector<bool> &visible,
                                 const Acc *sink);

struct SdpaArgs {
  int64_t B = 1, Tq = 1, Tkv = 1;
  const float *q = nullptr, *k = nullptr, *v = nullptr;
  const int32_t *kvLens = nullptr; ///< required when the mask has padding
  /// ragged = true: sequence b has qLens[b] queries, rows [0, qLens[b])
  /// of its Tq (the others stay 0), its last tokens (positions i +
  /// kvLens[b] - qLens[b]); required for a ragged spec.
  const int32_t *qLens = nullptr;
  ModifierArgs modifiers;
  /// Also each computed row's log-sum-exp (docs/design.md §1,
  /// "Logsumexp"): log(e^sink + sum_j e^s_ij) over the visible keys (and
  /// the head's sink), -inf for a row that sees nothing; [B, Tq, h] like
  /// the kernels' `lse` output (rows not computed are left 0).
  std::vector<double> *lse = nullptr;
  /// Compute only these query tokens (others are left 0); null = all.
  const std::vector<int64_t> *rows = nullptr;
};

/// Attention core for op = sdpa; returns out [B, Tq, h, dv].
template <typename Acc>
std::vector<Acc> sdpa(const AttentionSpec &spec, const SdpaArgs &a);

/// What op = layer does to its projected q and k rows before attending:
/// the spec's QK-norm, then its rotary positions (docs/design.md §1).
class QkTransform {
public:
  explicit QkTransform(const AttentionSpec &spec);
  /// One token's row of `heads` heads (dk channels each) at `position`;
  /// `normWeight` is q_norm or k_norm (unused without qk_norm).
  template <typename Acc>
  void apply(int64_t heads, const float *normWeight, int64_t position,
             Acc *row) const;

private:
  const AttentionSpec &spec_;
  std::vector<double> invFreq_; ///< rope's inverse frequencies
  double gain_ = 1;             ///< rope's attention factor
};

struct LayerArgs {
  int64_t B = 1, T = 1;
  const float *x = nullptr;
  const float *wq = nullptr, *wk = nullptr, *wv = nullptr, *wo = nullptr;
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr, *bo = nullptr;
  /// qk_norm weights: [dk] each (head) or [h*dk] and [kv*dk] (projection).
  const float *qNorm = nullptr, *kNorm = nullptr;
  /// positions = runtime: [B, T], each token's position; null: token t
  /// at position t.
  const int32_t *positions = nullptr;
  const int32_t *kvLens = nullptr;
  /// kv_cache = contiguous: the cache before the call, [B, Tkv, kv, dk]
  /// and [B, Tkv, kv, dv] as stored (in f32), Tkv its capacity; kvLens
  /// holds each sequence's length after the call, whose last T tokens are
  /// the call's (docs/design.md §5, "The layer's KV cache").
  const float *kCache = nullptr, *vCache = nullptr;
  int64_t Tkv = 0;
  /// The cache's storage of one new K/V row (one token's kv head, `width`
  /// values, rounded in place to what the cache holds; null: kept as
  /// computed); the attention reads the new rows as stored.
  void (*store)(double *row, int64_t width) = nullptr;
  /// Also the rows the call appends, as stored: [B, T, kv, dk] and
  /// [B, T, kv, dv].
  std::vector<double> *newK = nullptr, *newV = nullptr;
  ModifierArgs modifiers;
  /// Also each computed row's log-sum-exp, [B, T, h] (others left 0).
  std::vector<double> *lse = nullptr;
  /// Compute only these tokens' outputs (others are left 0); null = all.
  const std::vector<int64_t> *rows = nullptr;
};

/// Full layer for op = layer: projections, QK-norm, rotary positions, split,
/// attention per head with the shared K/V head g = i / (h/kv) (over the
/// cache and the call's rows, with a cache), merge, output projection.
/// Returns y [B, T, d].
template <typename Acc>
std::vector<Acc> layer(const AttentionSpec &spec, const LayerArgs &a);

} // namespace mhagen::ref

#endif
