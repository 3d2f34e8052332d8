// The numerical tolerances every kernel test uses, in one place.
// A kernel output o passes against the f64 reference r when
//   |o - r| <= atol + rtol * |r|   for every element.
#ifndef MHAGEN_REFERENCE_TOLERANCE_H
#define MHAGEN_REFERENCE_TOLERANCE_H

#include "mhagen/spec/AttentionSpec.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace mhagen {

struct Tolerance {
  double atol;
  double rtol;
};

/// Why these numbers: f32 kernels accumulate in f32 with a polynomial exp
/// (relative error ~1e-6), so outputs of O(1) land within ~1e-5. f16 and
/// bf16 kernels store their output in that type (half an ulp: 2^-11 and
/// 2^-8 relative) and bf16 kernels also round P to bf16 before the P*V dot
/// product. A layer adds four projections of length d, whose f32 sums grow
/// the error with sqrt(d); inputs are scaled so outputs stay O(1).
inline Tolerance toleranceFor(DType t, Op op) {
  Tolerance tol{};
  switch (t) {
  case DType::F32:
    tol = {2e-5, 1e-4};
    break;
  case DType::F16:
    tol = {2e-3, 4e-3};
    break;
  case DType::BF16:
    tol = {1.2e-2, 1.6e-2};
    break;
  }
  if (op == Op::Layer) {
    tol.atol *= 4;
    tol.rtol *= 2;
  }
  return tol;
}

/// How far storing a K/V element below 1 as `kv` moves it: half an ulp
/// (bf16 2^-9, f16 2^-12, f32 0), or for i8 half a step of its row's
/// scale, max|row| / 254 <= 1/254 (kvStorageTolerance says how it reaches
/// the outputs).
inline double kvRoundingError(KvType kv) {
  switch (kv) {
  case KvType::BF16:
    return 1.0 / 512;
  case KvType::F16:
    return 1.0 / 4096;
  case KvType::I8:
    return 1.0 / 254;
  case KvType::F32:
    break;
  }
  return 0;
}

/// The tolerance of a kernel of this spec: its dtype's and op's, plus the
/// error its score modifiers add. softcap C: both backends evaluate tanh
/// with the same rational approximation, at most 3.3e-7 from tanh over
/// all of f32 (measured against std::tanh), so a capped score moves by
/// C * 3.3e-7 and an output (|v - o| <= 2) by twice that. ALiBi adds one
/// f32 rounding of slope * distance, under 1e-6 for every key within 16
/// of the row's max score (the ones with weight); sinks add none. rope adds
/// none: both backends take each angle and its cos and sin in f64, as the
/// reference does, and round cos and sin to f32 (2^-24 relative), below
/// the f32 projections' own rounding; an f32 angle would not do (at
/// position 10^5 it is off by ~4e-3 rad).
inline Tolerance toleranceFor(const AttentionSpec &s) {
  Tolerance tol = toleranceFor(s.dtype, s.op);
  // A layer whose cache is narrower than its dtype rounds each new K/V
  // element to the cache's type, as the reference does from f64: an f32
  // sum a rounding away from the f64 one may land one cache ulp (at most
  // 4e relative, kvRoundingError) from it. The cache check sees that ulp;
  // the outputs, which read the row back, see it as kvStorageTolerance's
  // storage term.
  if (s.cachedLayer()) {
    const double e = kvRoundingError(s.kvType());
    if (e > kvRoundingError(kvTypeOf(s.dtype))) {
      tol.atol += 4 * e;
      tol.rtol += 4 * e;
    }
  }
  if (s.softcap)
    tol.atol += 2.0 * *s.softcap * 3.3e-7;
  return tol;
}

/// How far an element of a K/V row a cached layer appends may be from the
/// reference's, both as stored: `stored` the reference's element as the
/// cache holds it, `exact` the same before storage and `rowMax` the
/// largest |exact| of its kv head's row. The kernel's f32 element is within
/// the layer's own tolerance of the f64 one, and storing can then land one
/// storage step from where the reference's lands, but only if the two
/// straddle a rounding boundary:
///   - a float cache: one ulp, at most 4e relative (kvRoundingError);
///   - int8: x * 127 / rowMax must lie within what the kernel's error in x
///     and in rowMax moves it of a half-integer for the integer to differ
///     (by one: the row's scale, rowMax / 127), and the scale itself moves
///     with rowMax's error (so a truncating or mis-scaled quantiser
///     fails).
inline double appendedCacheBound(const AttentionSpec &s, double stored,
                                 double exact, double rowMax) {
  const Tolerance tol = toleranceFor(s.dtype, s.op);
  const double e = kvRoundingError(s.kvType());
  if (!s.kvQuantized()) {
    const double ulp = e > kvRoundingError(kvTypeOf(s.dtype)) ? 4 * e : 0;
    return tol.atol + (tol.rtol + ulp) * std::fabs(stored);
  }
  const double maxErr = tol.atol + tol.rtol * rowMax;
  if (rowMax <= maxErr) // a row of (near) zeros: any integers, a tiny scale
    return 2 * maxErr;
  const double x = std::fabs(exact);
  const double level = x * 127 / rowMax;
  const double moves =
      127 * (tol.atol + tol.rtol * x + x * maxErr / rowMax) / rowMax;
  const double toHalf = std::fabs(level - std::floor(level) - 0.5);
  const double flip = toHalf <= moves ? rowMax / 127 : 0;
  return flip + maxErr + 1e-6 * rowMax;
}

