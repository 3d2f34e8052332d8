// The merge identity of the log-sum-exp output (docs/design.md
// §1 "Logsumexp"): attention over T_kv keys equals the merge, by
// mhagen_merge_attention, of the attention over the first T1 keys and over
// the other T_kv - T1 -- each half a view into the same K/V buffers
// (batch strides of the full cache), no copy.
//   mhagen_lse_merge_tests LIB.so   (a library holding t_lse_merge_f32)
#include "../support/SkipSupport.h"
#include "mhagen/harness/KernelHarness.h"
#include "mhagen/manifest.hpp"
#include "mhagen/runtime.h"
#include "mhagen/spec/SpecParser.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

using namespace mhagen;

namespace {

const mhagen_kernel *gKernel = nullptr;

AttentionSpec specOf(const mhagen_kernel *k) {
  KernelManifest m;
  std::string err;
  EXPECT_TRUE(KernelManifest::fromJson(mhagen_kernel_manifest(k), m, &err));
  return parseSpecs(m.spec.canonical, m.symbol).at(0);
}

struct Part {
  std::vector<float> out, lse;
};

// One call over keys [first, first + count) of the problem's K/V.
Part callOnKeys(const Problem &full, Problem &p, int64_t first, int64_t count) {
  const AttentionSpec &s = p.spec();
  mhagen_call_args a = p.args();
  const int64_t Tkv = full.size().Tkv;
  a.t_kv = count;
  a.k = static_cast<const float *>(a.k) + first * s.n_kv * s.d_k;
  a.v = static_cast<const float *>(a.v) + first * s.n_kv * s.d_v;
  a.k_batch_stride = Tkv * s.n_kv * s.d_k; // the full cache's layout
  a.v_batch_stride = Tkv * s.n_kv * s.d_v;
  Part r;
  r.out.assign(p.output().size(), -1.0f);
  r.lse.assign(p.lse().size(), -1.0f);
  a.out = r.out.data();
  a.lse = r.lse.data();
  EXPECT_EQ(mhagen_call(gKernel, &a), MHAGEN_OK) << mhagen_last_error();
  return r;
}

} // namespace

TEST(LseMerge, TwoHalvesMergeToTheWhole) {
  AttentionSpec s = specOf(gKernel);
  ASSERT_TRUE(s.lse && s.mask.isNone() && !s.sinks && s.dtype == DType::F32)
      << s.canonical();
  for (ProblemSize size : {ProblemSize{2, 1, 129}, ProblemSize{2, 33, 100},
                           ProblemSize{1, 70, 1000}}) {
    Problem p(s, size, {});
    mhagen_call_args a = p.args();
    ASSERT_EQ(mhagen_call(gKernel, &a), MHAGEN_OK) << mhagen_last_error();
    ASSERT_TRUE(p.check({}).ok());
    ASSERT_TRUE(p.checkLse({}).ok());
    for (int64_t first : {int64_t{1}, size.Tkv / 3, size.Tkv - 1}) {
      Part x = callOnKeys(p, p, 0, first);
      Part y = callOnKeys(p, p, first, size.Tkv - first);
      std::vector<float> out(x.out.size()), lse(x.lse.size());
      ASSERT_EQ(mhagen_merge_attention(static_cast<int64_t>(x.lse.size()),
                                       s.d_v, x.out.data(), x.lse.data(),
                                       y.out.data(), y.lse.data(), out.data(),
                                       lse.data()),
                MHAGEN_OK)
          << mhagen_last_error();
      // Against the unsplit call: each half is within the kernel's
      // tolerance of its own reference, and the merge is exact arithmetic.
      const std::vector<float> whole = p.output();
      Comparison c = compareToReference(
          out, std::vector<double>(whole.begin(), whole.end()),
          toleranceFor(s));
      EXPECT_TRUE(c.ok()) << "T_kv " << size.Tkv << " split at " << first
                          << ": max |err| " << c.maxAbsErr;
      Comparison cl = compareToReference(
          lse, std::vector<double>(p.lse().begin(), p.lse().end()),
          lseTolerance(s));
      EXPECT_TRUE(cl.ok()) << "lse, T_kv " << size.Tkv << " split at " << first
                           << ": max |err| " << cl.maxAbsErr;
    }
  }
}

int main(int argc, char **argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc != 2) {
    std::fprintf(stderr, "usage: mhagen_lse_merge_tests LIB.so\n");
    return 1;
  }
  mhagen_library *lib = nullptr;
  if (mhagen_load_library(argv[1], &lib) != MHAGEN_OK) {
    std::fprintf(stderr, "%s\n", mhagen_last_error());
    return 1;
  }
  const mhagen_kernel *k = nullptr;
  for (int i = 0; i < mhagen_kernel_count(); ++i)
    if (std::string(mhagen_kernel_name(mhagen_kernel_at(i))) ==
        "t_lse_merge_f32")
      k = mhagen_kernel_at(i);
  if (!k) {
    std::fprintf(stderr, "no kernel t_lse_merge_f32 in %s\n", argv[1]);
    return 1;
  }
  const std::string why = testing_support::unusableReason(k);
  if (!why.empty()) {
    std::printf("skipped: %s\n", why.c_str());
    return testing_support::kSkipExitCode;
  }
  gKernel = k;
  return RUN_ALL_TESTS();
}
