// The tensor-core attention kernels (templates/cuda: mma.sync for sm_80,
// wgmma with TMA and a producer warpgroup for sm_90a), run on the CPU by
// the warp emulator against the f64 reference: the tiled algorithm's
// arithmetic (fragment layouts, swizzled tiles, descriptors, masks and
// tile skipping, the online softmax, the stage hand-over, the key split
// and its merge) is checked here, where no GPU is. The GPU itself runs
// them in bench/gpu.
#include "WarpEmulator.h"

#include "EmulatedSpec.h"

#include "../../templates/cuda/wgmma_attention.cuh"

#include "mhagen/reference/Numerics.h"
#include "mhagen/reference/Reference.h"
#include "mhagen/reference/Tolerance.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <vector>

namespace {

using namespace mhagen;

template <class T, int DK, int H, int G, int WARPS, int BN, bool CAUSAL,
          long long WINDOW, bool PADDING, bool LSE>
using Spec = EmulatedSpec<T, DK, H, G, WARPS, BN, CAUSAL, WINDOW, PADDING, LSE>;

struct Call {
  int64_t B, Tq, Tkv;
  std::vector<int32_t> kvLens; // padding only
  int splits = 1;
  double inputScale = 1; // larger: larger logits
  // K/V rows past each sequence's length hold NaN (a cache's unused
  // slots): a kernel that lets them reach P V writes NaN.
  bool nanPastLength = false;
};

enum class Kernel { MmaSync, Wgmma };

template <class S> AttentionSpec specOf() {
  AttentionSpec s;
  s.op = Op::Sdpa;
  s.h = S::HEADS;
  s.n_kv = S::HEADS / S::GROUP;
  s.d_k = s.d_v = S::DK;
  s.d = s.h * s.d_k;
  s.dtype =
      std::is_same<typename S::T, __half>::value ? DType::F16 : DType::BF16;
  MaskClause c;
  c.causal = S::CAUSAL;
  c.window = S::WINDOW;
  c.padding = S::PADDING;
  s.mask = MaskSpec::of(c);
  s.lse = S::LSE;
  return s;
}

// Runs the kernel as the ABI wrapper does (templates/cuda_wrapper.c.in)
// and compares out and lse with the reference.
template <class S>
void check(const Call &call, const emu::Schedule &sched, Kernel kernel) {
  using T = typename S::T;
  const AttentionSpec spec = specOf<S>();
  const int64_t H = S::HEADS, KV = H / S::GROUP, D = S::DK;
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  auto fill = [&](std::vector<T> &x, std::vector<float> &xf, int64_t n,
                  double scale) {
    x.resize(n);
    xf.resize(n);
    for (int64_t i = 0; i < n; ++i) {
      x[i] = T(static_cast<float>(dist(rng) * scale));
      xf[i] = static_cast<float>(x[i]);
    }
  };
  std::vector<T> q, k, v;
  std::vector<float> qf, kf, vf;
  fill(q, qf, call.B * call.Tq * H * D, call.inputScale);
  fill(k, kf, call.B * call.Tkv * KV * D, call.inputScale);
  fill(v, vf, call.B * call.Tkv * KV * D, 1);
  if (call.nanPastLength)
    for (int64_t b = 0; b < call.B; ++b)
      for (int64_t j = call.kvLens[b]; j < call.Tkv; ++j)
        for (int64_t c = 0; c < KV * D; ++c) {
          k[(b * call.Tkv + j) * KV * D + c] = T(NAN);
          v[(b * call.Tkv + j) * KV * D + c] = T(NAN);
        }
  std::vector<T> out(call.B * call.Tq * H * D, T(12345.f));
  std::vector<float> lse(call.B * call.Tq * H, 7.f);
  std::vector<float> part(
      call.splits > 1 ? call.B * H * call.Tq * call.splits * (D + 1) : 0, NAN);

  mh_tc_params p{};
  p.q = q.data();
  p.k = k.data();
  p.v = v.data();
  p.out = out.data();
  p.lse = S::LSE ? lse.data() : nullptr;
  p.kv_lens = S::PADDING ? call.kvLens.data() : nullptr;
  p.q_ts = H * D;
  p.q_bs = call.Tq * p.q_ts;
  p.k_ts = p.v_ts = KV * D;
  p.k_bs = p.v_bs = call.Tkv * p.k_ts;
  p.o_ts = H * D;
  p.o_bs = call.Tq * p.o_ts;
  p.batch = static_cast<int32_t>(call.B);
  p.tq = static_cast<int32_t>(call.Tq);
  p.tkv = static_cast<int32_t>(call.Tkv);
  p.splits = call.splits;
  const size_t rows = static_cast<size_t>(call.B * H * call.Tq * call.splits);
  p.part_o = part.data();
  p.part_lse = part.data() + rows * D;

  const unsigned rowBlocks =
      static_cast<unsigned>((call.Tq * S::GROUP + S::BM - 1) / S::BM);
  const emu::Dim3 grid{rowBlocks * call.splits, static_cast<unsigned>(KV),
                       static_cast<unsigned>(call.B)};
  std::string why;
  if (kernel == Kernel::MmaSync) {
    const size_t shared = (S::BM + 2 * S::BN) * D * sizeof(T);
    why = emu::launch(grid, 32 * S::WARPS, shared, sched,
                      [&] { mh_tc::attention<S>(p); });
  } else {
    // The TMA descriptors as the ABI wrapper encodes them (CudaBackend.cpp,
    // tensorMapCode).
    const uint64_t dims[4] = {
        static_cast<uint64_t>(D), static_cast<uint64_t>(KV),
        static_cast<uint64_t>(call.Tkv), static_cast<uint64_t>(call.B)};
    const uint32_t box[4] = {64, 1, static_cast<uint32_t>(S::BN), 1};
    const uint64_t kStrides[3] = {static_cast<uint64_t>(D * 2),
                                  static_cast<uint64_t>(p.k_ts * 2),
                                  static_cast<uint64_t>(p.k_bs * 2)};
    const uint64_t vStrides[3] = {static_cast<uint64_t>(D * 2),
                                  static_cast<uint64_t>(p.v_ts * 2),
                                  static_cast<uint64_t>(p.v_bs * 2)};
    ASSERT_EQ(emu::encodeTensorMap(&p.tm_k, p.k, dims, kStrides, box), "");
    ASSERT_EQ(emu::encodeTensorMap(&p.tm_v, p.v, dims, vStrides, box), "");
    using L = mh_tc::Sm90Layout<S>;
    why = emu::launch(grid, L::THREADS, L::SHARED_BYTES, sched,
                      [&] { mh_tc::attentionSm90<S>(p); });
  }
  ASSERT_EQ(why, "");
  if (call.splits > 1) {
    why = emu::launch({static_cast<unsigned>(call.B * H * call.Tq), 1, 1},
                      D < 128 ? D : 128, 0, sched,
                      [&] { mh_tc::combineSplits<S>(p); });
    ASSERT_EQ(why, "");
  }

  ref::SdpaArgs a;
  a.B = call.B;
  a.Tq = call.Tq;
  a.Tkv = call.Tkv;
  a.q = qf.data();
  a.k = kf.data();
  a.v = vf.data();
  a.kvLens = S::PADDING ? call.kvLens.data() : nullptr;
  std::vector<double> refLse;
  a.lse = &refLse;
  const std::vector<double> want = ref::sdpa<double>(spec, a);
  const double logit = call.inputScale * call.inputScale * std::sqrt(D);
  const Tolerance tol =
      logitScaledTolerance(spec.dtype, spec.op, logit, spec.d_k);
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double got = static_cast<float>(out[i]);
    if (!(std::fabs(got - want[i]) <=
          tol.atol + tol.rtol * std::fabs(want[i])) &&
        ++bad <= 5)
      ADD_FAILURE() << "out[" << i << "] = " << got << ", reference "
                    << want[i];
  }
  EXPECT_EQ(bad, 0) << "of " << want.size() << " outputs";
  if (S::LSE) {
    const Tolerance lt = lseTolerance(spec);
    int badLse = 0;
    for (size_t i = 0; i < refLse.size(); ++i) {
      const double w = refLse[i], g = lse[i];
      const bool ok =
          std::isinf(w)
              ? (std::isinf(g) && g < 0)
              : std::fabs(g - w) <= lt.atol + 4e-3 + lt.rtol * std::fabs(w);
      if (!ok && ++badLse <= 5)
        ADD_FAILURE() << "lse[" << i << "] = " << g << ", reference " << w;
    }
    EXPECT_EQ(badLse, 0);
  }
}