/// ALiBi at call sizes: a biased score slope * (j - p(i)) reaches
/// maxSlope * (T_q + T_kv) in magnitude (keys far behind the query, e.g.
/// when padding hides the near ones), and an f32 score of that size is
/// rounded by up to half an ulp, |s| 2^-24. Outputs (|v - o| <= 2) move by
/// twice that. The reference computes the scores in f64.
inline Tolerance withAlibiScores(Tolerance tol, double maxSlope, int64_t Tq,
                                 int64_t Tkv) {
  tol.atol += 2.0 * maxSlope * static_cast<double>(Tq + Tkv) * 5.96e-8;
  return tol;
}

/// The tolerance of the `lse` output (log-sum-exp of each row's scores).
/// f32 math: the running max is exact, the running sum carries the exp's
/// relative error (~1e-6), so lse is within ~1e-6 plus the rounding of
/// the max itself (rtol). bf16 kernels on the dot-product path sum P
/// rounded to bf16 (2^-9 relative), which moves lse by about that much.
/// A layer's scores carry its projections' error (as toleranceFor).
inline Tolerance lseTolerance(const AttentionSpec &s) {
  Tolerance tol{2e-5, 1e-6};
  if (s.dtype == DType::BF16)
    tol.atol = 4e-3;
  if (s.softcap)
    tol.atol += *s.softcap * 3.3e-7;
  if (s.op == Op::Layer)
    tol.atol *= 4;
  return tol;
}

/// With scores of magnitude |logit| the kernel's own f32 dot products carry
/// an absolute error of about |logit| * sqrt(dk) * 2^-24 before the exp,
/// and outputs (convex combinations of V, |V| <= 1) inherit it. The
/// reference sees the same rounded inputs, so only that accumulation error
/// is added to the base tolerance.
inline Tolerance logitScaledTolerance(DType t, Op op, double logit,
                                      int64_t dk) {
  Tolerance tol = toleranceFor(t, op);
  tol.atol += 4.0 * logit * std::sqrt(static_cast<double>(dk)) * 5.96e-8;
  return tol;
}

/// The error of storing K and V as kv_dtype, against the f64 reference on
/// the values before storage (the harness's referenceOnExactKv), for
/// inputs |q|, |k|, |v| <= 1 and the default scale 1/sqrt(dk). Storing
/// moves each element by at most e (kvRoundingError). V's error passes to the
/// output (a convex combination) unchanged: e. K's moves each score by scale *
/// sum_c q_c dk_c, about e/3 in standard deviation for random rounding, and an
/// output moves by at most 2 max|dscore| (|v - o| <= 2); 4 standard deviations
/// give 2.7e. Hence atol + 4e on top of the dtype's own tolerance. Measured
/// maximum on the numeric group "kv_storage" (T_kv up to 4096, GQA, all masks):
/// docs/design.md §5.
inline Tolerance kvStorageTolerance(DType dtype, KvType kv, Op op) {
  Tolerance tol = toleranceFor(dtype, op);
  tol.atol += 4 * kvRoundingError(kv);
  return tol;
}

struct Comparison {
  double maxAbsErr = 0;
  int64_t worstIndex = -1;
  int64_t failures = 0;
  bool sawNaN = false;
  bool ok() const { return failures == 0 && !sawNaN; }
};

template <typename T>
Comparison compareToReference(const std::vector<float> &got,
                              const std::vector<T> &want, Tolerance tol) {
  Comparison c;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    double g = got[i], w = static_cast<double>(want[i]);
    // An infinity is right only where the reference has the same one (the
    // log-sum-exp of a row that sees no key is -inf).
    if (std::isinf(w) && g == w)
      continue;
    if (std::isnan(g) || std::isinf(g) || std::isinf(w)) {
      c.sawNaN = true;
      ++c.failures;
      if (c.worstIndex < 0)
        c.worstIndex = static_cast<int64_t>(i);
      continue;
    }
    double e = std::fabs(g - w);
    if (e > c.maxAbsErr) {
      c.maxAbsErr = e;
      c.worstIndex = static_cast<int64_t>(i);
    }
    if (e > tol.atol + tol.rtol * std::fabs(w))
      ++c.failures;
  }
  if (got.size() != want.size())
    ++c.failures;
  return c;
}

} // namespace mhagen

#endif
