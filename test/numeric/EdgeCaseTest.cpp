// Edge cases on generated kernels: fully masked rows, huge logits, strided
// (fused QKV) inputs and outputs, static sizes, determinism across thread
// counts. Kernels come from the numeric test libraries given as arguments.
#include "mhagen/harness/KernelHarness.h"
#include "mhagen/manifest.hpp"
#include "mhagen/reference/Numerics.h"
#include "mhagen/runtime.h"
#include "mhagen/spec/CostModel.h"
#include "mhagen/spec/SpecParser.h"

#include <gtest/gtest.h>

#include "../support/SkipSupport.h"

#include <sys/mman.h>
#include <unistd.h>

#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>

using namespace mhagen;

namespace {

// The best usable variant of the named kernel; when none can run here
// (e.g. MHAGEN_CPU_CLASS=avx2 hides the AVX-512 the host kernels were
// built for), any variant, so that SKIP_UNLESS_USABLE reports why.
const mhagen_kernel *kernel(const char *name) {
  const mhagen_kernel *k = nullptr;
  if (mhagen_find(name, &k) == MHAGEN_OK)
    return k;
  for (int i = 0; i < mhagen_kernel_count(); ++i)
    if (std::strcmp(mhagen_kernel_name(mhagen_kernel_at(i)), name) == 0)
      return mhagen_kernel_at(i);
  ADD_FAILURE() << "no kernel named " << name << ": " << mhagen_last_error();
  return nullptr;
}

// A kernel generated for `host` at build time that this machine cannot run
// (for example under MHAGEN_CPU_CLASS=avx2 on an AVX-512 machine) skips the
// test with the reason.
#define SKIP_UNLESS_USABLE(k)                                                  \
  do {                                                                         \
    std::string why_ = testing_support::unusableReason(k);                     \
    if (!why_.empty())                                                         \
      GTEST_SKIP() << mhagen_kernel_symbol(k) << ": " << why_;                 \
  } while (0)

AttentionSpec specOf(const mhagen_kernel *k) {
  KernelManifest m;
  std::string err;
  EXPECT_TRUE(KernelManifest::fromJson(mhagen_kernel_manifest(k), m, &err));
  return parseSpecs(m.spec.canonical, m.symbol).at(0);
}

} // namespace

TEST(FullyMasked, PaddingLengthZeroGivesZeros) {
  for (const char *name :
       {"t_sdpa_f32_padding_kv2_dk80", "t_sdpa_f32_causal_padding_kv1_dk64",
        "t_sdpa_bf16_padding_kv4_dk80"}) {
    const mhagen_kernel *k = kernel(name);
    ASSERT_NE(k, nullptr);
    SKIP_UNLESS_USABLE(k);
    ProblemOptions po;
    po.kvLen = 0; // every key hidden in every batch
    Problem p(specOf(k), {3, 33, 65}, po);
    mhagen_call_args a = p.args();
    ASSERT_EQ(mhagen_call(k, &a), MHAGEN_OK) << mhagen_last_error();
    for (float x : p.output())
      ASSERT_EQ(x, 0.0f) << name; // zeros, not NaN
  }
}

TEST(FullyMasked, LayerWithNoVisibleKeyOutputsTheBias) {
  const mhagen_kernel *k = kernel("t_layer_f32_padding_kv2_dk128");
  ASSERT_NE(k, nullptr);
  SKIP_UNLESS_USABLE(k);
  ProblemOptions po;
  po.kvLen = 0;
  Problem p(specOf(k), {2, 9, 9}, po);
  mhagen_call_args a = p.args();
  ASSERT_EQ(mhagen_call(k, &a), MHAGEN_OK) << mhagen_last_error();
  Comparison c = p.check({});
  EXPECT_TRUE(c.ok()) << c.maxAbsErr;
}

namespace {

// Tq > Tkv: query i sits at position i + Tkv - Tq < 0 for the first rows,
// which see no key at all and output zeros.
void checkCausalQueriesBeforeTheFirstKey(const char *name) {
  const mhagen_kernel *k = kernel(name);
  ASSERT_NE(k, nullptr);
  SKIP_UNLESS_USABLE(k);
  const AttentionSpec s = specOf(k);
  Problem p(s, {2, 40, 13}, {});
  mhagen_call_args a = p.args();
  ASSERT_EQ(mhagen_call(k, &a), MHAGEN_OK) << mhagen_last_error();
  std::vector<float> out = p.output();
  const int64_t width = s.h * s.d_v;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 40 - 13; ++i)
      for (int64_t c = 0; c < width; ++c)
        ASSERT_EQ(out[(b * 40 + i) * width + c], 0.0f);
  EXPECT_TRUE(p.check({}).ok());
}

// Logits of 1e4 and 3e3: every output finite and within the tolerance
// scaled to the logit.
void checkHugeLogits(std::initializer_list<const char *> names) {
  for (const char *name : names) {
    const mhagen_kernel *k = kernel(name);
    ASSERT_NE(k, nullptr);
    SKIP_UNLESS_USABLE(k);
    AttentionSpec s = specOf(k);
    for (double logit : {1e4, 3e3}) {
      ProblemOptions po;
      po.logitMagnitude = logit;
      Problem p(s, {2, 70, 70}, po);
      mhagen_call_args a = p.args();
      ASSERT_EQ(mhagen_call(k, &a), MHAGEN_OK) << mhagen_last_error();
      std::vector<float> got = p.output();
      for (float x : got)
        ASSERT_TRUE(std::isfinite(x)) << name << " logit " << logit;
      Tolerance tol = logitScaledTolerance(s.dtype, s.op, logit, s.d_k);
      Comparison c = compareToReference(got, p.reference({}), tol);
      EXPECT_TRUE(c.ok()) << name << " logit " << logit << ": max |err| "
                          << c.maxAbsErr << " tolerance " << tol.atol;
    }
  }
}

} // namespace

