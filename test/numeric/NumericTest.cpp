// Runs every kernel of the given shared libraries on seeded random inputs
// at several sizes and checks each against the f64 reference with the
// tolerances of mhagen/reference/Tolerance.h.
//   mhagen_numeric_tests [--sizes=BxTqxTkv,...] LIB.so [LIB.so ...]
//                        [gtest flags]
// --sizes replaces the default sizes (the long-context group runs
// T_kv = 32768 this way).
#include "../support/SkipSupport.h"
#include "mhagen/harness/KernelHarness.h"
#include "mhagen/harness/RunCheck.h"
#include "mhagen/manifest.hpp"
#include "mhagen/runtime.h"
#include "mhagen/spec/SpecParser.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace mhagen;

namespace {

std::vector<ProblemSize> gSizes; // from --sizes; empty: sizesFor's own

std::vector<ProblemSize> sizesFor(const AttentionSpec &s) {
  if (!gSizes.empty())
    return gSizes;
  if (s.T || s.B) // a specialised kernel runs at its own sizes
    return {
        {s.B.value_or(2), s.T.value_or(64), s.T_kv.value_or(s.T.value_or(64))}};
  if (s.cachedLayer()) // decode, chunks after cached tokens, prefill
    return {{2, 1, 1},   {2, 1, 129}, {3, 1, 1000},
            {2, 5, 300}, {2, 64, 64}, {2, 129, 400}};
  if (s.op == Op::Layer)
    return {{2, 1, 1}, {2, 7, 7}, {2, 64, 64}, {2, 129, 129}, {2, 1000, 1000}};
  // T = 1, 7, 64, 129, 1000; plus decode-like and KV-cache offsets.
  return {{2, 1, 1},   {2, 1, 129},   {2, 7, 7},      {2, 7, 64},
          {2, 64, 64}, {2, 129, 129}, {2, 1000, 1000}};
}

class KernelCase : public testing::Test {
public:
  KernelCase(const mhagen_kernel *k, AttentionSpec spec, ProblemSize size)
      : k_(k), spec_(std::move(spec)), size_(size) {}
  void TestBody() override {
    ProblemOptions po;
    po.seed = static_cast<uint32_t>(size_.Tq * 131 + size_.Tkv);
    check(po);
    if (spec_.ragged) {
      // Every sequence with T_q queries (or its length, when shorter):
      // runs of equal counts, which the runtime calls together.
      SCOPED_TRACE("uniform query counts");
      po.qLen = size_.Tq;
      check(po);
    }
  }

private:
  void check(const ProblemOptions &po) {
    Problem p(spec_, size_, po);
    mhagen_call_args a = p.args();
    ASSERT_EQ(mhagen_call(k_, &a), MHAGEN_OK) << mhagen_last_error();
    std::vector<int64_t> rows = rowsToCheck(p, 3e8);
    Comparison c = p.check(rows);
    Tolerance tol = p.tolerance();
    EXPECT_TRUE(c.ok()) << mhagen_kernel_symbol(k_) << " B " << size_.B
                        << " Tq " << size_.Tq << " Tkv " << size_.Tkv
                        << ": max |err| " << c.maxAbsErr << " at index "
                        << c.worstIndex << ", " << c.failures
                        << " elements beyond " << tol.atol << " + " << tol.rtol
                        << "*|ref|" << (c.sawNaN ? " (NaN or Inf seen)" : "");
    if (spec_.lse) {
      // The second output: each row's log-sum-exp (-inf where no key).
      Comparison cl = p.checkLse(rows);
      Tolerance tl = lseTolerance(spec_);
      EXPECT_TRUE(cl.ok()) << mhagen_kernel_symbol(k_) << " lse, B " << size_.B
                           << " Tq " << size_.Tq << " Tkv " << size_.Tkv
                           << ": max |err| " << cl.maxAbsErr << " at index "
                           << cl.worstIndex << ", " << cl.failures
                           << " elements beyond " << tl.atol << " + " << tl.rtol
                           << "*|ref|"
                           << (cl.sawNaN ? " (NaN or Inf where the reference "
                                           "has none)"
                                         : "");
    }
    if (spec_.cachedLayer()) {
      // The appended rows, and every other row of the cache untouched.
      Comparison cc = p.checkCache();
      EXPECT_TRUE(cc.ok()) << mhagen_kernel_symbol(k_) << " cache, B "
                           << size_.B << " Tq " << size_.Tq << " Tkv "
                           << size_.Tkv << ": max |err| " << cc.maxAbsErr
                           << " at flat index " << cc.worstIndex
                           << " (k then v), " << cc.failures
                           << " elements wrong";
    }
    if (!spec_.kv_dtype)
      return;
    // The storage error of K/V in kv_dtype, against the reference on the values
    // before storage: the bound the tolerance table states.
    Comparison cs = p.checkKvStorage(rows);
    Tolerance ts = kvStorageTolerance(spec_.dtype, spec_.kvType(), spec_.op);
    EXPECT_TRUE(cs.ok()) << mhagen_kernel_symbol(k_) << " kv_dtype "
                         << toString(spec_.kvType()) << " B " << size_.B
                         << " Tq " << size_.Tq << " Tkv " << size_.Tkv
                         << ": max |err| against unrounded K/V " << cs.maxAbsErr
                         << ", " << cs.failures << " elements beyond "
                         << ts.atol << " + " << ts.rtol << "*|ref|";
    RecordProperty("kv_storage_max_abs_err", std::to_string(cs.maxAbsErr));
  }

  const mhagen_kernel *k_;
  AttentionSpec spec_;
  ProblemSize size_;
};

} // namespace

int main(int argc, char **argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s LIB.so [LIB.so ...]\n", argv[0]);
    return 2;
  }
  int firstLib = 1;
  if (argc > 1 && std::strncmp(argv[1], "--sizes=", 8) == 0) {
    std::string list = argv[1] + 8;
    for (size_t at = 0; at < list.size();) {
      size_t comma = list.find(',', at);
      std::string one = list.substr(at, comma - at);
      long long b = 0, tq = 0, tkv = 0;
      if (std::sscanf(one.c_str(), "%lldx%lldx%lld", &b, &tq, &tkv) != 3 ||
          b < 1 || tq < 1 || tkv < 1) {
        std::fprintf(stderr, "--sizes: expected BxTqxTkv, got '%s'\n",
                     one.c_str());
        return 2;
      }
      gSizes.push_back({b, tq, tkv});
      at = comma == std::string::npos ? list.size() : comma + 1;
    }
    firstLib = 2;
  }
  const std::vector<std::string> libs(argv + firstLib, argv + argc);
  const int rc =
      testing_support::registerKernels(libs, [](const mhagen_kernel *k) {
        const AttentionSpec spec = specOfKernel(k);
        int n = 0;
        for (ProblemSize z : sizesFor(spec)) {
          const std::string name = "B" + std::to_string(z.B) + "_Tq" +
                                   std::to_string(z.Tq) + "_Tkv" +
                                   std::to_string(z.Tkv);
          testing::RegisterTest(mhagen_kernel_symbol(k), name.c_str(), nullptr,
                                nullptr, __FILE__, __LINE__,
                                [k, spec, z]() -> testing::Test * {
                                  return new KernelCase(k, spec, z);
                                });
          ++n;
        }
        return n;
      });
  if (rc >= 0)
    return rc;
  return RUN_ALL_TESTS();
}
