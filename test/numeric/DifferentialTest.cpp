// Differential test: the kernels of one library (Halide backend) and their
// counterparts in another (MLIR backend, symbol + "_mlir") run on the same
// inputs and must agree element by element within twice the dtype's
// tolerance to the reference (each may be off by one tolerance). Sizes
// include T = 1, tiles that do not divide T, and a KV-cache offset.
//   mhagen_differential_tests HALIDE.so MLIR.so [gtest flags]
#include "mhagen/harness/KernelHarness.h"
#include "mhagen/harness/RunCheck.h"
#include "mhagen/manifest.hpp"
#include "mhagen/runtime.h"
#include "mhagen/spec/SpecParser.h"

#include <gtest/gtest.h>

#include "../support/SkipSupport.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <string>

using namespace mhagen;

namespace {

class AgreementCase : public testing::Test {
public:
  AgreementCase(const mhagen_kernel *a, const mhagen_kernel *b,
                AttentionSpec spec, ProblemSize size)
      : a_(a), b_(b), spec_(std::move(spec)), size_(size) {}
  void TestBody() override {
    ProblemOptions po;
    po.seed = static_cast<uint32_t>(7 * size_.Tq + size_.Tkv);
    Problem p(spec_, size_, po);
    mhagen_call_args args = p.args();
    ASSERT_EQ(mhagen_call(a_, &args), MHAGEN_OK) << mhagen_last_error();
    std::vector<float> first = p.output();
    p.clearOutput();
    args = p.args();
    ASSERT_EQ(mhagen_call(b_, &args), MHAGEN_OK) << mhagen_last_error();
    std::vector<float> second = p.output();
    ASSERT_EQ(first.size(), second.size());
    Tolerance tol = p.tolerance();
    int64_t failures = 0, worst = -1;
    double maxDiff = 0;
    for (size_t i = 0; i < first.size(); ++i) {
      double x = first[i], y = second[i];
      ASSERT_FALSE(std::isnan(x) || std::isnan(y)) << "NaN at " << i;
      double diff = std::fabs(x - y);
      if (diff > maxDiff) {
        maxDiff = diff;
        worst = static_cast<int64_t>(i);
      }
      if (diff > 2 * (tol.atol + tol.rtol * std::fabs(x)))
        ++failures;
    }
    EXPECT_EQ(failures, 0) << mhagen_kernel_symbol(a_) << " vs "
                           << mhagen_kernel_symbol(b_) << ": max |diff| "
                           << maxDiff << " at " << worst;
  }

private:
  const mhagen_kernel *a_, *b_;
  AttentionSpec spec_;
  ProblemSize size_;
};

} // namespace

int main(int argc, char **argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s HALIDE.so MLIR.so\n", argv[0]);
    return 2;
  }
  mhagen_library *libs[2] = {nullptr, nullptr};
  for (int i = 0; i < 2; ++i)
    if (mhagen_load_library(argv[i + 1], &libs[i]) != MHAGEN_OK) {
      std::fprintf(stderr, "%s\n", mhagen_last_error());
      return 1;
    }
  std::map<std::string, const mhagen_kernel *> second;
  for (int j = 0; j < mhagen_library_kernel_count(libs[1]); ++j) {
    const mhagen_kernel *k = mhagen_library_kernel(libs[1], j);
    second[mhagen_kernel_symbol(k)] = k;
  }
  int registered = 0, unmatched = 0;
  std::string skipped;
  for (int j = 0; j < mhagen_library_kernel_count(libs[0]); ++j) {
    const mhagen_kernel *a = mhagen_library_kernel(libs[0], j);
    auto it = second.find(std::string(mhagen_kernel_symbol(a)) + "_mlir");
    if (it == second.end()) {
      std::fprintf(stderr, "no counterpart of %s\n", mhagen_kernel_symbol(a));
      ++unmatched;
      continue;
    }
    const mhagen_kernel *b = it->second;
    std::string why = testing_support::unusableReason(a);
    if (why.empty())
      why = testing_support::unusableReason(b);
    if (!why.empty()) {
      testing_support::registerSkipped(mhagen_kernel_symbol(a), why);
      skipped = why;
      continue;
    }
    AttentionSpec spec = specOfKernel(a);
    std::vector<ProblemSize> sizes =
        spec.T || spec.B
            ? std::vector<ProblemSize>{{spec.B.value_or(2), spec.T.value_or(64),
                                        spec.T_kv.value_or(
                                            spec.T.value_or(64))}}
        : spec.op == Op::Layer
            ? std::vector<ProblemSize>{{1, 1, 1}, {2, 77, 77}}
            : std::vector<ProblemSize>{{1, 1, 1}, {2, 77, 77}, {1, 33, 200}};
    for (ProblemSize z : sizes) {
      std::string name = "B" + std::to_string(z.B) + "_Tq" +
                         std::to_string(z.Tq) + "_Tkv" + std::to_string(z.Tkv);
      testing::RegisterTest(mhagen_kernel_symbol(a), name.c_str(), nullptr,
                            nullptr, __FILE__, __LINE__,
                            [a, b, spec, z]() -> testing::Test * {
                              return new AgreementCase(a, b, spec, z);
                            });
      ++registered;
    }
  }
  if (unmatched == 0 && registered == 0 && !skipped.empty())
    return testing_support::exitAllSkipped(
        "no kernel pair of these libraries runs here: " + skipped);
  if (unmatched > 0 || registered == 0) {
    std::fprintf(stderr, "%d kernels without a counterpart, %d cases\n",
                 unmatched, registered);
    return 1;
  }
  return RUN_ALL_TESTS();
}