TEST(FullyMasked, CausalQueriesBeforeTheFirstKey) {
  checkCausalQueriesBeforeTheFirstKey("t_sdpa_f32_causal_kv1_dk64");
}

TEST(HugeLogits, NoOverflowAndStillAccurate) {
  checkHugeLogits({"t_sdpa_f32_none_kv4_dk64", "t_sdpa_f32_causal_kv2_dk128",
                   "t_sdpa_f32_window_kv1_dk80", "t_sdpa_bf16_causal_kv2_dk64",
                   "t_layer_f32_causal_kv2_dk64"});
}

// Score modifiers (test/numeric/CMakeLists.txt, group "modifiers_split"):
// a learned sink is a key of value 0, so a row that sees no real key
// outputs zeros with it too -- in the prefill variant, where the sink
// starts the state, and in the split decode variant, where it joins the
// merge of chunks that all saw nothing.
TEST(ScoreModifiers, SinkWithNoVisibleKeyGivesZeros) {
  for (const char *name :
       {"t_mod_sinks_f32_causal_padding", "t_mod_all_bf16_causal_padding"}) {
    const mhagen_kernel *k = kernel(name);
    ASSERT_NE(k, nullptr) << name;
    SKIP_UNLESS_USABLE(k);
    for (ProblemSize size : {ProblemSize{3, 1, 4000}, ProblemSize{2, 3, 777},
                             ProblemSize{2, 70, 90}}) {
      ProblemOptions po;
      po.kvLen = 0;
      Problem p(specOf(k), size, po);
      mhagen_call_args a = p.args();
      ASSERT_EQ(mhagen_call(k, &a), MHAGEN_OK) << mhagen_last_error();
      for (float x : p.output())
        ASSERT_EQ(x, 0.0f) << name << " T_q " << size.Tq; // not NaN
    }
  }
}

// Huge logits under a cap: scores saturate at +-C, so the outputs are those
// of a softmax over at most 2C and stay finite and accurate; with ALiBi
// and sinks beside it the bias and the sink still count.
TEST(ScoreModifiers, SoftcapBoundsHugeLogits) {
  for (const char *name : {"t_mod_softcap_f32_none", "t_mod_all_f32_window",
                           "t_mod_all_f32_causal_padding"}) {
    const mhagen_kernel *k = kernel(name);
    ASSERT_NE(k, nullptr) << name;
    SKIP_UNLESS_USABLE(k);
    AttentionSpec s = specOf(k);
    for (ProblemSize size : {ProblemSize{2, 70, 70}, ProblemSize{2, 1, 3001}}) {
      ProblemOptions po;
      po.logitMagnitude = 1e4;
      Problem p(s, size, po);
      mhagen_call_args a = p.args();
      ASSERT_EQ(mhagen_call(k, &a), MHAGEN_OK) << mhagen_last_error();
      std::vector<float> got = p.output();
      for (float x : got)
        ASSERT_TRUE(std::isfinite(x)) << name;
      Tolerance tol = toleranceFor(s);
      Comparison c = compareToReference(got, p.reference({}), tol);
      EXPECT_TRUE(c.ok()) << name << " T_q " << size.Tq << ": max |err| "
                          << c.maxAbsErr << " tolerance " << tol.atol;
    }
  }
}

// The decode variant with its key axis split into many chunks
// (test/numeric/CMakeLists.txt, group "decode"): chunks that see no key
// must add nothing to the merge, and a chunk holding the huge logits must
// not overflow the others' rescaling.
TEST(MaskUnions, NoVisibleKeyUnderAnyClauseGivesZeros) {
  // causal & (window(33) | sink(20)) & padding with every length 0: both
  // clauses hide everything (in prefill and in decode).
  const mhagen_kernel *k = kernel("t_union_f32_stream_pad");
  ASSERT_NE(k, nullptr);
  SKIP_UNLESS_USABLE(k);
  ProblemOptions po;
  po.kvLen = 0;
  for (ProblemSize z : {ProblemSize{2, 70, 70}, ProblemSize{3, 1, 300}}) {
    Problem p(specOf(k), z, po);
    mhagen_call_args a = p.args();
    ASSERT_EQ(mhagen_call(k, &a), MHAGEN_OK) << mhagen_last_error();
    for (float x : p.output())
      ASSERT_EQ(x, 0.0f);
  }
}

