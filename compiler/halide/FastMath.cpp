#include "FastMath.h"

#include <vector>

namespace mhagen::hl {

using namespace Halide;

// Why not Halide's fast_exp: on AVX-512 it reduces with floor(), which
// LLVM 14 splits into two 256-bit vroundps and a re-insert, clamps k twice
// and evaluates a degree-5 polynomial in natural units: ~25 instructions
// per vector. Here k is the integer nearest x log2(e), taken with one
// truncating conversion (y - 0.5 < 0, so truncation is ceil(y - 0.5)), f =
// y - k lies in [-0.5, 0.5], and 2^k is added to the polynomial's exponent
// field: 11 instructions plus the underflow select. The polynomials are
// minimax in relative error for 2^f on [-0.5, 0.5] (Lawson's iteration);
// Bf16's 7.5e-5 sits far under bf16's half ulp (2^-9 = 2.0e-3), so the
// bf16 P a kernel rounds it to is the exp's own in all but rare ties.
// Measured on a Zen 4 class, bf16 S3: docs/design.md §1 and
// docs/performance.md, "bf16".
namespace {
/// One accuracy grade of expNonPositive: its polynomial and the bound the
/// test holds it to.
struct ExpGrade {
  std::vector<float> coefficients; ///< 2^f on [-0.5, 0.5], highest first
  double maxRelativeError;
};
} // namespace

// The bounds are what the test measures (3.9e-6, 7.9e-5) with margin for
// the x log2(e) rounding: a relative 2^-24 of |y| <= 116, i.e. 4.8e-6 at
// x = -80 and 6e-8 at -1.
static const ExpGrade &expGrade(ExpAccuracy accuracy) {
  static const ExpGrade f32 = {{1.327647206e-03f, 9.675541397e-03f,
                                5.550713274e-02f, 2.402211972e-01f,
                                6.931469671e-01f, 1.000000072e+00f},
                               5.0e-6};
  static const ExpGrade bf16 = {
      {5.517166963e-02f, 2.426111262e-01f, 6.932609857e-01f, 9.999280733e-01f},
      1.0e-4};
  return accuracy == ExpAccuracy::Bf16 ? bf16 : f32;
}

double expMaxRelativeError(ExpAccuracy accuracy) {
  return expGrade(accuracy).maxRelativeError;
}

Expr expNonPositive(const Expr &x, ExpAccuracy accuracy) {
  const float kLog2e = 1.44269504088896341f;
  const Expr y = max(x, -80.0f) * kLog2e; // in [-115.5, 0]
  const Expr k = cast<int>(y - 0.5f);     // nearest integer to y
  const Expr f = y - cast<float>(k);      // [-0.5, 0.5]
  const std::vector<float> &coeff = expGrade(accuracy).coefficients;
  Expr p = coeff[0];
  for (size_t n = 1; n < coeff.size(); ++n)
    p = p * f + coeff[n];
  // p in [0.70, 1.42] and k >= -116: the sum of exponents stays normal.
  const Expr scaled = reinterpret<float>(reinterpret<int>(p) + (k << 23));
  return select(x < -80.0f, 0.0f, scaled);
}

// Eigen's ptanh, whose coefficients MLIR's math-polynomial-approximation
// uses too (MLIR 19 clamps at 7.9988 instead), so both backends cap scores
// alike. On [-7.905, 7.905] (outside, tanh rounds to +-1), and x itself
// below 4e-4. Max error 3.3e-7 absolute over all of f32 with either clamp
// (measured against std::tanh in double); Halide 14's own tanh is a scalar
// libm call per lane.
Expr tanhRational(const Expr &a) {
  const Expr x = clamp(a, -7.90531110763549805f, 7.90531110763549805f);
  const Expr x2 = x * x;
  Expr p = -2.76076847742355e-16f;
  for (float c :
       {2.00018790482477e-13f, -8.60467152213735e-11f, 5.12229709037114e-08f,
        1.48572235717979e-05f, 6.37261928875436e-04f, 4.89352455891786e-03f})
    p = p * x2 + c;
  Expr q = 1.19825839466702e-06f;
  for (float c :
       {1.18534705686654e-04f, 2.26843463243900e-03f, 4.89352518554385e-03f})
    q = q * x2 + c;
  return select(abs(a) < 0.0004f, a, x * p / q);
}

} // namespace mhagen::hl
