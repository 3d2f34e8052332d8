// Runs each layer kernel of the given libraries on the inputs of its golden
// and checks the output against the output of the Hugging Face transformers
// module it stands in for, with the kernel's tolerance
// (mhagen/reference/Tolerance.h). A golden is the directory named after the
// kernel's spec, with one .npy per input of the ABI model (x, w_q, ...,
// b_o, q_norm, k_norm; positions as f32) and out.npy, written by
// bench/oracles/layer_goldens.py. The f64 reference is held to the same
// goldens, so a wrong reference cannot pass by agreeing with a wrong kernel.
// A decode golden (kv_cache = contiguous) is a run of steps through one
// cache (DecodeGoldenCase).
//   mhagen_golden_tests GOLDEN_DIR LIB.so [LIB.so ...] [gtest flags]
#include "../support/SkipSupport.h"
#include "mhagen/abi_model.hpp"
#include "mhagen/backend/AbiWrapper.h"
#include "mhagen/harness/KernelHarness.h"
#include "mhagen/harness/RunCheck.h"
#include "mhagen/inspect/Npy.h"
#include "mhagen/reference/Reference.h"
#include "mhagen/runtime.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
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

/// A kernel, its spec and its golden's directory.
class GoldenTestBase : public testing::Test {
public:
  GoldenTestBase(const mhagen_kernel *k, AttentionSpec spec,
                 std::filesystem::path dir)
      : k_(k), spec_(std::move(spec)), dir_(std::move(dir)) {}

protected:
  inspect::NpyArray read(const std::string &name) const {
    return inspect::readNpy((dir_ / (name + ".npy")).string());
  }

  const mhagen_kernel *k_;
  AttentionSpec spec_;
  std::filesystem::path dir_;
};

class GoldenCase : public GoldenTestBase {
public:
  using GoldenTestBase::GoldenTestBase;

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
};

/// A decode golden (kv_cache = contiguous): the steps of
/// layer_goldens.py's STEPS through one cache, as transformers ran them
/// with its DynamicCache. Each step's output is held to the tolerance, and
/// so is the f64 reference's on the same cache; after the last step the
/// cache's rows are transformers' and the rows past them are untouched
/// (NaN, which no step may read).
class DecodeGoldenCase : public GoldenTestBase {
public:
  using GoldenTestBase::GoldenTestBase;