TEST(ScaleAtRuntime, EachCallUsesItsScale) {
  // The same kernel and inputs at two scales: both match the reference
  // at their scale, and the outputs differ (the scale is not ignored).
  const mhagen_kernel *k = kernel("t_srt_f32_causal");
  ASSERT_NE(k, nullptr);
  SKIP_UNLESS_USABLE(k);
  std::vector<float> first;
  for (double scale : {0.05, 0.4}) {
    ProblemOptions po;
    po.scale = scale;
    Problem p(specOf(k), {2, 65, 65}, po);
    mhagen_call_args a = p.args();
    ASSERT_EQ(mhagen_call(k, &a), MHAGEN_OK) << mhagen_last_error();
    Comparison c = p.check({});
    EXPECT_TRUE(c.ok()) << "scale " << scale << ": max |err| " << c.maxAbsErr;
    if (first.empty()) {
      first = p.output();
      continue;
    }
    double diff = 0;
    for (size_t i = 0; i < first.size(); ++i)
      diff = std::max(diff, std::fabs(double(first[i]) - p.output()[i]));
    EXPECT_GT(diff, 1e-3) << "the output does not depend on the scale";
  }
}

TEST(ScaleAtRuntime, BadScaleIsRefusedWithItsValue) {
  const mhagen_kernel *k = kernel("t_srt_f32_causal");
  ASSERT_NE(k, nullptr);
  SKIP_UNLESS_USABLE(k);
  Problem p(specOf(k), {1, 8, 8}, ProblemOptions{});
  for (float bad : {0.0f, -0.5f, NAN, INFINITY}) {
    mhagen_call_args a = p.args();
    a.scale = &bad;
    EXPECT_EQ(mhagen_call(k, &a), MHAGEN_ERR_INVALID_ARGUMENT) << bad;
    EXPECT_NE(std::string(mhagen_last_error()).find("must be finite and > 0"),
              std::string::npos)
        << mhagen_last_error();
  }
  mhagen_call_args a = p.args();
  a.scale = nullptr;
  EXPECT_EQ(mhagen_call(k, &a), MHAGEN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(mhagen_last_error())
                .find("scale is NULL but scale = runtime: pass a pointer"),
            std::string::npos)
      << mhagen_last_error();
}

TEST(DecodeSplit, NoVisibleKeyInAnyChunkGivesZeros) {
  for (const char *name :
       {"t_decode_f32_padding_kv1", "t_decode_bf16_causal_padding_kv2"}) {
    const mhagen_kernel *k = kernel(name);
    ASSERT_NE(k, nullptr) << name;
    SKIP_UNLESS_USABLE(k);
    for (ProblemSize size : {ProblemSize{3, 1, 4000}, ProblemSize{2, 3, 777}}) {
      ProblemOptions po;
      po.kvLen = 0;
      Problem p(specOf(k), size, po);
      mhagen_call_args a = p.args();
      ASSERT_EQ(mhagen_call(k, &a), MHAGEN_OK) << mhagen_last_error();
      for (float x : p.output())
        ASSERT_EQ(x, 0.0f) << name;
    }
  }
}

TEST(DecodeSplit, HugeLogitsAcrossChunks) {
  for (const char *name : {"t_decode_f32_none_kv1", "t_decode_f32_causal_kv4",
                           "t_decode_f32_window_kv2"}) {
    const mhagen_kernel *k = kernel(name);
    ASSERT_NE(k, nullptr) << name;
    SKIP_UNLESS_USABLE(k);
    AttentionSpec s = specOf(k);
    for (ProblemSize size :
         {ProblemSize{2, 1, 5000}, ProblemSize{1, 3, 3001}}) {
      ProblemOptions po;
      po.logitMagnitude = 1e4;
      Problem p(s, size, po);
      mhagen_call_args a = p.args();
      ASSERT_EQ(mhagen_call(k, &a), MHAGEN_OK) << mhagen_last_error();
      std::vector<float> got = p.output();
      for (float x : got)
        ASSERT_TRUE(std::isfinite(x)) << name;
      Tolerance tol = logitScaledTolerance(s.dtype, s.op, 1e4, s.d_k);
      Comparison c = compareToReference(got, p.reference({}), tol);
      EXPECT_TRUE(c.ok()) << name << " T_kv " << size.Tkv << ": max |err| "
                          << c.maxAbsErr << " tolerance " << tol.atol;
    }
  }
}

