#include "mhagen/reference/Reference.h"

#include "mhagen/spec/CostModel.h"
#include "mhagen/spec/Rope.h"
#include "mhagen/spec/ScoreModifiers.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>

namespace mhagen::ref {

std::vector<float> splitHeads(const std::vector<float> &x, int64_t B, int64_t T,
                              int64_t heads, int64_t width) {
  std::vector<float> out(x.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t hd = 0; hd < heads; ++hd)
        for (int64_t c = 0; c < width; ++c)
          out[((b * heads + hd) * T + t) * width + c] =
              x[(b * T + t) * heads * width + hd * width + c];
  return out;
}

std::vector<float> mergeHeads(const std::vector<float> &x, int64_t B, int64_t T,
                              int64_t heads, int64_t width) {
  std::vector<float> out(x.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t hd = 0; hd < heads; ++hd)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < width; ++c)
          out[(b * T + t) * heads * width + hd * width + c] =
              x[((b * heads + hd) * T + t) * width + c];
  return out;
}

template <typename Acc>
std::vector<Acc> softmax(const std::vector<Acc> &scores,
                         const std::vector<bool> &visible) {
  return softmaxWithSink<Acc>(scores, visible, nullptr);
}

template <typename Acc>
std::vector<Acc> softmaxWithSink(const std::vector<Acc> &scores,
                                 const std::vector<bool> &visible,
                                 const Acc *sink) {
  // A sink joins the max and the sum; its probability is dropped (its
  // value is 0). A row with nothing visible (and no sink) outputs zeros,
  // not NaN.
  std::vector<Acc> p(scores.size(), Acc(0));
  Acc mx = sink ? *sink : -std::numeric_limits<Acc>::infinity();
  bool any = sink != nullptr;
  for (size_t j = 0; j < scores.size(); ++j)
    if (visible[j]) {
      mx = std::max(mx, scores[j]);
      any = true;
    }
  if (!any)
    return p;
  Acc sum = sink ? std::exp(*sink - mx) : Acc(0);
  for (size_t j = 0; j < scores.size(); ++j)
    if (visible[j]) {
      p[j] = std::exp(scores[j] - mx);
      sum += p[j];
    }
  for (auto &x : p)
    x /= sum;
  return p;
}

template <typename Acc>
std::vector<Acc> project(const float *x, int64_t rows, int64_t in,
                         const float *w, int64_t out, const float *bias) {
  // y[r][o] = bias[o] + sum_i x[r][i] * w[i][o], summed over i in order;
  // the loop runs i outside o so the inner loop walks w's rows.
  std::vector<Acc> y(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r) {
    Acc *yr = &y[static_cast<size_t>(r * out)];
    for (int64_t o = 0; o < out; ++o)
      yr[o] = bias ? Acc(bias[o]) : Acc(0);
    for (int64_t i = 0; i < in; ++i) {
      const Acc xi = Acc(x[r * in + i]);
      const float *wi = w + i * out;
      for (int64_t o = 0; o < out; ++o)
        yr[o] += xi * Acc(wi[o]);
    }
  }
  return y;
}

// Attention of one query head over its key/value head, on tensors already
// split into [T, width] rows. Writes Tq x dv outputs.
// The score modifiers of one query head (docs/design.md §2).
struct HeadModifiers {
  std::optional<double> sink;
  double slope = 0; ///< ALiBi slope; 0 without ALiBi
  double scale = 0; ///< the score scale (compiled in or the call's)
};

static HeadModifiers headModifiers(const AttentionSpec &s,
                                   const ModifierArgs &m, int64_t head) {
  HeadModifiers hm;
  hm.scale = s.effectiveScale();
  if (s.scaleAtRuntime) {
    if (!m.scale)
      throw std::invalid_argument("reference: scale = runtime but no scale");
    hm.scale = *m.scale; // the kernels compute with this f32 value
  }
  if (s.sinks) {
    if (!m.sinks)
      throw std::invalid_argument("reference: sinks = learned but no sinks");
    hm.sink = m.sinks[head];
  }
  if (s.alibi == AlibiSlopes::Runtime) {
    if (!m.alibiSlopes)
      throw std::invalid_argument(
          "reference: alibi = runtime but no alibi_slopes");
    hm.slope = m.alibiSlopes[head];
  } else if (s.alibi == AlibiSlopes::Standard) {
    // The kernels hold the slopes as f32: the reference takes those values.
    hm.slope = static_cast<float>(standardAlibiSlopes(s.h)[head]);
  }
  return hm;
}