// Every schedule the emulator has: a race shows in at least one.
template <class S>
void checkSchedules(const Call &call, Kernel kernel = Kernel::MmaSync) {
  for (bool atIssue : {false, true})
    for (bool lastFirst : {false, true}) {
      const emu::Schedule sched{atIssue, lastFirst};
      SCOPED_TRACE(sched.str());
      check<S>(call, sched, kernel);
    }
}

TEST(TensorCoreKernel, CausalF16RowsNotAMultipleOfTheTile) {
  checkSchedules<Spec<__half, 64, 4, 2, 4, 64, true, 0, false, true>>(
      {2, 70, 70, {}});
}

TEST(TensorCoreKernel, NoMaskBf16OneKvHeadShortQueries) {
  // n_kv = 1: one block packs every head; T_q < T_kv.
  checkSchedules<Spec<__nv_bfloat16, 64, 4, 4, 4, 32, false, 0, false, false>>(
      {1, 37, 100, {}});
}

TEST(TensorCoreKernel, WindowAndPaddingWithAFullyMaskedSequence) {
  // h = n_kv; sequence 1 has no key (zeros, lse -inf); bottom-right
  // positions with T_q < T_kv.
  checkSchedules<Spec<__half, 64, 2, 1, 4, 32, true, 20, true, true>>(
      {3, 50, 90, {90, 0, 41}});
}