// kv_dtype = f16: the kernel widens f16 to f32 from the bits (the
// f16BitsToF32 sequence in HalidePipeline.cpp, not Halide's emulation), so
// every finite f16 value -- subnormals, -0, 65504 -- must come out as
// itself. Each query row r puts all its weight on key r (K one-hot, Q
// = 1000 on channel r: scores 0 or 112, so P is one-hot after the clamp at
// -80), so out[b, r, head] is V[b, r, kv head] as the kernel read it;
// together the rows cover every finite f16 bit pattern.
TEST(KvStorage, EveryFiniteF16ValueReadsBackExactly) {
  for (const char *name :
       {"t_kvstore_f16_none_kv4", "t_kvstore_f16_none_kv1"}) {
    const mhagen_kernel *k = kernel(name);
    ASSERT_NE(k, nullptr);
    SKIP_UNLESS_USABLE(k);
    AttentionSpec s = specOf(k);
    const int64_t T = s.d_k, dv = s.d_v, h = s.h, kv = s.n_kv;
    ASSERT_TRUE(s.mask.isNone()) << name << ": needs mask = none";
    std::vector<uint16_t> finite;
    for (uint32_t bits = 0; bits < 65536; ++bits)
      if (((bits >> 10) & 0x1f) != 0x1f)
        finite.push_back(static_cast<uint16_t>(bits));
    const int64_t perBatch = T * kv * dv;
    const int64_t B =
        (static_cast<int64_t>(finite.size()) + perBatch - 1) / perBatch;
    Problem p(s, {B, T, T}, ProblemOptions{});
    std::vector<float> q(static_cast<size_t>(B * T * h * s.d_k), 0.0f),
        kk(static_cast<size_t>(B * T * kv * s.d_k), 0.0f),
        v(static_cast<size_t>(B * T * kv * dv));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t r = 0; r < T; ++r) {
        for (int64_t hd = 0; hd < h; ++hd)
          q[static_cast<size_t>(((b * T + r) * h + hd) * s.d_k + r)] = 1000.0f;
        for (int64_t g = 0; g < kv; ++g)
          kk[static_cast<size_t>(((b * T + r) * kv + g) * s.d_k + r)] = 1.0f;
      }
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = f16ToFloat(finite[i % finite.size()]);
    p.setInput("q", q);
    p.setInput("k", kk);
    p.setInput("v", v);
    mhagen_call_args a = p.args();
    ASSERT_EQ(mhagen_call(k, &a), MHAGEN_OK) << mhagen_last_error();
    const std::vector<float> got = p.output();
    int64_t wrong = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t r = 0; r < T; ++r)
        for (int64_t hd = 0; hd < h; ++hd)
          for (int64_t c = 0; c < dv; ++c) {
            const int64_t g = hd / (h / kv);
            const float want =
                v[static_cast<size_t>(((b * T + r) * kv + g) * dv + c)];
            const float out =
                got[static_cast<size_t>(((b * T + r) * h + hd) * dv + c)];
            // P is one-hot up to the exp's rounding of 0 (a few ulps).
            if (!(std::fabs(out - want) <= 1e-6f * std::fabs(want)) &&
                ++wrong <= 5)
              ADD_FAILURE() << name << ": V = " << want << " (f16 bits of "
                            << "batch " << b << " key " << r << " channel " << c
                            << ") read back as " << out;
          }
    EXPECT_EQ(wrong, 0) << name;
  }
}

namespace {

// `bytes` of memory that end exactly at an inaccessible page, with another
// before them: a read one element outside faults.
class GuardedBuffer {
public:
  explicit GuardedBuffer(size_t bytes) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    span_ = ((bytes + page - 1) / page + 2) * page;
    void *m =
        mmap(nullptr, span_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
      return;
    base_ = static_cast<char *>(m);
    char *end = base_ + span_ - page;
    data_ = end - bytes;
    const size_t first = static_cast<size_t>(data_ - base_) / page * page;
    if (mprotect(base_ + first, static_cast<size_t>(end - base_) - first,
                 PROT_READ | PROT_WRITE) != 0)
      data_ = nullptr;
  }
  ~GuardedBuffer() {
    if (base_)
      munmap(base_, span_);
  }
  char *data() const { return data_; }

private:
  char *base_ = nullptr, *data_ = nullptr;
  size_t span_ = 0;
};

} // namespace