template <typename Acc>
static void attendOneHead(const AttentionSpec &s, const HeadModifiers &hm,
                          const Acc *q, int64_t qStride, const Acc *k,
                          int64_t kStride, const Acc *v, int64_t vStride,
                          int64_t Tq, int64_t Tkv, int64_t kvLen, Acc *out,
                          int64_t outStride, double *lse, int64_t lseStride,
                          const std::vector<int64_t> &rows) {
  const Acc scale = static_cast<Acc>(hm.scale);
  const Acc sink = hm.sink ? static_cast<Acc>(*hm.sink) : Acc(0);
  std::vector<Acc> scores(static_cast<size_t>(Tkv));
  std::vector<bool> visible(static_cast<size_t>(Tkv));
  // A paged cache or a ragged batch: each sequence ends at its own length
  // (its queries are its last T_q tokens) and hides the keys past it
  // (docs/design.md §5).
  const MaskSpec mask = s.effectiveMask();
  const int64_t seqEnd = s.keysPerSequence() ? kvLen : Tkv;
  for (int64_t i : rows) {
    for (int64_t j = 0; j < Tkv; ++j) {
      visible[j] = maskAllows(mask, i, j, Tq, seqEnd, kvLen);
      Acc dot = 0;
      if (visible[j])
        for (int64_t c = 0; c < s.d_k; ++c)
          dot += q[i * qStride + c] * k[j * kStride + c];
      Acc score = dot * scale;
      if (s.softcap) {
        const Acc cap = static_cast<Acc>(*s.softcap);
        score = cap * std::tanh(score / cap);
      }
      // ALiBi: slope * (j - pos(i)), pos(i) = i + end - Tq (bottom-right).
      score +=
          static_cast<Acc>(hm.slope) * static_cast<Acc>(j - (i + seqEnd - Tq));
      scores[j] = score;
    }
    std::vector<Acc> p =
        softmaxWithSink(scores, visible, hm.sink ? &sink : nullptr);
    if (lse) {
      // log of the softmax's denominator, taken around its max.
      double mx = hm.sink ? static_cast<double>(sink)
                          : -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < Tkv; ++j)
        if (visible[j])
          mx = std::max(mx, static_cast<double>(scores[j]));
      double sum = hm.sink ? std::exp(static_cast<double>(sink) - mx) : 0.0;
      for (int64_t j = 0; j < Tkv; ++j)
        if (visible[j])
          sum += std::exp(static_cast<double>(scores[j]) - mx);
      lse[i * lseStride] = sum > 0 ? mx + std::log(sum)
                                   : -std::numeric_limits<double>::infinity();
    }
    for (int64_t c = 0; c < s.d_v; ++c) {
      Acc acc = 0;
      for (int64_t j = 0; j < Tkv; ++j)
        if (p[j] != Acc(0))
          acc += p[j] * v[j * vStride + c];
      out[i * outStride + c] = acc;
    }
  }
}

static std::vector<int64_t> rowsOrAll(const std::vector<int64_t> *rows,
                                      int64_t T) {
  if (rows)
    return *rows;
  std::vector<int64_t> all(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i)
    all[static_cast<size_t>(i)] = i;
  return all;
}

static int64_t kvLength(const AttentionSpec &s, const int32_t *kvLens,
                        int64_t b, int64_t Tkv) {
  if (!s.effectiveMask().hasPadding())
    return Tkv;
  if (!kvLens)
    throw std::invalid_argument("reference: mask has padding but no kvLens");
  return kvLens[b];
}

template <typename Acc>
std::vector<Acc> sdpa(const AttentionSpec &s, const SdpaArgs &a) {
  const int64_t h = s.h, kv = s.n_kv, dk = s.d_k, dv = s.d_v;
  std::vector<Acc> out(static_cast<size_t>(a.B * a.Tq * h * dv));
  if (a.lse)
    a.lse->assign(static_cast<size_t>(a.B * a.Tq * h), 0.0);
  // Widen the inputs once; then each head is a strided view.
  std::vector<Acc> q(a.q, a.q + a.B * a.Tq * h * dk);
  std::vector<Acc> k(a.k, a.k + a.B * a.Tkv * kv * dk);
  std::vector<Acc> v(a.v, a.v + a.B * a.Tkv * kv * dv);
  const std::vector<int64_t> all = rowsOrAll(a.rows, a.Tq);
  if (s.ragged && !a.qLens)
    throw std::invalid_argument("reference: ragged = true but no qLens");
  for (int64_t b = 0; b < a.B; ++b) {
    const int64_t len = kvLength(s, a.kvLens, b, a.Tkv);
    // A ragged batch: this sequence's own query count.
    const int64_t Tq = s.ragged ? a.qLens[b] : a.Tq;
    std::vector<int64_t> rows;
    for (int64_t r : all)
      if (r < Tq)
        rows.push_back(r);
    for (int64_t i = 0; i < h; ++i) {
      const int64_t g = i / (h / kv); // the shared key/value head
      attendOneHead<Acc>(
          s, headModifiers(s, a.modifiers, i), &q[(b * a.Tq * h + i) * dk],
          h * dk, &k[(b * a.Tkv * kv + g) * dk], kv * dk,
          &v[(b * a.Tkv * kv + g) * dv], kv * dv, Tq, a.Tkv, len,
          &out[(b * a.Tq * h + i) * dv], h * dv,
          a.lse ? &(*a.lse)[(b * a.Tq) * h + i] : nullptr, h, rows);
    }
  }
  return out;
}

