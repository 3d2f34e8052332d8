#include "mhagen/harness/KernelHarness.h"

#include "mhagen/reference/Numerics.h"
#include "mhagen/reference/Reference.h"
#include "mhagen/spec/CostModel.h"

#include <cmath>
#include <random>

namespace mhagen {

Problem::Tensor Problem::make(size_t n, float lo, float hi,
                              uint32_t seed) const {
  Tensor t;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  t.f32.resize(n);
  for (float &x : t.f32)
    x = u(rng);
  if (spec_.dtype != DType::F32) {
    t.bits.resize(n);
    for (size_t i = 0; i < n; ++i) {
      t.bits[i] = spec_.dtype == DType::BF16 ? floatToBf16(t.f32[i])
                                             : floatToF16(t.f32[i]);
      t.f32[i] = spec_.dtype == DType::BF16 ? bf16ToFloat(t.bits[i])
                                            : f16ToFloat(t.bits[i]);
    }
  }
  return t;
}

Problem::Problem(const AttentionSpec &s, ProblemSize size,
                 const ProblemOptions &o)
    : spec_(s), size_(size) {
  if (s.op == Op::Layer)
    size_.Tkv = size_.Tq;
  const int64_t B = size_.B, Tq = size_.Tq, Tkv = size_.Tkv;
  const uint32_t seed = o.seed * 7919u;
  if (s.op == Op::Sdpa) {
    // Scores q.k*scale ~ target: |q|,|k| ~ U(-1,1) give q.k ~ sqrt(dk/9).
    float qAmp = 1.0f;
    if (o.logitMagnitude > 0)
      qAmp = static_cast<float>(o.logitMagnitude /
                                (std::sqrt(s.d_k / 9.0) * s.effectiveScale()));
    q_ = make(static_cast<size_t>(B * Tq * s.h * s.d_k), -qAmp, qAmp, seed + 1);
    k_ = make(static_cast<size_t>(B * Tkv * s.n_kv * s.d_k), -1, 1, seed + 2);
    v_ = make(static_cast<size_t>(B * Tkv * s.n_kv * s.d_v), -1, 1, seed + 3);
    outF32_.assign(static_cast<size_t>(B * Tq * s.h * s.d_v), 0.0f);
  } else {
    // Weights ~ U(-a, a) with a = sqrt(3 / fan_in): unit-variance outputs.
    const float ain = std::sqrt(3.0f / static_cast<float>(s.d));
    const float aout = std::sqrt(3.0f / static_cast<float>(s.h * s.d_v));
    // Huge logits: Q's weights grow so that q.k*scale reaches the target.
    float wqAmp = ain;
    if (o.logitMagnitude > 0)
      wqAmp *= static_cast<float>(o.logitMagnitude / s.effectiveScale() /
                                  std::sqrt(static_cast<double>(s.d_k)));
    x_ = make(static_cast<size_t>(B * Tq * s.d), -1, 1, seed + 1);
    wq_ = make(static_cast<size_t>(s.d * s.h * s.d_k), -wqAmp, wqAmp, seed + 2);
    wk_ = make(static_cast<size_t>(s.d * s.n_kv * s.d_k), -ain, ain, seed + 3);
    wv_ = make(static_cast<size_t>(s.d * s.n_kv * s.d_v), -ain, ain, seed + 4);
    wo_ = make(static_cast<size_t>(s.h * s.d_v * s.d), -aout, aout, seed + 5);
    if (s.bias) {
      bq_ = make(static_cast<size_t>(s.h * s.d_k), -0.1f, 0.1f, seed + 6);
      bk_ = make(static_cast<size_t>(s.n_kv * s.d_k), -0.1f, 0.1f, seed + 7);
      bv_ = make(static_cast<size_t>(s.n_kv * s.d_v), -0.1f, 0.1f, seed + 8);
      bo_ = make(static_cast<size_t>(s.d), -0.1f, 0.1f, seed + 9);
    }
    outF32_.assign(static_cast<size_t>(B * Tq * s.d), 0.0f);
  }
  if (s.dtype != DType::F32)
    outBits_.assign(outF32_.size(), 0);
  if (s.mask.padding) {
    std::mt19937 rng(seed + 10);
    std::uniform_int_distribution<int64_t> u(1, Tkv);
    for (int64_t b = 0; b < B; ++b)
      lens_.push_back(static_cast<int32_t>(o.kvLen >= 0 ? o.kvLen : u(rng)));
  }
}

mhagen_call_args Problem::args() {
  mhagen_call_args a{};
  a.abi_version = MHAGEN_ABI_VERSION;
  a.batch = size_.B;
  a.t_q = size_.Tq;
  a.t_kv = spec_.op == Op::Sdpa ? size_.Tkv : 0;
  if (spec_.op == Op::Sdpa) {
    a.q = q_.data();
    a.k = k_.data();
    a.v = v_.data();
  } else {
    a.x = x_.data();
    a.w_q = wq_.data();
    a.w_k = wk_.data();
    a.w_v = wv_.data();
    a.w_o = wo_.data();
    if (spec_.bias) {
      a.b_q = bq_.data();
      a.b_k = bk_.data();
      a.b_v = bv_.data();
      a.b_o = bo_.data();
    }
  }
  a.out = outBits_.empty() ? static_cast<void *>(outF32_.data())
                           : static_cast<void *>(outBits_.data());
  a.kv_lens = lens_.empty() ? nullptr : lens_.data();
  return a;
}

void Problem::clearOutput() {
  std::fill(outF32_.begin(), outF32_.end(), 0.0f);
  std::fill(outBits_.begin(), outBits_.end(), 0);
}

void Problem::corruptOutputForTesting() {
  if (!outF32_.empty())
    outF32_[outF32_.size() / 2] += 1.0f;
  if (!outBits_.empty())
    outBits_[outBits_.size() / 2] ^= 0x4000; // flips an exponent bit
}

std::vector<float> Problem::output() const {
  if (outBits_.empty())
    return outF32_;
  std::vector<float> out(outBits_.size());
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = spec_.dtype == DType::BF16 ? bf16ToFloat(outBits_[i])
                                        : f16ToFloat(outBits_[i]);
  return out;
}

std::vector<double> Problem::reference(const std::vector<int64_t> &rows) const {
  const std::vector<int64_t> *r = rows.empty() ? nullptr : &rows;
  if (spec_.op == Op::Sdpa) {
    ref::SdpaArgs a;
    a.B = size_.B;
    a.Tq = size_.Tq;
    a.Tkv = size_.Tkv;
    a.q = q_.f32.data();
    a.k = k_.f32.data();
    a.v = v_.f32.data();
    a.kvLens = lens_.empty() ? nullptr : lens_.data();
    a.rows = r;
    return ref::sdpa<double>(spec_, a);
  }
  ref::LayerArgs a;
  a.B = size_.B;
  a.T = size_.Tq;
  a.x = x_.f32.data();
  a.wq = wq_.f32.data();
  a.wk = wk_.f32.data();
  a.wv = wv_.f32.data();
  a.wo = wo_.f32.data();
  if (spec_.bias) {
    a.bq = bq_.f32.data();
    a.bk = bk_.f32.data();
    a.bv = bv_.f32.data();
    a.bo = bo_.f32.data();
  }
  a.kvLens = lens_.empty() ? nullptr : lens_.data();
  a.rows = r;
  return ref::layer<double>(spec_, a);
}

Comparison Problem::check(const std::vector<int64_t> &rows) const {
  std::vector<float> got = output();
  std::vector<double> want = reference(rows);
  Tolerance tol = toleranceFor(spec_.dtype, spec_.op);
  if (rows.empty())
    return compareToReference(got, want, tol);
  // Only the checked rows: gather them from both.
  const int64_t width = spec_.op == Op::Sdpa ? spec_.h * spec_.d_v : spec_.d;
  std::vector<float> g;
  std::vector<double> w;
  for (int64_t b = 0; b < size_.B; ++b)
    for (int64_t t : rows)
      for (int64_t c = 0; c < width; ++c) {
        size_t idx = static_cast<size_t>((b * size_.Tq + t) * width + c);
        g.push_back(got[idx]);
        w.push_back(want[idx]);
      }
  return compareToReference(g, w, tol);
}

double Problem::referenceFlops() const {
  const AttentionSpec &s = spec_;
  double attn = 2.0 * size_.B * s.h * size_.Tq * size_.Tkv * (s.d_k + s.d_v);
  if (s.op == Op::Sdpa)
    return attn;
  return attn + 2.0 * size_.B * size_.Tq * s.d *
                    (s.h * s.d_k + s.n_kv * (s.d_k + s.d_v) + s.h * s.d_v);
}

std::vector<int64_t> rowsToCheck(const Problem &p, double flopBudget) {
  const int64_t T = p.size().Tq;
  std::vector<int64_t> rows;
  double cost = p.referenceFlops();
  if (cost <= flopBudget)
    return rows; // empty = all
  const AttentionSpec &s = p.spec();
  // Projections of K/V for every token stay; scale the rest.
  double fixed = s.op == Op::Layer ? 2.0 * p.size().B * p.size().Tq * s.d *
                                         s.n_kv * (s.d_k + s.d_v)
                                   : 0.0;
  double perRow = (cost - fixed) / static_cast<double>(T);
  int64_t n = static_cast<int64_t>((flopBudget - fixed) / perRow);
  n = std::max<int64_t>(8, n);
  if (n >= T)
    return {}; // few rows (decode, T_q = 1): every row of every batch
  for (int64_t i = 0; i < n; ++i)
    rows.push_back(i * (T - 1) / std::max<int64_t>(1, n - 1));
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

double nominalFlops(const AttentionSpec &s, const ProblemSize &z) {
  CostReport r = computeCost(s, z.Tq, z.Tkv, z.B);
  return r.flopsProjections + r.flopsNominalAttention;
}

double usefulFlops(const AttentionSpec &s, const ProblemSize &z,
                   const std::vector<int32_t> &kvLens) {
  CostReport r = computeCost(s, z.Tq, z.Tkv, z.B);
  if (!s.mask.padding || kvLens.empty())
    return r.flopsTotal;
  // Count visible pairs with the actual lengths.
  const int64_t Tkv = s.op == Op::Layer ? z.Tq : z.Tkv;
  double pairs = 0;
  for (int64_t b = 0; b < z.B; ++b)
    for (int64_t i = 0; i < z.Tq; ++i)
      for (int64_t j = 0; j < Tkv; ++j)
        pairs += maskAllows(s.mask, i, j, z.Tq, Tkv, kvLens[b]) ? 1 : 0;
  return r.flopsProjections + 2.0 * pairs * s.h * (s.d_k + s.d_v);
}

} // namespace mhagen
