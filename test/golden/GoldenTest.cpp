// Runs each layer kernel of the given libraries on the inputs of its golden
// and checks the output against the output of the Hugging Face transformers
// module it stands in for, with the kernel's tolerance
// (mhagen/reference/Tolerance.h). A golden is the directory named after the
// kernel's spec, with one .npy per input of the ABI model (x, w_q, ...,
// b_o, q_norm, k_norm; positions as f32) and out.npy, written by
// bench/oracles/layer_goldens.py. The f64 reference is held to the same
// goldens, so a wrong reference cannot pass by agreeing with a wrong kernel.
//   mhagen_golden_tests GOLDEN_DIR LIB.so [LIB.so ...] [gtest flags]
#include "../support/SkipSupport.h"
#include "mhagen/harness/KernelHarness.h"
#include "mhagen/harness/RunCheck.h"
#include "mhagen/inspect/Npy.h"
#include "mhagen/runtime.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

using namespace mhagen;

namespace {

std::string describe(const Comparison &c, const Tolerance &tol) {
  return "max |err| " + std::to_string(c.maxAbsErr) + " at index " +
         std::to_string(c.worstIndex) + ", " + std::to_string(c.failures) +
         " elements beyond " + std::to_string(tol.atol) + " + " +
         std::to_string(tol.rtol) + "*|golden|" +
         (c.sawNaN ? " (NaN or Inf seen)" : "");
}

class GoldenCase : public testing::Test {
public:
  GoldenCase(const mhagen_kernel *k, AttentionSpec spec,
             std::filesystem::path dir)
      : k_(k), spec_(std::move(spec)), dir_(std::move(dir)) {}

  void TestBody() override {
    const inspect::NpyArray x = read("x");
    ASSERT_EQ(x.shape.size(), 3u) << "x.npy: expected [B, T, d]";
    ASSERT_EQ(x.shape[2], spec_.d) << "x.npy: d differs from the spec's";
    const int64_t B = x.shape[0], T = x.shape[1];
    Problem p(spec_, {B, T, T}, ProblemOptions{});
    // Every input the kernel takes comes from the golden: one the golden
    // lacks is an error, never a random fill.
    for (const std::string &name : p.inputNames())
      p.setInput(name, name == "x" ? x.data : read(name).data);
    if (spec_.positionsAtRuntime) {
      const inspect::NpyArray pos = read("positions");
      p.setPositions(std::vector<int32_t>(pos.data.begin(), pos.data.end()));
    }
    const inspect::NpyArray golden = read("out");
    ASSERT_EQ(golden.elements(), B * T * spec_.d)
        << "out.npy: " << golden.shapeText();

    mhagen_call_args a = p.args();
    ASSERT_EQ(mhagen_call(k_, &a), MHAGEN_OK) << mhagen_last_error();
    const Tolerance tol = p.tolerance();
    const Comparison kernel = compareToReference(p.output(), golden.data, tol);
    EXPECT_TRUE(kernel.ok())
        << mhagen_kernel_symbol(k_)
        << " against transformers: " << describe(kernel, tol);
    RecordProperty("max_abs_err", std::to_string(kernel.maxAbsErr));

    const std::vector<double> ref = p.reference({});
    std::vector<float> refF32(ref.begin(), ref.end());
    const Comparison reference = compareToReference(refF32, golden.data, tol);
    EXPECT_TRUE(reference.ok())
        << "the reference against transformers (" << spec_.name
        << "): " << describe(reference, tol);
  }

private:
  inspect::NpyArray read(const std::string &name) const {
    return inspect::readNpy((dir_ / (name + ".npy")).string());
  }

  const mhagen_kernel *k_;
  AttentionSpec spec_;
  std::filesystem::path dir_;
};

} // namespace

int main(int argc, char **argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s GOLDEN_DIR LIB.so [LIB.so ...]\n", argv[0]);
    return 2;
  }
  const std::filesystem::path goldens = argv[1];
  int registered = 0;
  std::string skipped;
  for (int i = 2; i < argc; ++i) {
    mhagen_library *lib = nullptr;
    if (mhagen_load_library(argv[i], &lib) != MHAGEN_OK) {
      std::fprintf(stderr, "%s\n", mhagen_last_error());
      return 1;
    }
    for (int j = 0; j < mhagen_library_kernel_count(lib); ++j) {
      const mhagen_kernel *k = mhagen_library_kernel(lib, j);
      std::string why = testing_support::unusableReason(k);
      if (!why.empty()) {
        testing_support::registerSkipped(mhagen_kernel_symbol(k), why);
        skipped = why;
        continue;
      }
      AttentionSpec spec = specOfKernel(k);
      const std::filesystem::path dir = goldens / spec.name;
      if (!std::filesystem::is_directory(dir)) {
        std::fprintf(stderr, "%s: no golden at %s\n", mhagen_kernel_symbol(k),
                     dir.string().c_str());
        return 1;
      }
      testing::RegisterTest("Golden", mhagen_kernel_symbol(k), nullptr, nullptr,
                            __FILE__, __LINE__,
                            [k, spec, dir]() -> testing::Test * {
                              return new GoldenCase(k, spec, dir);
                            });
      ++registered;
    }
  }
  if (registered == 0) {
    if (!skipped.empty())
      return testing_support::exitAllSkipped(
          "no kernel of these libraries runs here: " + skipped);
    std::fprintf(stderr, "no kernel in the given libraries\n");
    return 1;
  }
  return RUN_ALL_TESTS();
}