QkTransform::QkTransform(const AttentionSpec &s) : spec_(s) {
  if (s.rope.enabled()) {
    invFreq_ = ropeInverseFrequencies(s.rope, s.d_k);
    gain_ = ropeAttentionFactor(s.rope);
  }
}

template <typename Acc>
void QkTransform::apply(int64_t heads, const float *normWeight,
                        int64_t position, Acc *row) const {
  const int64_t dk = spec_.d_k;
  const QkNormSpec &norm = spec_.qk_norm;
  if (norm.enabled()) {
    // One root mean square per group of groupWidth channels, then each
    // channel's weight.
    if (!normWeight)
      throw std::invalid_argument("reference: qk_norm is set but its "
                                  "weights are missing");
    const int64_t width = norm.groupWidth(heads, dk);
    for (int64_t g = 0; g < heads * dk / width; ++g) {
      Acc *x = row + g * width;
      Acc squares = 0;
      for (int64_t c = 0; c < width; ++c)
        squares += x[c] * x[c];
      const Acc inv = Acc(1) / std::sqrt(squares / Acc(width) + Acc(norm.eps));
      for (int64_t c = 0; c < width; ++c)
        x[c] = x[c] * inv * Acc(normWeight[c]);
    }
  }
  const RopeSpec &rope = spec_.rope;
  if (!rope.enabled())
    return;
  // The first rope.rotated(dk) channels of each head rotate; the angle and
  // its cos and sin in double, so the f64 reference is exact up to libm.
  const int64_t dim = rope.rotated(dk);
  std::vector<Acc> head(static_cast<size_t>(dim));
  for (int64_t i = 0; i < heads; ++i) {
    Acc *x = row + i * dk;
    std::copy(x, x + dim, head.begin());
    for (int64_t c = 0; c < dim; ++c) {
      const RopeLane lane = ropeLane(rope, dk, c);
      const double angle = static_cast<double>(position) *
                           invFreq_[static_cast<size_t>(lane.freq)];
      x[c] = head[c] * Acc(std::cos(angle) * gain_) +
             Acc(lane.sign) * head[lane.partner] * Acc(std::sin(angle) * gain_);
    }
  }
}