// A paged cache read through a table whose entries past each sequence's
// length are junk (abi.h: they are never used; the caller's engine may
// leave anything there), with the cache between two inaccessible pages.
// The call neither faults nor changes a bit of its result, also when the
// caller states one block more than the pool holds: a junk entry clamped
// into that block would read the guard page. Contiguous and ragged
// batches, decode to prefill-sized query counts.
TEST(PagedKv, JunkTableEntriesAreNeverUsed) {
  for (const char *name : {"t_paged_f32_causal_kv2", "t_paged_i8_window_kv1",
                           "t_ragged_f32_paged_16", "t_ragged_i8_paged_7"}) {
    const mhagen_kernel *k = kernel(name);
    ASSERT_NE(k, nullptr);
    SKIP_UNLESS_USABLE(k);
    AttentionSpec s = specOf(k);
    ASSERT_TRUE(s.pagedKv()) << name;
    for (int64_t tq : {1, 4, 40}) {
      SCOPED_TRACE(std::string(name) + " t_q " + std::to_string(tq));
      Problem p(s, {3, tq, 300}, ProblemOptions{});
      mhagen_call_args a = p.args();
      ASSERT_EQ(mhagen_call(k, &a), MHAGEN_OK) << mhagen_last_error();
      const std::vector<float> want = p.output();
      // The cache's tensors copied to guarded memory.
      const size_t slots = static_cast<size_t>(a.num_blocks * s.kv_block);
      const size_t kvBytes = s.kvType() == KvType::F32  ? 4
                             : s.kvType() == KvType::I8 ? 1
                                                        : 2;
      GuardedBuffer gk(slots * s.n_kv * s.d_k * kvBytes),
          gv(slots * s.n_kv * s.d_v * kvBytes),
          gks(slots * s.n_kv * sizeof(float)),
          gvs(slots * s.n_kv * sizeof(float));
      ASSERT_TRUE(gk.data() && gv.data() && gks.data() && gvs.data());
      std::memcpy(gk.data(), a.k, slots * s.n_kv * s.d_k * kvBytes);
      std::memcpy(gv.data(), a.v, slots * s.n_kv * s.d_v * kvBytes);
      a.k = gk.data();
      a.v = gv.data();
      if (a.k_scale) {
        std::memcpy(gks.data(), a.k_scale, slots * s.n_kv * sizeof(float));
        std::memcpy(gvs.data(), a.v_scale, slots * s.n_kv * sizeof(float));
        a.k_scale = reinterpret_cast<const float *>(gks.data());
        a.v_scale = reinterpret_cast<const float *>(gvs.data());
      }
      const int64_t pool = a.num_blocks;
      for (int64_t stated : {pool, pool + 1}) {
        // Entries past each sequence's length: far outside the cache, or
        // (clamped) its last stated block.
        std::vector<int32_t> table = p.blockTable();
        const int64_t width = static_cast<int64_t>(table.size()) / 3;
        int junk = 0;
        for (int64_t b = 0; b < 3; ++b)
          for (int64_t j = (p.kvLens()[b] + s.kv_block - 1) / s.kv_block;
               j < width; ++j, ++junk)
            table[b * width + j] = junk % 3 == 0   ? INT32_MAX
                                   : junk % 3 == 1 ? static_cast<int32_t>(pool)
                                                   : INT32_MIN + junk;
        ASSERT_GT(junk, 0) << "some sequence must leave table entries unused";
        a.block_table = table.data();
        a.num_blocks = stated;
        p.clearOutput();
        ASSERT_EQ(mhagen_call(k, &a), MHAGEN_OK) << mhagen_last_error();
        const std::vector<float> got = p.output();
        ASSERT_EQ(got.size(), want.size());
        EXPECT_EQ(
            std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
            << "num_blocks " << stated << " (pool " << pool
            << "): the junk entries changed the result";
      }
    }
  }
}

// A ragged batch: the runtime's split into sequences writes exactly the
// packed rows, honours a token stride on the packed q and out, and skips a
// sequence without queries; q and out sit at the end of guarded memory,
// so a row read or written past them faults. Each layout gives the bits
// of the dense call (itself checked against the reference in
// numeric_ragged).
TEST(Ragged, PackedRowsStridesAndEmptySequences) {
  const mhagen_kernel *k = kernel("t_ragged_f32_causal_kv2");
  ASSERT_NE(k, nullptr);
  SKIP_UNLESS_USABLE(k);
  AttentionSpec s = specOf(k);
  ASSERT_TRUE(s.ragged);
  Problem p(s, {4, 9, 100}, ProblemOptions{});
  mhagen_call_args a = p.args();
  ASSERT_EQ(mhagen_call(k, &a), MHAGEN_OK) << mhagen_last_error();
  EXPECT_TRUE(p.check({}).ok());
  const int64_t qw = s.h * s.d_k, ow = s.h * s.d_v;
  const std::vector<int32_t> off = p.qOffsets();
  const int64_t rows = off.back();
  const auto *q = static_cast<const float *>(a.q);
  const auto *dense = static_cast<const float *>(a.out);
  const std::vector<float> want(dense, dense + rows * ow);

  // Strided rows (a fused buffer's view) at the end of guarded memory.
  const int64_t qs = qw + 24, os = ow + 8;
  GuardedBuffer gq((rows - 1) * qs * 4 + qw * 4),
      go((rows - 1) * os * 4 + ow * 4);
  ASSERT_TRUE(gq.data() && go.data());
  auto *sq = reinterpret_cast<float *>(gq.data());
  auto *so = reinterpret_cast<float *>(go.data());
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(sq + r * qs, q + r * qw, qw * sizeof(float));
  mhagen_call_args b = a;
  b.q = sq;
  b.out = so;
  b.q_token_stride = qs;
  b.out_token_stride = os;
  ASSERT_EQ(mhagen_call(k, &b), MHAGEN_OK) << mhagen_last_error();
  for (int64_t r = 0; r < rows; ++r)
    EXPECT_EQ(std::memcmp(so + r * os, want.data() + r * ow, ow * 4), 0)
        << "packed row " << r << " differs with token strides";

  // Sequence 1 without queries: its rows leave the packed layout; the
  // others keep their bits.
  const int64_t drop = off[2] - off[1];
  ASSERT_GT(drop, 0);
  std::vector<int32_t> off2 = off;
  for (size_t i = 2; i < off2.size(); ++i)
    off2[i] -= static_cast<int32_t>(drop);
  const int64_t rows2 = rows - drop;
  GuardedBuffer gq2(rows2 * qw * 4), go2(rows2 * ow * 4);
  ASSERT_TRUE(gq2.data() && go2.data());
  auto *q2 = reinterpret_cast<float *>(gq2.data());
  auto *o2 = reinterpret_cast<float *>(go2.data());
  std::memcpy(q2, q, off[1] * qw * 4);
  std::memcpy(q2 + off[1] * qw, q + off[2] * qw, (rows - off[2]) * qw * 4);
  mhagen_call_args c = a;
  c.q = q2;
  c.out = o2;
  c.q_offsets = off2.data();
  ASSERT_EQ(mhagen_call(k, &c), MHAGEN_OK) << mhagen_last_error();
  EXPECT_EQ(std::memcmp(o2, want.data(), off[1] * ow * 4), 0);
  EXPECT_EQ(std::memcmp(o2 + off[1] * ow, want.data() + off[2] * ow,
                        (rows - off[2]) * ow * 4),
            0)
      << "the sequences after the empty one moved or changed";
}

TEST(Strides, FusedQkvBufferGivesTheSameBits) {
  const mhagen_kernel *k = kernel("t_sdpa_f32_causal_kv4_dk80");
  ASSERT_NE(k, nullptr);
  SKIP_UNLESS_USABLE(k);
  AttentionSpec s = specOf(k);
  const int64_t B = 2, T = 37, h = s.h, kv = s.n_kv, dk = s.d_k;
  Problem p(s, {B, T, T}, {});
  mhagen_call_args dense = p.args();
  ASSERT_EQ(mhagen_call(k, &dense), MHAGEN_OK) << mhagen_last_error();
  std::vector<float> want = p.output();

  // One [B, T, (h + 2 kv) dk] buffer holding Q | K | V per token, and an
  // output with a 7-element gap between tokens and a padded batch stride.
  const int64_t row = (h + 2 * kv) * dk;
  std::vector<float> fused(static_cast<size_t>(B * T * row));
  const float *q = static_cast<const float *>(dense.q);
  const float *kk = static_cast<const float *>(dense.k);
  const float *v = static_cast<const float *>(dense.v);
  for (int64_t t = 0; t < B * T; ++t) {
    std::memcpy(&fused[t * row], q + t * h * dk, h * dk * 4);
    std::memcpy(&fused[t * row + h * dk], kk + t * kv * dk, kv * dk * 4);
    std::memcpy(&fused[t * row + (h + kv) * dk], v + t * kv * dk, kv * dk * 4);
  }
  const int64_t outRow = h * s.d_v + 7, outBatch = T * outRow + 5;
  std::vector<float> out(static_cast<size_t>(B * outBatch), -123.0f);
  mhagen_call_args a = dense;
  a.q = fused.data();
  a.k = fused.data() + h * dk;
  a.v = fused.data() + (h + kv) * dk;
  a.q_token_stride = a.k_token_stride = a.v_token_stride = row;
  a.out = out.data();
  a.out_token_stride = outRow;
  a.out_batch_stride = outBatch;
  ASSERT_EQ(mhagen_call(k, &a), MHAGEN_OK) << mhagen_last_error();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t c = 0; c < h * s.d_v; ++c)
        ASSERT_EQ(out[b * outBatch + t * outRow + c],
                  want[(b * T + t) * h * s.d_v + c]);
      for (int64_t c = h * s.d_v; c < outRow; ++c) // gaps untouched
        ASSERT_EQ(out[b * outBatch + t * outRow + c], -123.0f);
    }
}