TEST(TensorCoreKernel, DecodeSplitKeysMergeToTheUnsplitResult) {
  checkSchedules<Spec<__nv_bfloat16, 128, 8, 4, 4, 64, true, 0, false, true>>(
      {2, 1, 300, {}, 5});
  checkSchedules<Spec<__nv_bfloat16, 128, 8, 4, 4, 64, true, 0, false, true>>(
      {2, 1, 300, {}, 1});
}

TEST(TensorCoreKernel, SplitDecodeWithPaddingLeavesEmptySlices) {
  // Slices past a short sequence's keys see nothing; the merge ignores them.
  checkSchedules<Spec<__half, 64, 4, 2, 4, 32, false, 0, true, true>>(
      {2, 2, 200, {200, 17}, 6});
}

TEST(TensorCoreKernel, HeadWidth256HugeLogits) {
  Call c{1, 33, 33, {}};
  c.inputScale = 6; // logits up to ~1e2
  checkSchedules<Spec<__half, 256, 2, 2, 4, 32, true, 0, false, true>>(c);
  // The default tile for dk 256 (16 keys): one k16 step a tile; GQA 4 with
  // padding.
  Call d{2, 21, 40, {40, 17}};
  d.inputScale = 6;
  checkSchedules<Spec<__half, 256, 8, 4, 4, 16, true, 0, true, true>>(d);
}

TEST(TensorCoreKernel, EightWarpsOneRow) {
  // T = 1 prefill and 128-row blocks.
  checkSchedules<Spec<__nv_bfloat16, 128, 4, 2, 8, 32, true, 0, false, false>>(
      {2, 1, 1, {}});
  checkSchedules<Spec<__nv_bfloat16, 128, 4, 2, 8, 32, true, 0, false, false>>(
      {1, 130, 130, {}});
}

// The sm_90a kernel: two consumer warpgroups (8 warps) or one (4), the
// key tiles its wgmma shapes take (32: n32; 64 and 128: n64 products).

TEST(WgmmaKernel, CausalBf16TwoWarpgroupsRowsNotAMultipleOfTheTile) {
  // GQA 4 heads per K/V head; 150 tokens: 600 packed rows, 5 row blocks
  // (the last one partial), more key tiles than stages.
  checkSchedules<Spec<__nv_bfloat16, 128, 8, 4, 8, 128, true, 0, false, true>>(
      {1, 150, 150, {}}, Kernel::Wgmma);
}