template <typename Acc>
std::vector<Acc> layer(const AttentionSpec &s, const LayerArgs &a) {
  const int64_t B = a.B, T = a.T, d = s.d, h = s.h, kv = s.n_kv;
  const int64_t dk = s.d_k, dv = s.d_v;
  const int64_t rows = B * T;
  const bool bias = s.bias;
  const std::vector<int64_t> picked = rowsOrAll(a.rows, T);
  // Projections: [B*T, d] x [d, n] -> [B*T, n]. Q only for the picked
  // tokens (K and V are needed for every token).
  std::vector<Acc> Q(static_cast<size_t>(rows * h * dk));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t : picked) {
      std::vector<Acc> qt = project<Acc>(a.x + (b * T + t) * d, 1, d, a.wq,
                                         h * dk, bias ? a.bq : nullptr);
      std::copy(qt.begin(), qt.end(), Q.begin() + (b * T + t) * h * dk);
    }
  std::vector<Acc> K =
      project<Acc>(a.x, rows, d, a.wk, kv * dk, bias ? a.bk : nullptr);
  std::vector<Acc> V =
      project<Acc>(a.x, rows, d, a.wv, kv * dv, bias ? a.bv : nullptr);
  // QK-norm, then rotary positions: token t of the call sits at position
  // t, or where the call's positions say.
  if (s.positionsAtRuntime && !a.positions)
    throw std::invalid_argument("reference: positions = runtime but no "
                                "positions");
  const QkTransform transform(s);
  const bool cache = s.cachedLayer();
  if (cache && (!a.kCache || !a.vCache || !a.kvLens || a.Tkv < T))
    throw std::invalid_argument("reference: kv_cache = contiguous but no "
                                "cache, lengths or capacity");
  // Tokens in each sequence's cache before the call (0 without one).
  auto before = [&](int64_t b) {
    return cache ? int64_t(a.kvLens[b]) - T : int64_t(0);
  };
  auto position = [&](int64_t b, int64_t t) {
    return s.positionsAtRuntime ? int64_t(a.positions[b * T + t])
                                : before(b) + t;
  };
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t)
      transform.apply(kv, a.kNorm, position(b, t),
                      &K[static_cast<size_t>((b * T + t) * kv * dk)]);
    for (int64_t t : picked)
      transform.apply(h, a.qNorm, position(b, t),
                      &Q[static_cast<size_t>((b * T + t) * h * dk)]);
  }
  // Split heads by feature columns and attend: head i reads columns
  // i*dk..(i+1)*dk-1 of Q, and K/V head g = i / (h/kv).
  // With a cache: the new rows as stored, after the cache's rows.
  if (cache) {
    const std::pair<std::vector<Acc> *, int64_t> stored[] = {{&K, dk},
                                                             {&V, dv}};
    for (const auto &[m, width] : stored)
      if (a.store)
        for (size_t at = 0; at < m->size(); at += width) {
          std::vector<double> row(m->begin() + at, m->begin() + at + width);
          a.store(row.data(), width);
          std::copy(row.begin(), row.end(), m->begin() + at);
        }
    if (a.newK)
      a.newK->assign(K.begin(), K.end());
    if (a.newV)
      a.newV->assign(V.begin(), V.end());
  }
  const int64_t Tkv = cache ? a.Tkv : T;
  auto keysOf = [&](const std::vector<Acc> &fresh, const float *cached,
                    int64_t width, int64_t b) {
    if (!cache)
      return std::vector<Acc>(fresh.begin() + b * T * width,
                              fresh.begin() + (b + 1) * T * width);
    std::vector<Acc> all(static_cast<size_t>(Tkv * width), Acc(0));
    for (int64_t j = 0; j < before(b) * width; ++j)
      all[static_cast<size_t>(j)] = Acc(cached[b * Tkv * width + j]);
    std::copy(fresh.begin() + b * T * width,
              fresh.begin() + (b + 1) * T * width,
              all.begin() + before(b) * width);
    return all;
  };
  std::vector<Acc> O(static_cast<size_t>(rows * h * dv));
  if (a.lse)
    a.lse->assign(static_cast<size_t>(rows * h), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = kvLength(s, a.kvLens, b, Tkv);
    const std::vector<Acc> Kb = keysOf(K, a.kCache, kv * dk, b);
    const std::vector<Acc> Vb = keysOf(V, a.vCache, kv * dv, b);
    for (int64_t i = 0; i < h; ++i) {
      const int64_t g = i / (h / kv);
      attendOneHead<Acc>(s, headModifiers(s, a.modifiers, i),
                         &Q[b * T * h * dk + i * dk], h * dk, &Kb[g * dk],
                         kv * dk, &Vb[g * dv], kv * dv, T, Tkv, len,
                         &O[b * T * h * dv + i * dv], h * dv,
                         a.lse ? &(*a.lse)[b * T * h + i] : nullptr, h, picked);
    }
  }
  // Merged heads [B*T, h*dv] x W_O [h*dv, d] (+ b_O).
  std::vector<Acc> Y(static_cast<size_t>(rows * d));
  std::vector<int64_t> outRows;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t : picked)
      outRows.push_back(b * T + t);
  for (int64_t r : outRows) {
    Acc *yr = &Y[static_cast<size_t>(r * d)];
    for (int64_t o = 0; o < d; ++o)
      yr[o] = bias ? Acc(a.bo[o]) : Acc(0);
    for (int64_t c = 0; c < h * dv; ++c) {
      const Acc oc = O[static_cast<size_t>(r * h * dv + c)];
      const float *wc = a.wo + c * d;
      for (int64_t o = 0; o < d; ++o)
        yr[o] += oc * Acc(wc[o]);
    }
  }
  return Y;
}

template std::vector<float> softmax(const std::vector<float> &,
                                    const std::vector<bool> &);
template std::vector<double> softmax(const std::vector<double> &,
                                     const std::vector<bool> &);
template std::vector<float> softmaxWithSink(const std::vector<float> &,
                                            const std::vector<bool> &,
                                            const float *);
template std::vector<double> softmaxWithSink(const std::vector<double> &,
                                             const std::vector<bool> &,
                                             const double *);
template std::vector<float> project(const float *, int64_t, int64_t,
                                    const float *, int64_t, const float *);
template std::vector<double> project(const float *, int64_t, int64_t,
                                     const float *, int64_t, const float *);
template std::vector<float> sdpa(const AttentionSpec &, const SdpaArgs &);
template std::vector<double> sdpa(const AttentionSpec &, const SdpaArgs &);
template void QkTransform::apply(int64_t, const float *, int64_t,
                                 float *) const;
template void QkTransform::apply(int64_t, const float *, int64_t,
                                 double *) const;
template std::vector<float> layer(const AttentionSpec &, const LayerArgs &);
template std::vector<double> layer(const AttentionSpec &, const LayerArgs &);

} // namespace mhagen::ref