  void TestBody() override {
    const inspect::NpyArray kWant = read("k_cache"), vWant = read("v_cache");
    ASSERT_EQ(kWant.shape.size(), 4u) << "k_cache.npy: expected [B, L, kv, dk]";
    const int64_t B = kWant.shape[0], L = kWant.shape[1];
    const int64_t capacity = L + 3; // spare rows the steps never reach
    const int64_t kRow = spec_.n_kv * spec_.d_k, vRow = spec_.n_kv * spec_.d_v;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> kCache(B * capacity * kRow, nan);
    std::vector<float> vCache(B * capacity * vRow, nan);
    // The weights (and biases, norms) by their ABI names.
    std::map<std::string, inspect::NpyArray> weights;
    mhagen_call_args a{};
    a.abi_version = MHAGEN_ABI_VERSION;
    a.batch = B;
    a.t_kv = capacity;
    for (const mhagen::abi::TensorModel *t :
         mhagen::abi::tensors(backend::abiShapeOf(spec_))) {
      const std::string name = t->name;
      if (t->output || t->elem == mhagen::abi::Elem::Int32 || name == "x" ||
          name == "k" || name == "v")
        continue;
      weights[name] = read(name);
      t->bind(a, weights[name].data.data());
    }
    auto w = [&](const char *name) -> const float * {
      auto it = weights.find(name);
      return it == weights.end() ? nullptr : it->second.data.data();
    };
    a.k = kCache.data();
    a.v = vCache.data();
    std::vector<int32_t> lens(static_cast<size_t>(B), 0);
    a.kv_lens = lens.data();
    const Tolerance tol = toleranceFor(spec_);
    int64_t cached = 0;
    for (int step = 0;; ++step) {
      const std::string prefix = "step" + std::to_string(step);
      if (!std::filesystem::exists(dir_ / (prefix + "_x.npy")))
        break;
      SCOPED_TRACE(prefix + " after " + std::to_string(cached) + " tokens");
      const inspect::NpyArray x = read(prefix + "_x");
      const inspect::NpyArray want = read(prefix + "_out");
      const int64_t T = x.shape[1];
      std::fill(lens.begin(), lens.end(), static_cast<int32_t>(cached + T));
      // The reference first, on the cache as this step finds it.
      ref::LayerArgs r;
      r.B = B;
      r.T = T;
      r.x = x.data.data();
      r.wq = w("w_q");
      r.wk = w("w_k");
      r.wv = w("w_v");
      r.wo = w("w_o");
      r.bq = w("b_q");
      r.bk = w("b_k");
      r.bv = w("b_v");
      r.bo = w("b_o");
      r.qNorm = w("q_norm");
      r.kNorm = w("k_norm");
      r.kvLens = lens.data();
      r.kCache = kCache.data();
      r.vCache = vCache.data();
      r.Tkv = capacity;
      const std::vector<double> ref = ref::layer<double>(spec_, r);

      std::vector<float> out(static_cast<size_t>(B * T * spec_.d));
      a.t_q = T;
      a.x = x.data.data();
      a.out = out.data();
      ASSERT_EQ(mhagen_call(k_, &a), MHAGEN_OK) << mhagen_last_error();
      const Comparison kernel = compareToReference(out, want.data, tol);
      EXPECT_TRUE(kernel.ok())
          << mhagen_kernel_symbol(k_)
          << " against transformers: " << describe(kernel, tol);
      const std::vector<float> refF32(ref.begin(), ref.end());
      const Comparison reference = compareToReference(refF32, want.data, tol);
      EXPECT_TRUE(reference.ok())
          << "the reference against transformers: " << describe(reference, tol);
      cached += T;
    }
    ASSERT_EQ(cached, L) << "the steps' tokens and the cache's length differ";
    // The cache: transformers' rows, then the untouched spare rows.
    const std::pair<const std::vector<float> *, const inspect::NpyArray *>
        caches[] = {{&kCache, &kWant}, {&vCache, &vWant}};
    for (const auto &[got, want] : caches) {
      const int64_t row = static_cast<int64_t>(want->data.size()) / (B * L);
      std::vector<float> filled, spare;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < capacity; ++t)
          for (int64_t e = 0; e < row; ++e)
            (t < L ? filled : spare)
                .push_back(
                    (*got)[static_cast<size_t>((b * capacity + t) * row + e)]);
      const Comparison c = compareToReference(filled, want->data, tol);
      EXPECT_TRUE(c.ok()) << "the cache after the last step: "
                          << describe(c, tol);
      for (float f : spare)
        ASSERT_TRUE(std::isnan(f)) << "a row past the cache's length changed";
    }
  }
};

} // namespace

int main(int argc, char **argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s GOLDEN_DIR LIB.so [LIB.so ...]\n", argv[0]);
    return 2;
  }
  const std::filesystem::path goldens = argv[1];
  const std::vector<std::string> libs(argv + 2, argv + argc);
  const int rc = testing_support::registerKernels(
      libs, [&goldens](const mhagen_kernel *k) {
        const AttentionSpec spec = specOfKernel(k);
        const std::filesystem::path dir = goldens / spec.name;
        if (!std::filesystem::is_directory(dir)) {
          std::fprintf(stderr, "%s: no golden at %s\n", mhagen_kernel_symbol(k),
                       dir.string().c_str());
          return -1;
        }
        testing::RegisterTest(spec.cachedLayer() ? "DecodeGolden" : "Golden",
                              mhagen_kernel_symbol(k), nullptr, nullptr,
                              __FILE__, __LINE__,
                              [k, spec, dir]() -> testing::Test * {
                                if (spec.cachedLayer())
                                  return new DecodeGoldenCase(k, spec, dir);
                                return new GoldenCase(k, spec, dir);
                              });
        return 1;
      });
  if (rc >= 0)
    return rc;
  return RUN_ALL_TESTS();
}