// bf16 attention on AMX tiles (target avx512_amx, MLIR backend; the
// library numeric_edge_cases_amx loads). Its key tiles are read in place
// through the token and batch strides when whole and copied when partial,
// so a padded cache must give the dense call's bits.
TEST(Amx, PaddedKvCacheGivesTheSameBits) {
  const mhagen_kernel *k = kernel("t_sdpa_bf16_causal_kv2_dk64");
  ASSERT_NE(k, nullptr);
  SKIP_UNLESS_USABLE(k);
  const AttentionSpec s = specOf(k);
  const int64_t B = 2, T = 77, cap = T + 9;
  Problem p(s, {B, T, T}, {});
  mhagen_call_args a = p.args();
  ASSERT_EQ(mhagen_call(k, &a), MHAGEN_OK) << mhagen_last_error();
  const std::vector<float> want = p.output();
  // Each token's `width` bf16 values at the start of a row of width + 24
  // (the rest NaN), in a cache of `cap` tokens per sequence.
  auto padded = [&](const void *dense, int64_t width) {
    const auto *from = static_cast<const uint16_t *>(dense);
    std::vector<uint16_t> cache(static_cast<size_t>(B * cap * (width + 24)),
                                0x7fc0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        std::memcpy(&cache[(b * cap + t) * (width + 24)],
                    from + (b * T + t) * width, width * 2);
    return cache;
  };
  std::vector<uint16_t> kc = padded(a.k, s.n_kv * s.d_k);
  std::vector<uint16_t> vc = padded(a.v, s.n_kv * s.d_v);
  a.k = kc.data();
  a.v = vc.data();
  a.k_token_stride = s.n_kv * s.d_k + 24;
  a.v_token_stride = s.n_kv * s.d_v + 24;
  a.k_batch_stride = cap * a.k_token_stride;
  a.v_batch_stride = cap * a.v_token_stride;
  ASSERT_EQ(mhagen_call(k, &a), MHAGEN_OK) << mhagen_last_error();
  EXPECT_EQ(p.output(), want) << "the spare elements (NaN) or the layout "
                                 "reached the result";
}

TEST(Amx, CausalQueriesBeforeTheFirstKeyAreZero) {
  checkCausalQueriesBeforeTheFirstKey("t_sdpa_bf16_causal_kv2_dk64");
}

TEST(Amx, HugeLogitsStayFiniteAndAccurate) {
  checkHugeLogits({"t_sdpa_bf16_causal_kv2_dk64", "t_sdpa_bf16_none_kv2_dk128",
                   "t_sdpa_bf16_window_kv1_dk128"});
}

// An int8 K/V cache with spare capacity: K/V and their scales are read in
// place through batch strides (a cache of `cap` tokens per sequence holding
// `tkv`), with the same bits as a dense call.
TEST(Strides, Int8CacheWithSpareCapacityGivesTheSameBits) {
  const mhagen_kernel *k = kernel("t_kvstore_i8_causal_padding_kv4");
  ASSERT_NE(k, nullptr);
  SKIP_UNLESS_USABLE(k);
  AttentionSpec s = specOf(k);
  ASSERT_TRUE(s.kvQuantized());
  const int64_t B = 3, Tq = 2, Tkv = 301, cap = 512, kv = s.n_kv;
  const int64_t kRow = kv * s.d_k, vRow = kv * s.d_v;
  Problem p(s, {B, Tq, Tkv}, {});
  mhagen_call_args dense = p.args();
  ASSERT_EQ(mhagen_call(k, &dense), MHAGEN_OK) << mhagen_last_error();
  ASSERT_TRUE(p.check(rowsToCheck(p)).ok());
  const std::vector<float> want = p.output();

  std::vector<int8_t> kc(B * cap * kRow, 99), vc(B * cap * vRow, 99);
  std::vector<float> ksc(B * cap * kv, 1e30f), vsc(B * cap * kv, 1e30f);
  for (int64_t b = 0; b < B; ++b) {
    std::memcpy(&kc[b * cap * kRow],
                static_cast<const int8_t *>(dense.k) + b * Tkv * kRow,
                Tkv * kRow);
    std::memcpy(&vc[b * cap * vRow],
                static_cast<const int8_t *>(dense.v) + b * Tkv * vRow,
                Tkv * vRow);
    std::memcpy(&ksc[b * cap * kv], dense.k_scale + b * Tkv * kv, Tkv * kv * 4);
    std::memcpy(&vsc[b * cap * kv], dense.v_scale + b * Tkv * kv, Tkv * kv * 4);
  }
  p.clearOutput();
  mhagen_call_args a = dense;
  a.k = kc.data();
  a.v = vc.data();
  a.k_scale = ksc.data();
  a.v_scale = vsc.data();
  a.k_batch_stride = cap * kRow;
  a.v_batch_stride = cap * vRow;
  a.k_scale_batch_stride = a.v_scale_batch_stride = cap * kv;
  ASSERT_EQ(mhagen_call(k, &a), MHAGEN_OK) << mhagen_last_error();
  const std::vector<float> got = p.output();
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(got[i], want[i]) << "element " << i;
}

TEST(StaticSizes, RunsAtItsSizeAndRefusesOthers) {
  const mhagen_kernel *k = kernel("t_static_sdpa");
  ASSERT_NE(k, nullptr);
  SKIP_UNLESS_USABLE(k);
  AttentionSpec s = specOf(k);
  Problem p(s, {2, 64, 129}, {});
  mhagen_call_args a = p.args();
  ASSERT_EQ(mhagen_call(k, &a), MHAGEN_OK) << mhagen_last_error();
  EXPECT_TRUE(p.check({}).ok());
  a.t_q = 63;
  EXPECT_EQ(mhagen_call(k, &a), MHAGEN_ERR_SHAPE_MISMATCH);
  EXPECT_NE(std::string(mhagen_last_error())
                .find("t_q is 63 but this kernel was generated for t_q = 64"),
            std::string::npos)
      << mhagen_last_error();
  a.t_q = 64;
  a.batch = 1;
  EXPECT_EQ(mhagen_call(k, &a), MHAGEN_ERR_SHAPE_MISMATCH);
}

// Non-finite inputs (docs/design.md §1). An infinity or a NaN in Q or K
// makes every output row whose scores it reaches NaN, lse included; one in
// V makes the channel it sits in non-finite in the rows that see its key.
// Rows it does not reach keep their bits, and a row that sees no key
// stays 0. Every sdpa kernel of the libraries given runs (dense K/V; an
// int8 cache cannot hold a non-finite value), on a prefill and a decode
// shape, against a clean call of the same problem.
namespace {

struct Poison {
  const char *tensor; // "q", "k" or "v"
  float value;
};

// The rows of `size` under the kernel's mask: does query t see key j in
// batch b (padding lengths from the problem)?
bool sees(const AttentionSpec &s, const Problem &p, int64_t b, int64_t t,
          int64_t j) {
  const ProblemSize &z = p.size();
  const int64_t len = p.kvLens().empty() ? z.Tkv : p.kvLens()[b];
  return maskAllows(s.effectiveMask(), t, j, z.Tq, z.Tkv, len);
}

bool seesAnyKey(const AttentionSpec &s, const Problem &p, int64_t b,
                int64_t t) {
  for (int64_t j = 0; j < p.size().Tkv; ++j)
    if (sees(s, p, b, t, j))
      return true;
  return false;
}

bool sameBits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

void checkNonFinite(const mhagen_kernel *k, ProblemSize size) {
  const AttentionSpec s = specOf(k);
  ProblemOptions po;
  po.kvLenMin = size.Tkv / 2; // padding: most keys visible, some not
  Problem p(s, size, po);
  mhagen_call_args a = p.args();
  ASSERT_EQ(mhagen_call(k, &a), MHAGEN_OK) << mhagen_last_error();
  const std::vector<float> clean = p.output();
  const std::vector<float> cleanLse = p.lse();
  const int64_t H = s.h, G = s.n_kv, dk = s.d_k, dv = s.d_v;
  const int64_t group = H / G;
  const char *name = mhagen_kernel_name(k);

  // Where each poisoned value goes: the last batch, the last query, the
  // last KV head (and the last query head of its group), a key the last
  // query sees but earlier queries under a causal mask do not.
  const int64_t b = size.B - 1, t = size.Tq - 1, g = G - 1;
  int64_t key = -1;
  for (int64_t j = size.Tkv - 1; j >= 0 && key < 0; --j)
    if (sees(s, p, b, t, j))
      key = j;
  ASSERT_GE(key, 0) << name << ": the last query sees no key";
  for (Poison poison :
       {Poison{"q", NAN}, Poison{"q", INFINITY}, Poison{"k", NAN},
        Poison{"k", -INFINITY}, Poison{"k", INFINITY}, Poison{"v", NAN},
        Poison{"v", INFINITY}}) {
    const std::string tensor = poison.tensor;
    const std::vector<float> original(
        p.inputValues(tensor),
        p.inputValues(tensor) +
            (tensor == "q"
                 ? size.B * size.Tq * H * dk
                 : size.B * size.Tkv * G * (tensor == "k" ? dk : dv)));
    std::vector<float> values = original;
    const int64_t channel = 1;
    if (tensor == "q")
      values[((b * size.Tq + t) * H + (H - 1)) * dk + channel] = poison.value;
    else
      values[((b * size.Tkv + key) * G + g) * (tensor == "k" ? dk : dv) +
             channel] = poison.value;
    p.setInput(tensor, values);
    p.clearOutput();
    a = p.args();
    ASSERT_EQ(mhagen_call(k, &a), MHAGEN_OK) << mhagen_last_error();
    const std::vector<float> got = p.output();
    const std::vector<float> &lse = p.lse();
    const std::string what = std::string(name) + ": " + tensor + " = " +
                             std::to_string(poison.value) + " at batch " +
                             std::to_string(b);

    for (int64_t r = 0; r < size.Tq; ++r) {
      for (int64_t hd = 0; hd < H; ++hd) {
        const bool inGroup = hd / group == g;
        const bool anyKey = seesAnyKey(s, p, b, r);
        bool reached = false;
        if (tensor == "q")
          reached = r == t && hd == H - 1 && anyKey;
        else
          reached = inGroup && sees(s, p, b, r, key);
        const int64_t row = (b * size.Tq + r) * H + hd;
        const std::string at =
            what + ", row " + std::to_string(r) + " head " + std::to_string(hd);
        for (int64_t c = 0; c < dv; ++c) {
          const float x = got[row * dv + c], x0 = clean[row * dv + c];
          if (!anyKey) {
            ASSERT_EQ(x, 0.0f) << at << ": a row that sees no key";
          } else if (reached && tensor != "v") {
            ASSERT_TRUE(std::isnan(x)) << at << " channel " << c << ": " << x;
          } else if (reached && c == channel) {
            ASSERT_FALSE(std::isfinite(x)) << at << ": " << x;
          } else if (tensor == "v" && inGroup && c == channel) {
            // A hidden key's value reaches rows of its tile as 0 x NaN, as
            // in every attention that multiplies P by V.
          } else {
            ASSERT_TRUE(sameBits(x, x0))
                << at << " channel " << c << ": " << x << " != " << x0;
          }
        }
        if (!lse.empty()) {
          const float l = lse[row], l0 = cleanLse[row];
          if (reached && tensor != "v")
            ASSERT_TRUE(std::isnan(l)) << at << ": lse " << l;
          else
            ASSERT_TRUE(sameBits(l, l0)) << at << ": lse " << l << " != " << l0;
        }
      }
    }
    p.setInput(tensor, original);
  }
}

} // namespace

TEST(NonFinite, ReachesExactlyTheRowsThatSeeIt) {
  int checked = 0;
  for (int i = 0; i < mhagen_kernel_count(); ++i) {
    const mhagen_kernel *k = mhagen_kernel_at(i);
    if (!testing_support::unusableReason(k).empty())
      continue;
    const AttentionSpec s = specOf(k);
    if (s.op != Op::Sdpa || s.ragged || s.pagedKv() || s.kvQuantized())
      continue;
    for (ProblemSize size : {ProblemSize{2, 37, 70}, ProblemSize{2, 1, 300}}) {
      if ((s.T && *s.T != size.Tq) || (s.T_kv && *s.T_kv != size.Tkv))
        continue;
      SCOPED_TRACE(mhagen_kernel_name(k));
      checkNonFinite(k, size);
      if (HasFatalFailure())
        return;
      ++checked;
    }
  }
  if (checked == 0)
    GTEST_SKIP() << "no usable dense-cache sdpa kernel in these libraries";
  std::printf("non-finite inputs: %d kernel x shape pairs checked\n", checked);
}

TEST(Determinism, SameBitsForAnyThreadCount) {
  const mhagen_kernel *k = kernel("t_sdpa_f32_window_kv4_dk128");
  ASSERT_NE(k, nullptr);
  SKIP_UNLESS_USABLE(k);
  Problem p(specOf(k), {2, 300, 300}, {});
  mhagen_call_args a = p.args();
  std::vector<std::vector<float>> outs;
  for (int threads : {1, 2, 5}) {
    ASSERT_EQ(mhagen_set_num_threads(threads), MHAGEN_OK);
    p.clearOutput();
    ASSERT_EQ(mhagen_call(k, &a), MHAGEN_OK) << mhagen_last_error();
    outs.push_back(p.output());
  }
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_EQ(outs[0], outs[2]);
  EXPECT_TRUE(p.check({}).ok());
}

int main(int argc, char **argv) {
  testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    mhagen_library *lib = nullptr;
    if (mhagen_load_library(argv[i], &lib) != MHAGEN_OK) {
      std::fprintf(stderr, "%s\n", mhagen_last_error());
      return 1;
    }
  }
  return RUN_ALL_TESTS();
}