TEST(WgmmaKernel, NoMaskF16HeadWidth64OneKvHeadShortQueries) {
  checkSchedules<Spec<__half, 64, 4, 4, 8, 64, false, 0, false, false>>(
      {2, 37, 300, {}}, Kernel::Wgmma);
}

TEST(WgmmaKernel, WindowAndPaddingWithNanPastEachSequence) {
  // h = n_kv; sequence 1 has no key; the last tile of each sequence
  // straddles its end over K/V rows of NaN.
  Call c{3, 50, 190, {190, 0, 150}};
  c.nanPastLength = true;
  checkSchedules<Spec<__half, 64, 2, 1, 4, 32, true, 40, true, true>>(
      c, Kernel::Wgmma);
}

TEST(WgmmaKernel, HeadWidth256OneWarpgroupHugeLogits) {
  Call c{1, 70, 70, {}};
  c.inputScale = 6;
  checkSchedules<Spec<__nv_bfloat16, 256, 2, 2, 4, 64, true, 0, false, true>>(
      c, Kernel::Wgmma);
}

TEST(WgmmaKernel, DecodeSplitKeysMergeToTheUnsplitResult) {
  checkSchedules<Spec<__half, 128, 8, 4, 8, 64, true, 0, false, true>>(
      {2, 1, 700, {}, 5}, Kernel::Wgmma);
}

TEST(TensorCoreKernel, PaddingWithNanPastEachSequence) {
  Call c{2, 40, 100, {100, 33}};
  c.nanPastLength = true;
  checkSchedules<Spec<__half, 64, 4, 2, 4, 32, true, 0, true, false>>(c);
}

// The index maps on their own.

TEST(TensorCoreTiles, SwizzleIsABijectionAndLdmatrixPhasesAvoidBankConflicts) {
  for (int width : {64, 128, 256}) {
    std::set<int> seen;
    for (int r = 0; r < 64; ++r)
      for (int c = 0; c < width; ++c)
        seen.insert(mh_tc::swizzled(r, c, width));
    EXPECT_EQ(seen.size(), static_cast<size_t>(64 * width));
    // One ldmatrix phase: 8 rows, one 16-byte chunk each, same logical
    // column: 8 distinct groups of 4 banks.
    for (int r0 = 0; r0 < 64; r0 += 8)
      for (int c = 0; c < width; c += 8) {
        std::set<int> banks;
        for (int r = r0; r < r0 + 8; ++r)
          banks.insert((mh_tc::swizzled(r, c, width) * 2 / 16) % 8);
        EXPECT_EQ(banks.size(), 8u) << "width " << width << " rows " << r0;
      }
  }
}

TEST(TensorCoreTiles, KeyTilesAreExactlyTheTilesSomeRowSees) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    mh_tc::Mask m{rng() % 2 == 0,
                  static_cast<long long>(rng() % 3 ? 0 : 1 + rng() % 90),
                  rng() % 2 == 0};
    const int bn = 16 << (rng() % 3);
    const long long tkv = 1 + rng() % 300, len = rng() % (tkv + 1);
    // Positions p(i) = i + T_kv - T_q: at most T_kv - 1, negative when
    // T_q > T_kv.
    const long long pLast = static_cast<long long>(rng() % (tkv + 20)) - 20;
    const long long pFirst = pLast - static_cast<long long>(rng() % 70);
    const mh_tc::TileRange r = mh_tc::keyTiles(m, pFirst, pLast, tkv, len, bn);
    for (long long t = 0; t * bn < tkv; ++t) {
      bool any = false, all = true;
      for (long long p = pFirst; p <= pLast; ++p)
        for (long long j = t * bn; j < (t + 1) * bn; ++j) {
          const bool vis = mh_tc::visible(m, p, j, tkv, len);
          any = any || vis;
          all = all && vis;
        }
      const bool scanned = r.lo <= t && t <= r.hi;
      if (any)
        EXPECT_TRUE(scanned) << "tile " << t << " holds visible keys";
      if (scanned && !m.padding)
        EXPECT_TRUE(any) << "tile " << t << " is scanned for nothing";
      if (mh_tc::tileWhole(m, pFirst, pLast, t * bn, bn, tkv, len))
        EXPECT_TRUE(all) << "tile " << t << " skips a mask it needs";
    }
  }
}

} // namespace
