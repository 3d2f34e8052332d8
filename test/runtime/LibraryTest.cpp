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

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>

using namespace mhagen;

static const char *gLibPath = nullptr;
static const char *gWrongAbiLibPath = nullptr;

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
  mhagen_override_cpu_features(nullptr);
  // Even a direct call to a variant the CPU lacks is checked. The kernel is
  // taken from the library's list, which holds every variant whatever this
  // machine runs.
  forced = nullptr;
  for (int i = 0; i < mhagen_library_kernel_count(lib_); ++i)
    if (std::strcmp(mhagen_kernel_symbol(mhagen_library_kernel(lib_, i)),
                    "rt_variants_avx512") == 0)
      forced = mhagen_library_kernel(lib_, i);
  ASSERT_NE(forced, nullptr);
  const mhagen_kernel *found = nullptr;
  EXPECT_EQ(mhagen_find_variant("rt_variants", "avx512", nullptr, &found),
            avx512Cpu ? MHAGEN_OK : MHAGEN_ERR_UNSUPPORTED_CPU);
  mhagen_override_cpu_features("sse41 avx avx2 fma f16c");
  Problem p(specOf(forced), {1, 4, 4}, {});
  mhagen_call_args a = p.args();
  EXPECT_EQ(mhagen_call(forced, &a), MHAGEN_ERR_UNSUPPORTED_CPU);
  EXPECT_NE(std::strstr(mhagen_last_error(), "avx512"), nullptr)
      << mhagen_last_error();
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

// Libraries that must be refused before anything in them runs (issue 12,
// section 7).
namespace {
std::string copyTruncated(const std::string &from, const std::string &to,
                          double fraction) {
  namespace fs = std::filesystem;
  fs::copy_file(from, to, fs::copy_options::overwrite_existing);
  auto size = fs::file_size(to);
  fs::resize_file(to, static_cast<uintmax_t>(size * fraction));
  return to;
}
} // namespace

TEST(HostileLibrary, TruncatedElfIsRefusedBeforeDlopen) {
  const std::string dir = testing::TempDir();
  for (double fraction : {0.9, 0.5, 0.1, 0.001}) {
    std::string p = copyTruncated(
        gLibPath, dir + "/truncated_" + std::to_string(fraction) + ".so",
        fraction);
    mhagen_library *lib = nullptr;
    EXPECT_EQ(mhagen_load_library(p.c_str(), &lib), MHAGEN_ERR_LOAD_FAILED)
        << fraction;
    EXPECT_EQ(lib, nullptr);
    EXPECT_NE(std::strstr(mhagen_last_error(), "refused before dlopen"),
              nullptr)
        << mhagen_last_error();
  }
}

TEST(HostileLibrary, NotAnElfFileIsRefused) {
  const std::string p = testing::TempDir() + "/not_elf.so";
  FILE *f = std::fopen(p.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("this is not a shared library\n", f);
  std::fclose(f);
  mhagen_library *lib = nullptr;
  EXPECT_EQ(mhagen_load_library(p.c_str(), &lib), MHAGEN_ERR_LOAD_FAILED);
  EXPECT_NE(std::strstr(mhagen_last_error(), "not an ELF file"), nullptr)
      << mhagen_last_error();
}

TEST(HostileLibrary, OtherAbiVersionIsAbiMismatch) {
  mhagen_library *lib = nullptr;
  EXPECT_EQ(mhagen_load_library(gWrongAbiLibPath, &lib),
            MHAGEN_ERR_ABI_MISMATCH);
  EXPECT_NE(std::strstr(mhagen_last_error(), "was built for ABI version"),
            nullptr)
      << mhagen_last_error();
}

int main(int argc, char **argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s LIB.so WRONG_ABI_LIB.so\n", argv[0]);
    return 2;
  }
  gLibPath = argv[1];
  gWrongAbiLibPath = argv[2];
  return RUN_ALL_TESTS();
}
