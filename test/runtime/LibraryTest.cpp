// Real generated kernels through the runtime: dlopen of a shared library
// with several target variants, best-variant choice, forced variants, the
// missing-feature refusal, and a many-thread stress test that checks every
// concurrent result against a single-threaded run.
//   mhagen_library_tests LIB.so
#include "mhagen/harness/KernelHarness.h"
#include "mhagen/manifest.hpp"
#include "mhagen/runtime.h"
#include "mhagen/spec/SpecParser.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <set>
#include <thread>

using namespace mhagen;

static const char *gLibPath = nullptr;

static AttentionSpec specOf(const mhagen_kernel *k) {
  KernelManifest m;
  std::string err;
  EXPECT_TRUE(KernelManifest::fromJson(mhagen_kernel_manifest(k), m, &err));
  return parseSpecs(m.spec.canonical, m.symbol).at(0);
}

class Library : public testing::Test {
protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(mhagen_load_library(gLibPath, &lib_), MHAGEN_OK)
        << mhagen_last_error();
  }
  static mhagen_library *lib_;
};
mhagen_library *Library::lib_ = nullptr;

TEST_F(Library, HoldsEveryVariant) {
  std::set<std::string> symbols;
  for (int i = 0; i < mhagen_library_kernel_count(lib_); ++i)
    symbols.insert(mhagen_kernel_symbol(mhagen_library_kernel(lib_, i)));
  for (const char *s :
       {"rt_variants_avx2", "rt_variants_avx512", "rt_variants_avx512_bf16",
        "rt_layer_avx2", "rt_layer_avx512", "rt_layer_avx512_bf16"})
    EXPECT_TRUE(symbols.count(s)) << s;
  // Loading the same library again is harmless.
  mhagen_library *again = nullptr;
  EXPECT_EQ(mhagen_load_library(gLibPath, &again), MHAGEN_OK);
}

TEST_F(Library, BestVariantForcedVariantAndRefusal) {
  const mhagen_kernel *k = nullptr;
  ASSERT_EQ(mhagen_find("rt_variants", &k), MHAGEN_OK) << mhagen_last_error();
  const bool bf16Cpu = mhagen_cpu_has("avx512_bf16");
  const bool avx512Cpu = mhagen_cpu_has("avx512f");
  EXPECT_STREQ(mhagen_kernel_target(k), bf16Cpu     ? "avx512_bf16"
                                        : avx512Cpu ? "avx512"
                                                    : "avx2");
  // Every usable variant gives the reference answer.
  for (const char *target : {"avx2", "avx512", "avx512_bf16"}) {
    const mhagen_kernel *v = nullptr;
    int rc = mhagen_find_variant("rt_variants", target, nullptr, &v);
    if (rc == MHAGEN_ERR_UNSUPPORTED_CPU)
      continue; // this machine cannot run it
    ASSERT_EQ(rc, MHAGEN_OK) << mhagen_last_error();
    Problem p(specOf(v), {3, 50, 77}, {});
    mhagen_call_args a = p.args();
    ASSERT_EQ(mhagen_call(v, &a), MHAGEN_OK) << mhagen_last_error();
    EXPECT_TRUE(p.check({}).ok()) << target;
  }
  // A CPU with AVX2 only: the avx2 variant is chosen, the others refused.
  mhagen_override_cpu_features("sse41 avx avx2 fma f16c");
  ASSERT_EQ(mhagen_find("rt_variants", &k), MHAGEN_OK);
  EXPECT_STREQ(mhagen_kernel_target(k), "avx2");
  const mhagen_kernel *forced = nullptr;
  EXPECT_EQ(mhagen_find_variant("rt_variants", "avx512_bf16", nullptr, &forced),
            MHAGEN_ERR_UNSUPPORTED_CPU);
  EXPECT_NE(std::strstr(mhagen_last_error(), "avx512_bf16"), nullptr);
  // Even a direct call to the refused variant's entry point is checked.
  ASSERT_EQ(mhagen_find_variant("rt_variants", "avx512", nullptr, &forced),
            MHAGEN_ERR_UNSUPPORTED_CPU);
  mhagen_override_cpu_features(nullptr);
  ASSERT_EQ(mhagen_find_variant("rt_variants", "avx512", nullptr, &forced),
            MHAGEN_OK);
  mhagen_override_cpu_features("sse41 avx avx2 fma f16c");
  Problem p(specOf(forced), {1, 4, 4}, {});
  mhagen_call_args a = p.args();
  EXPECT_EQ(mhagen_call(forced, &a), MHAGEN_ERR_UNSUPPORTED_CPU);
  mhagen_override_cpu_features(nullptr);
}

TEST_F(Library, ManyThreadsCallingConcurrently) {
  const mhagen_kernel *k = nullptr;
  ASSERT_EQ(mhagen_find("rt_layer", &k), MHAGEN_OK);
  AttentionSpec spec = specOf(k);
  // Expected outputs, one problem per thread, computed one at a time.
  const int kThreads = 12;
  std::vector<std::unique_ptr<Problem>> problems;
  std::vector<std::vector<float>> expected;
  for (int t = 0; t < kThreads; ++t) {
    ProblemOptions po;
    po.seed = 100 + t;
    problems.push_back(std::make_unique<Problem>(
        spec, ProblemSize{1 + t % 2, 17 + t, 17 + t}, po));
    mhagen_call_args a = problems.back()->args();
    ASSERT_EQ(mhagen_call(k, &a), MHAGEN_OK) << mhagen_last_error();
    ASSERT_TRUE(problems.back()->check({}).ok());
    expected.push_back(problems.back()->output());
  }
  std::atomic<int> mismatches{0}, failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 20; ++rep) {
        problems[t]->clearOutput();
        mhagen_call_args a = problems[t]->args();
        if (mhagen_call(k, &a) != MHAGEN_OK)
          ++failures;
        else if (problems[t]->output() != expected[t])
          ++mismatches;
      }
    });
  for (auto &th : threads)
    th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
}

// The pool really has the size asked for: lowering the count stops the
// extra workers (Halide's own pool would keep them busy), raising it starts
// them. Counted as threads of this process.
static int processThreads() {
  int n = 0;
  std::error_code ec;
  for (auto &e : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    (void)e;
    ++n;
  }
  return n;
}

TEST_F(Library, ThreadCountChangesTakeEffect) {
  const mhagen_kernel *k = nullptr;
  ASSERT_EQ(mhagen_find("rt_layer", &k), MHAGEN_OK);
  Problem p(specOf(k), {2, 40, 40}, {});
  mhagen_call_args a = p.args();
  ASSERT_EQ(mhagen_set_num_threads(1), MHAGEN_OK);
  ASSERT_EQ(mhagen_call(k, &a), MHAGEN_OK);
  const int base = processThreads(); // no pool workers with one thread
  ASSERT_EQ(mhagen_set_num_threads(4), MHAGEN_OK);
  ASSERT_EQ(mhagen_call(k, &a), MHAGEN_OK) << mhagen_last_error();
  EXPECT_EQ(processThreads(), base + 3);
  ASSERT_EQ(mhagen_set_num_threads(1), MHAGEN_OK);
  ASSERT_EQ(mhagen_call(k, &a), MHAGEN_OK);
  EXPECT_EQ(processThreads(), base);
  EXPECT_TRUE(p.check({}).ok());
  ASSERT_EQ(mhagen_set_num_threads(2), MHAGEN_OK);
}

int main(int argc, char **argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s LIB.so\n", argv[0]);
    return 2;
  }
  gLibPath = argv[1];
  return RUN_ALL_TESTS();
}
