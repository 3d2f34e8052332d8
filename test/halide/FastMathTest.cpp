// expNonPositive and tanhRational, JIT-compiled for this host (vectorised
// as the kernels use them, with a scalar tail), against std::exp and
// std::tanh in double.
#include "FastMath.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

using namespace Halide;
using mhagen::hl::ExpAccuracy;

float fromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Every 37th f32 from -0 down to -90 (-90 covers the underflow branch),
// plus the edges: both zeros, -80 and its neighbours, the smallest
// denormal, -FLT_MAX.
std::vector<float> nonPositiveInputs() {
  std::vector<float> xs;
  const uint32_t end = 0xC2B40000u; // -90.0f
  for (uint32_t u = 0x80000000u; u <= end; u += 37)
    xs.push_back(fromBits(u));
  for (float x : {0.0f, -0.0f, -80.0f, std::nextafter(-80.0f, 0.0f),
                  std::nextafter(-80.0f, -100.0f), -1.4e-45f, -3.4e38f,
                  -0.5f * 0.6931472f, -0.6931472f, -1.5f * 0.6931472f})
    xs.push_back(x);
  // An odd count, so the vectorised loop leaves a tail.
  if (xs.size() % 2 == 0)
    xs.push_back(-1.0f);
  return xs;
}

template <typename F>
std::vector<float> evaluate(const std::vector<float> &xs, F &&fn) {
  Buffer<float> in(static_cast<int>(xs.size()));
  std::memcpy(in.data(), xs.data(), xs.size() * sizeof(float));
  Var x("x");
  Func f("f");
  f(x) = fn(in(x));
  f.vectorize(x, 16, TailStrategy::GuardWithIf);
  Buffer<float> out = f.realize({static_cast<int>(xs.size())},
                                get_jit_target_from_environment());
  return std::vector<float>(out.data(), out.data() + xs.size());
}

void checkExp(ExpAccuracy accuracy) {
  const std::vector<float> xs = nonPositiveInputs();
  const std::vector<float> got = evaluate(xs, [&](const Expr &e) {
    return mhagen::hl::expNonPositive(e, accuracy);
  });
  const double bound = mhagen::hl::expMaxRelativeError(accuracy);
  double worst = 0;
  float worstX = 0;
  for (size_t n = 0; n < xs.size(); ++n) {
    const double x = xs[n];
    if (x < -80.0) {
      ASSERT_EQ(got[n], 0.0f) << "exp(" << x << ") below -80 must be 0";
      continue;
    }
    ASSERT_TRUE(std::isfinite(got[n])) << "exp(" << x << ")";
    const double rel = std::abs(got[n] / std::exp(x) - 1.0);
    if (rel > worst) {
      worst = rel;
      worstX = xs[n];
    }
  }
  EXPECT_LE(worst, bound) << "at x = " << worstX;
  // The stated bound is not slack by orders of magnitude either: a
  // polynomial of the wrong degree would show here.
  EXPECT_GE(worst, bound / 100) << "at x = " << worstX;
  std::printf("max relative error %.3g at x = %.9g (bound %.3g), %zu inputs\n",
              worst, worstX, bound, xs.size());
}

TEST(FastMath, ExpToF32Accuracy) { checkExp(ExpAccuracy::F32); }

TEST(FastMath, ExpToBf16Accuracy) {
  checkExp(ExpAccuracy::Bf16);
  // Below bf16's half ulp (2^-9): rounding to bf16 hides the difference.
  EXPECT_LT(mhagen::hl::expMaxRelativeError(ExpAccuracy::Bf16),
            std::ldexp(1.0, -9) / 10);
}

TEST(FastMath, ExpOfZeroIsOneWithinAnUlp) {
  // exp(0) is the row maximum's term. The degree-5 polynomial's constant
  // term is 1 + 7.2e-8, so it lands one ulp above 1; the normalisation
  // divides it out of every row (the row sum holds the same term).
  const std::vector<float> got =
      evaluate(std::vector<float>{0.0f, -0.0f},
               [](const Expr &e) { return mhagen::hl::expNonPositive(e); });
  EXPECT_NEAR(got[0], 1.0f, 1.2e-7f);
  EXPECT_NEAR(got[1], 1.0f, 1.2e-7f);
}

TEST(FastMath, TanhWithinItsStatedError) {
  std::vector<float> xs;
  for (float x = -12.0f; x <= 12.0f; x += 1.0f / 4096)
    xs.push_back(x);
  for (float x : {0.0f, 3.9e-4f, -3.9e-4f, 4.1e-4f, 1e-30f, 3.4e38f, -3.4e38f,
                  7.9053f, -7.9054f})
    xs.push_back(x);
  const std::vector<float> got =
      evaluate(xs, [](const Expr &e) { return mhagen::hl::tanhRational(e); });
  double worst = 0;
  for (size_t n = 0; n < xs.size(); ++n)
    worst = std::max(worst, std::abs(got[n] - std::tanh(double(xs[n]))));
  EXPECT_LE(worst, 3.3e-7 + 6e-8); // FastMath.h's figure, plus f32 rounding
}

} // namespace
