// The runtime: manifests, registration, lookup and dispatch, CPU-feature
// and device refusals, argument validation (one test per rule), threads.
#include "FakeKernels.h"

#include "mhagen/manifest.hpp"
#include "mhagen/runtime.h"
#include "mhagen/runtime.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

using namespace mhagen;
using namespace mhagen::test;

namespace {

const std::vector<std::string> kAvx2 = {"avx2", "fma", "f16c"};
const std::vector<std::string> kAvx512 = {"avx2", "fma", "f16c", "avx512f",
                                          "avx512bw"};

bool contains(const std::string &s, const std::string &part) {
  return s.find(part) != std::string::npos;
}

// Dense sdpa tensors for the fake spec (h 4, kv 2, dk = dv = 8).
struct Buffers {
  explicit Buffers(int64_t B = 2, int64_t T = 5)
      : q(B * T * 4 * 8), k(B * T * 2 * 8), v(B * T * 2 * 8),
        out(B * T * 4 * 8), lens(B, 3) {
    args.abi_version = MHAGEN_ABI_VERSION;
    args.batch = B;
    args.t_q = args.t_kv = T;
    args.q = q.data();
    args.k = k.data();
    args.v = v.data();
    args.out = out.data();
  }
  std::vector<float> q, k, v, out;
  std::vector<int32_t> lens;
  mhagen_call_args args{};
};

// The arguments of a fake op = layer kernel (d 32, h 4, kv 2, dk 8): x,
// the four projections and out; biases and norm weights are allocated for
// a test to pass.
struct LayerBuffers {
  LayerBuffers(int64_t B, int64_t T)
      : x(B * T * 32), wq(32 * 32), wk(32 * 16), wv(32 * 16), wo(32 * 32),
        bq(32), bk(16), bv(16), bo(32), qNorm(8), kNorm(8), out(B * T * 32) {
    args.abi_version = MHAGEN_ABI_VERSION;
    args.batch = B;
    args.t_q = T;
    args.x = x.data();
    args.w_q = wq.data();
    args.w_k = wk.data();
    args.w_v = wv.data();
    args.w_o = wo.data();
    args.out = out.data();
  }
  std::vector<float> x, wq, wk, wv, wo, bq, bk, bv, bo, qNorm, kNorm, out;
  mhagen_call_args args{};
};

} // namespace

TEST(Manifest, RoundTripsThroughJson) {
  KernelManifest m = fakeManifest("rt", "rt_avx2", "avx2", kAvx2, true);
  m.scheduleJson = R"({"key_tile":32})";
  m.tuningJson = R"({"source":"default"})";
  KernelManifest back;
  std::string err;
  ASSERT_TRUE(KernelManifest::fromJson(m.toJson(), back, &err)) << err;
  EXPECT_EQ(back.toJson(), m.toJson());
  EXPECT_EQ(back.spec.h, 4);
  EXPECT_TRUE(back.spec.padding);
  EXPECT_EQ(back.cpuFeatures, kAvx2);
}

TEST(Manifest, CarriesAMaskUnionAndARuntimeScale) {
  KernelManifest m = fakeManifest("u", "u_avx2", "avx2", kAvx2, true);
  m.spec.maskExpr = "window(4096) & padding | causal & padding & sink(4)";
  m.spec.causal = true;
  m.spec.scaleAtRuntime = true;
  m.spec.scale = 0;
  KernelManifest back;
  std::string err;
  ASSERT_TRUE(KernelManifest::fromJson(m.toJson(), back, &err)) << err;
  EXPECT_EQ(back.spec.maskExpr, m.spec.maskExpr);
  EXPECT_TRUE(back.spec.scaleAtRuntime);
  EXPECT_TRUE(contains(m.toJson(), R"("scale": "runtime")") ||
              contains(m.toJson(), R"("scale":"runtime")"))
      << m.toJson();
  // A scale that is neither a number > 0 nor "runtime" is refused.
  std::string bad = m.toJson();
  const size_t at = bad.find("\"runtime\"");
  ASSERT_NE(at, std::string::npos);
  bad.replace(at, 9, "\"later\"");
  EXPECT_FALSE(KernelManifest::fromJson(bad, back, &err));
  EXPECT_TRUE(contains(err, "spec.scale must be a finite number > 0 or"))
      << err;
}

TEST(Manifest, RejectsBrokenManifests) {
  KernelManifest out;
  std::string err;
  EXPECT_FALSE(KernelManifest::fromJson("not json", out, &err));
  EXPECT_TRUE(contains(err, "not valid JSON")) << err;
  EXPECT_FALSE(KernelManifest::fromJson(R"({"abi_version": 1})", out, &err));
  EXPECT_TRUE(contains(err, "mhagen_version is missing")) << err;
  KernelManifest m = fakeManifest("bad", "bad_avx2", "avx2", kAvx2);
  m.spec.op = "conv";
  EXPECT_FALSE(KernelManifest::fromJson(m.toJson(), out, &err));
  EXPECT_TRUE(contains(err, "spec.op must be sdpa or layer")) << err;
  m = fakeManifest("bad", "bad_avx2", "avx2", kAvx2);
  m.spec.n_kv = 3;
  EXPECT_FALSE(KernelManifest::fromJson(m.toJson(), out, &err));
  m = fakeManifest("bad", "bad_avx2", "avx2", kAvx2);
  m.device = "tpu";
  EXPECT_FALSE(KernelManifest::fromJson(m.toJson(), out, &err));
}

TEST(Registry, RefusesOtherAbiVersions) {
  static FakeKernel old(fakeManifest("abi", "abi_old_avx2", "avx2", kAvx2),
                        /*abiVersion=*/MHAGEN_ABI_VERSION + 1);
  EXPECT_EQ(mhagen_register_kernel(&old.desc), MHAGEN_ERR_ABI_MISMATCH);
  EXPECT_TRUE(contains(mhagen_last_error(), "abi_old_avx2 was built for ABI"))
      << mhagen_last_error();
  // A manifest that claims another ABI than the descriptor is refused too.
  KernelManifest m = fakeManifest("abi", "abi_m_avx2", "avx2", kAvx2);
  m.abiVersion = 99;
  static FakeKernel liar(m);
  EXPECT_EQ(mhagen_register_kernel(&liar.desc), MHAGEN_ERR_ABI_MISMATCH);
  // ... and one that belongs to another symbol.
  static FakeKernel swapped(
      fakeManifest("abi", "abi_other_avx2", "avx2", kAvx2));
  swapped.desc.symbol = "abi_swapped_avx2";
  EXPECT_EQ(mhagen_register_kernel(&swapped.desc), MHAGEN_ERR_LOAD_FAILED);
  EXPECT_TRUE(contains(mhagen_last_error(), "does not belong"));
}

TEST(Registry, PicksTheBestVariantTheCpuRuns) {
  static FakeKernel a2(fakeManifest("pick", "pick_avx2", "avx2", kAvx2));
  static FakeKernel a5(fakeManifest("pick", "pick_avx512", "avx512", kAvx512));
  ASSERT_EQ(mhagen_register_kernel(&a2.desc), MHAGEN_OK);
  ASSERT_EQ(mhagen_register_kernel(&a5.desc), MHAGEN_OK);
  ASSERT_EQ(mhagen_register_kernel(&a5.desc), MHAGEN_OK); // idempotent

  mhagen_override_cpu_features("avx2 fma f16c avx512f avx512bw");
  const mhagen_kernel *k = nullptr;
  for (const char *key :
       {"pick", "hash_pick", "op=sdpa;d=32;h=4;kv=2;dk=8;dv=8;pick"}) {
    ASSERT_EQ(mhagen_find(key, &k), MHAGEN_OK) << key;
    EXPECT_STREQ(mhagen_kernel_target(k), "avx512") << key;
  }
  // A CPU without AVX-512 gets the avx2 variant.
  mhagen_override_cpu_features("avx2,fma,f16c");
  ASSERT_EQ(mhagen_find("pick", &k), MHAGEN_OK);
  EXPECT_STREQ(mhagen_kernel_symbol(k), "pick_avx2");
  // Forcing the avx512 variant there is refused with the missing features.
  EXPECT_EQ(mhagen_find_variant("pick", "avx512", nullptr, &k),
            MHAGEN_ERR_UNSUPPORTED_CPU);
  EXPECT_TRUE(contains(mhagen_last_error(),
                       "needs CPU features this machine lacks: avx512f "
                       "avx512bw"))
      << mhagen_last_error();
  // Calling it directly is refused the same way: no SIGILL.
  Buffers b;
  EXPECT_EQ(mhagen_invoke(&a5.desc, &b.args), MHAGEN_ERR_UNSUPPORTED_CPU);
  EXPECT_EQ(a5.calls.load(), 0);
  // A CPU with neither: nothing usable, and the message lists both refusals.
  mhagen_override_cpu_features("sse41");
  EXPECT_EQ(mhagen_find("pick", &k), MHAGEN_ERR_UNSUPPORTED_CPU);
  EXPECT_TRUE(contains(mhagen_last_error(), "pick_avx2"));
  EXPECT_TRUE(contains(mhagen_last_error(), "pick_avx512"));
  mhagen_override_cpu_features(nullptr);
}

TEST(Registry, ForcedVariantAndEnvironmentOverride) {
  static FakeKernel a2(fakeManifest("force", "force_avx2", "avx2", kAvx2));
  static FakeKernel a5(
      fakeManifest("force", "force_avx512", "avx512", kAvx512));
  mhagen_register_kernel(&a2.desc);
  mhagen_register_kernel(&a5.desc);
  mhagen_override_cpu_features("avx2 fma f16c avx512f avx512bw");
  const mhagen_kernel *k = nullptr;
  ASSERT_EQ(mhagen_find_variant("force", "avx2", "halide", &k), MHAGEN_OK);
  EXPECT_STREQ(mhagen_kernel_symbol(k), "force_avx2");
  setenv("MHAGEN_FORCE_TARGET", "avx2", 1);
  ASSERT_EQ(mhagen_find("force", &k), MHAGEN_OK);
  EXPECT_STREQ(mhagen_kernel_symbol(k), "force_avx2");
  unsetenv("MHAGEN_FORCE_TARGET");
  EXPECT_EQ(mhagen_find_variant("force", nullptr, "mlir", &k),
            MHAGEN_ERR_NOT_FOUND);
  EXPECT_EQ(mhagen_find("no_such_kernel", &k), MHAGEN_ERR_NOT_FOUND);
  EXPECT_TRUE(contains(mhagen_last_error(), "no kernel matches"));
  mhagen_override_cpu_features(nullptr);
}

TEST(Registry, DuplicateSymbolsAreRefused) {
  static FakeKernel one(fakeManifest("dup", "dup_avx2", "avx2", kAvx2));
  static FakeKernel two(fakeManifest("dup", "dup_avx2", "avx2", kAvx2));
  ASSERT_EQ(mhagen_register_kernel(&one.desc), MHAGEN_OK);
  EXPECT_EQ(mhagen_register_kernel(&two.desc), MHAGEN_ERR_LOAD_FAILED);
  EXPECT_TRUE(contains(mhagen_last_error(), "already registered"));
}

TEST(Registry, GpuKernelWithoutDeviceIsRefused) {
  setenv("MHAGEN_HIDE_DEVICES", "cuda,opencl", 1);
  static FakeKernel gpu(fakeManifest("gpu", "gpu_cuda_sm86", "cuda_sm86", {}));
  ASSERT_EQ(mhagen_register_kernel(&gpu.desc), MHAGEN_OK);
  const mhagen_kernel *k = nullptr;
  EXPECT_EQ(mhagen_find("gpu", &k), MHAGEN_ERR_NO_DEVICE);
  EXPECT_TRUE(contains(mhagen_last_error(), "runs on cuda"))
      << mhagen_last_error();
  Buffers b;
  EXPECT_EQ(mhagen_invoke(&gpu.desc, &b.args), MHAGEN_ERR_NO_DEVICE);
  EXPECT_EQ(gpu.calls.load(), 0);
  EXPECT_EQ(mhagen_device_available("cuda"), MHAGEN_ERR_NO_DEVICE);
}

TEST(Dispatch, KernelErrorsComeBackAsCodes) {
  static FakeKernel bad(fakeManifest("fails", "fails_avx2", "avx2", kAvx2),
                        MHAGEN_ABI_VERSION, /*fail=*/true);
  mhagen_override_cpu_features("avx2 fma f16c");
  Buffers b;
  EXPECT_EQ(mhagen_invoke(&bad.desc, &b.args), MHAGEN_ERR_KERNEL_FAILED);
  EXPECT_TRUE(contains(mhagen_last_error(), "failed on purpose"));
  mhagen_override_cpu_features(nullptr);
}

// ---- argument validation: every rule, one test each ----------------------

class Validation : public testing::Test {
protected:
  void SetUp() override {
    mhagen_override_cpu_features("avx2 fma f16c");
    static FakeKernel plain(fakeManifest("val", "val_avx2", "avx2", kAvx2));
    static FakeKernel pad(fakeManifest("valpad", "valpad_avx2", "avx2", kAvx2,
                                       /*padding=*/true));
    KernelManifest fixed = fakeManifest("valfix", "valfix_avx2", "avx2", kAvx2);
    fixed.spec.T = 5;
    fixed.spec.B = 2;
    static FakeKernel fix(fixed);
    plain_ = &plain;
    pad_ = &pad;
    fixed_ = &fix;
  }
  void TearDown() override { mhagen_override_cpu_features(nullptr); }
  int call(FakeKernel *k, const mhagen_call_args *a) {
    return mhagen_invoke(&k->desc, a);
  }
  void expectError(FakeKernel *k, const mhagen_call_args *a, int code,
                   const std::string &text) {
    int before = k->calls.load();
    EXPECT_EQ(call(k, a), code);
    EXPECT_TRUE(contains(mhagen_last_error(), text))
        << "message was: " << mhagen_last_error();
    EXPECT_EQ(k->calls.load(), before) << "the kernel must not run";
  }
  // The arguments of an sdpa call on dense buffers of B x T tokens.
  static mhagen_call_args sdpaArgs(int64_t B, int64_t T, const void *q,
                                   const void *k, const void *v, void *out) {
    mhagen_call_args a{};
    a.abi_version = MHAGEN_ABI_VERSION;
    a.batch = B;
    a.t_q = a.t_kv = T;
    a.q = q;
    a.k = k;
    a.v = v;
    a.out = out;
    return a;
  }
  FakeKernel *plain_, *pad_, *fixed_;
};

TEST_F(Validation, ValidCallRuns) {
  Buffers b;
  ASSERT_EQ(call(plain_, &b.args), MHAGEN_OK) << mhagen_last_error();
  EXPECT_EQ(b.out[0], 2.0f);
  EXPECT_STREQ(mhagen_last_error(), "");
}
TEST_F(Validation, NullArgs) {
  expectError(plain_, nullptr, MHAGEN_ERR_INVALID_ARGUMENT,
              "call arguments are NULL");
}
TEST_F(Validation, CallerAbiVersion) {
  Buffers b;
  b.args.abi_version = 0;
  expectError(plain_, &b.args, MHAGEN_ERR_ABI_MISMATCH, "carry ABI version 0");
}
TEST_F(Validation, ReservedFlags) {
  Buffers b;
  b.args.flags = 1;
  expectError(plain_, &b.args, MHAGEN_ERR_INVALID_ARGUMENT, "flags must be 0");
}
TEST_F(Validation, StreamOnlyForCudaKernels) {
  // A CPU kernel cannot run on a caller's CUDA stream: refused, not ignored.
  Buffers b;
  int notAStream = 0;
  b.args.cuda_stream = &notAStream;
  expectError(plain_, &b.args, MHAGEN_ERR_INVALID_ARGUMENT,
              "does not run on a caller's CUDA stream; pass NULL");
}
TEST_F(Validation, NonPositiveSizes) {
  Buffers b;
  b.args.batch = 0;
  expectError(plain_, &b.args, MHAGEN_ERR_INVALID_ARGUMENT,
              "batch must be >= 1 (got 0)");
  Buffers c;
  c.args.t_q = -3;
  expectError(plain_, &c.args, MHAGEN_ERR_INVALID_ARGUMENT, "t_q must be >= 1");
  Buffers d;
  d.args.t_kv = 0;
  expectError(plain_, &d.args, MHAGEN_ERR_INVALID_ARGUMENT,
              "t_kv must be >= 1");
}
TEST_F(Validation, HugeSizes) {
  Buffers b;
  b.args.t_q = int64_t(1) << 40;
  expectError(plain_, &b.args, MHAGEN_ERR_INVALID_ARGUMENT,
              "t_q must be < 2^31");
}
TEST_F(Validation, StaticSizeMismatch) {
  Buffers b(2, 5);
  ASSERT_EQ(call(fixed_, &b.args), MHAGEN_OK) << mhagen_last_error();
  Buffers c(2, 4);
  expectError(fixed_, &c.args, MHAGEN_ERR_SHAPE_MISMATCH,
              "t_q is 4 but this kernel was generated for t_q = 5");
  Buffers d(1, 5);
  expectError(fixed_, &d.args, MHAGEN_ERR_SHAPE_MISMATCH,
              "generated for batch = 2");
}
TEST_F(Validation, NullTensors) {
  for (const char *which : {"q", "k", "v", "out"}) {
    Buffers b;
    std::string w = which;
    if (w == "q")
      b.args.q = nullptr;
    if (w == "k")
      b.args.k = nullptr;
    if (w == "v")
      b.args.v = nullptr;
    if (w == "out")
      b.args.out = nullptr;
    expectError(plain_, &b.args, MHAGEN_ERR_INVALID_ARGUMENT, w + " is NULL");
  }
}
TEST_F(Validation, Misaligned) {
  Buffers b;
  b.args.k = reinterpret_cast<const char *>(b.k.data()) + 2;
  expectError(plain_, &b.args, MHAGEN_ERR_INVALID_ARGUMENT,
              "k is not aligned to its element size (4 bytes)");
}
TEST_F(Validation, TokenStrideTooSmall) {
  Buffers b;
  b.args.q_token_stride = 31; // a token of q holds 4 * 8 = 32 elements
  expectError(plain_, &b.args, MHAGEN_ERR_INVALID_ARGUMENT,
              "q token stride 31 is smaller than one token (32 elements)");
}
TEST_F(Validation, BatchStrideTooSmall) {
  Buffers b;
  b.args.v_batch_stride = 10;
  expectError(plain_, &b.args, MHAGEN_ERR_INVALID_ARGUMENT,
              "v batch stride 10 is smaller than one sequence");
}
TEST_F(Validation, StrideBeyond32Bits) {
  Buffers b;
  b.args.out_token_stride = int64_t(1) << 32;
  expectError(plain_, &b.args, MHAGEN_ERR_INVALID_ARGUMENT, "out is too large");
}
TEST_F(Validation, OutputAliasingAnInput) {
  Buffers b;
  b.args.out = b.q.data();
  expectError(plain_, &b.args, MHAGEN_ERR_INVALID_ARGUMENT,
              "out overlaps input q");
}
TEST_F(Validation, PaddingNeedsLengths) {
  Buffers b;
  expectError(pad_, &b.args, MHAGEN_ERR_INVALID_ARGUMENT,
              "kv_lens is NULL but the mask has padding");
}
TEST_F(Validation, PaddingLengthOutOfRange) {
  Buffers b;
  b.lens[1] = 6; // t_kv is 5
  b.args.kv_lens = b.lens.data();
  expectError(pad_, &b.args, MHAGEN_ERR_INVALID_ARGUMENT,
              "kv_lens[1] = 6 is outside [0, t_kv = 5]");
  b.lens[1] = -1;
  expectError(pad_, &b.args, MHAGEN_ERR_INVALID_ARGUMENT,
              "kv_lens[1] = -1 is outside");
  b.lens[1] = 0; // zero is fine: that batch sees no key
  EXPECT_EQ(call(pad_, &b.args), MHAGEN_OK);
}
TEST_F(Validation, LengthsWithoutPadding) {
  Buffers b;
  b.args.kv_lens = b.lens.data();
  expectError(plain_, &b.args, MHAGEN_ERR_INVALID_ARGUMENT,
              "kv_lens given but this kernel's mask has no padding");
}
TEST_F(Validation, DevicePointersOnCpu) {
  Buffers b;
  b.args.device_pointers = 1;
  expectError(plain_, &b.args, MHAGEN_ERR_INVALID_ARGUMENT,
              "device_pointers is set but this kernel runs on the cpu");
}
TEST_F(Validation, LayerRules) {
  KernelManifest m = fakeManifest("vallayer", "vallayer_avx2", "avx2", kAvx2);
  m.spec.op = "layer";
  m.spec.bias = true;
  static FakeKernel layer(m);
  LayerBuffers buffers(2, 5);
  mhagen_call_args a = buffers.args;
  a.b_q = buffers.bq.data();
  a.b_k = buffers.bk.data();
  a.b_v = buffers.bv.data();
  a.b_o = buffers.bo.data();
  ASSERT_EQ(call(&layer, &a), MHAGEN_OK) << mhagen_last_error();
  mhagen_call_args c = a;
  c.t_kv = 7;
  expectError(&layer, &c, MHAGEN_ERR_SHAPE_MISMATCH,
              "op = layer attends over its own 5 tokens");
  c = a;
  c.b_v = nullptr;
  expectError(&layer, &c, MHAGEN_ERR_INVALID_ARGUMENT, "b_v is NULL");
  c = a;
  c.w_o = nullptr;
  expectError(&layer, &c, MHAGEN_ERR_INVALID_ARGUMENT, "w_o is NULL");
  c = a;
  c.out = buffers.wk.data();
  expectError(&layer, &c, MHAGEN_ERR_INVALID_ARGUMENT,
              "out overlaps input w_k");
}
// qk_norm's weights and positions = runtime's positions: required when the
// spec has them, refused when it does not, and every position in range.
TEST_F(Validation, NormWeightsAndPositions) {
  KernelManifest m = fakeManifest("valqkn", "valqkn_avx2", "avx2", kAvx2);
  m.spec.op = "layer";
  m.spec.qk_norm = "head";
  m.spec.positions = true;
  static FakeKernel layer(m);
  LayerBuffers buffers(2, 3);
  std::vector<int32_t> positions = {7, 8, 9, 0, 1 << 24, 5};
  mhagen_call_args a = buffers.args;
  a.q_norm = buffers.qNorm.data();
  a.k_norm = buffers.kNorm.data();
  a.positions = positions.data();
  ASSERT_EQ(call(&layer, &a), MHAGEN_OK) << mhagen_last_error();
  mhagen_call_args c = a;
  c.k_norm = nullptr;
  expectError(&layer, &c, MHAGEN_ERR_INVALID_ARGUMENT,
              "k_norm is NULL but qk_norm = head: pass dk key norm weights");
  c = a;
  c.positions = nullptr;
  expectError(&layer, &c, MHAGEN_ERR_INVALID_ARGUMENT,
              "positions is NULL but positions = runtime");
  std::vector<int32_t> bad = positions;
  bad[4] = (1 << 24) + 1;
  c = a;
  c.positions = bad.data();
  expectError(&layer, &c, MHAGEN_ERR_INVALID_ARGUMENT,
              "positions[1, 1] = 16777217 is outside [0, 2^24]");
  bad[4] = -1;
  expectError(&layer, &c, MHAGEN_ERR_INVALID_ARGUMENT,
              "positions[1, 1] = -1 is outside");
  c = a;
  c.out = buffers.qNorm.data();
  expectError(&layer, &c, MHAGEN_ERR_INVALID_ARGUMENT,
              "out overlaps input q_norm");

  KernelManifest plainLayer =
      fakeManifest("valnoqkn", "valnoqkn_avx2", "avx2", kAvx2);
  plainLayer.spec.op = "layer";
  static FakeKernel without(plainLayer);
  c = a;
  c.positions = nullptr;
  expectError(&without, &c, MHAGEN_ERR_INVALID_ARGUMENT,
              "q_norm or k_norm given but this kernel's spec has qk_norm = "
              "none");
  c = a;
  c.q_norm = c.k_norm = nullptr;
  expectError(&without, &c, MHAGEN_ERR_INVALID_ARGUMENT,
              "positions given but this kernel's spec has no positions = "
              "runtime");
}
// A layer's KV cache: k and v of t_kv tokens and kv_lens, each length at
// least t_q (the tokens the call appends) and at most t_kv; the cache is
// written, so it may alias no other tensor.
TEST_F(Validation, LayerCache) {
  KernelManifest m = fakeManifest("valkvc", "valkvc_avx2", "avx2", kAvx2);
  m.spec.op = "layer";
  m.spec.layer_cache = true;
  static FakeKernel layer(m);
  LayerBuffers buffers(2, 3);
  const int64_t capacity = 10, row = 16; // kv 2 x dk 8
  std::vector<float> pool(buffers.x.size() + 2 * 2 * capacity * row);
  float *k = pool.data() + buffers.x.size();
  float *v = k + 2 * capacity * row;
  std::vector<int32_t> lens = {3, 10};
  mhagen_call_args a = buffers.args;
  a.t_kv = capacity;
  a.k = k;
  a.v = v;
  a.kv_lens = lens.data();
  ASSERT_EQ(call(&layer, &a), MHAGEN_OK) << mhagen_last_error();
  std::vector<int32_t> bad = {2, 10};
  mhagen_call_args c = a;
  c.kv_lens = bad.data();
  expectError(&layer, &c, MHAGEN_ERR_SHAPE_MISMATCH,
              "kv_lens[0] = 2 but the layer appends its t_q = 3 tokens to "
              "the cache");
  bad = {3, 11};
  expectError(&layer, &c, MHAGEN_ERR_INVALID_ARGUMENT,
              "kv_lens[1] = 11 is outside [0, t_kv = 10]");
  c = a;
  c.k = nullptr;
  expectError(&layer, &c, MHAGEN_ERR_INVALID_ARGUMENT, "k is NULL");
  c = a;
  c.kv_lens = nullptr;
  expectError(&layer, &c, MHAGEN_ERR_INVALID_ARGUMENT, "kv_lens is NULL");
  c = a;
  c.v = k + row; // one token into k
  expectError(&layer, &c, MHAGEN_ERR_INVALID_ARGUMENT,
              "k (the cache the layer appends to) overlaps v");
  c = a;
  c.x = k - buffers.x.size() + 1; // x's last element is k's first
  expectError(&layer, &c, MHAGEN_ERR_INVALID_ARGUMENT,
              "(the cache the layer appends to) overlaps x");
  c = a;
  c.t_kv = 0;
  expectError(&layer, &c, MHAGEN_ERR_INVALID_ARGUMENT, "t_kv must be >= 1");
}
// An int8 layer cache: the rows' scales are part of the cache, required
// and written, so they may alias no other tensor either.
TEST_F(Validation, LayerCacheInt8Scales) {
  KernelManifest m = fakeManifest("valkvc8", "valkvc8_avx2", "avx2", kAvx2);
  m.spec.op = "layer";
  m.spec.layer_cache = true;
  m.spec.kv_dtype = "i8";
  static FakeKernel layer(m);
  LayerBuffers buffers(2, 3);
  const int64_t capacity = 10, heads = 2, row = 16; // kv 2 x dk 8
  std::vector<int8_t> k(2 * capacity * row), v(2 * capacity * row);
  std::vector<float> pool(buffers.x.size() + 2 * 2 * capacity * heads);
  float *kScale = pool.data() + buffers.x.size();
  float *vScale = kScale + 2 * capacity * heads;
  std::vector<int32_t> lens = {3, 10};
  mhagen_call_args a = buffers.args;
  a.t_kv = capacity;
  a.k = k.data();
  a.v = v.data();
  a.k_scale = kScale;
  a.v_scale = vScale;
  a.kv_lens = lens.data();
  ASSERT_EQ(call(&layer, &a), MHAGEN_OK) << mhagen_last_error();
  mhagen_call_args c = a;
  c.v_scale = nullptr;
  expectError(&layer, &c, MHAGEN_ERR_INVALID_ARGUMENT,
              "v_scale is NULL but kv_dtype = i8");
  c = a;
  c.v_scale = kScale + heads; // one token into k_scale
  expectError(&layer, &c, MHAGEN_ERR_INVALID_ARGUMENT,
              "k_scale (the cache the layer appends to) overlaps v_scale");
  c = a;
  c.x = kScale - buffers.x.size() + 1; // x's last element is k_scale's first
  expectError(&layer, &c, MHAGEN_ERR_INVALID_ARGUMENT,
              "k_scale (the cache the layer appends to) overlaps x");
}
TEST_F(Validation, BiasPointersWithoutBias) {
  KernelManifest m = fakeManifest("valnob", "valnob_avx2", "avx2", kAvx2);
  m.spec.op = "layer";
  static FakeKernel layer(m);
  std::vector<float> x(32), w(32 * 32), bias(32), out(32);
  mhagen_call_args a{};
  a.abi_version = MHAGEN_ABI_VERSION;
  a.batch = 1;
  a.t_q = 1;
  a.x = x.data();
  a.w_q = a.w_k = a.w_v = a.w_o = w.data();
  a.b_q = bias.data();
  a.out = out.data();
  expectError(&layer, &a, MHAGEN_ERR_INVALID_ARGUMENT,
              "bias pointers given but this kernel's spec has bias = false");
}

// Fixed-size call-time tensors (sinks, alibi_slopes, scale): a NULL one is
// refused with the reason this kernel needs it, as sequence tensors are.
TEST_F(Validation, FixedTensorsLeftNullSayWhy) {
  KernelManifest m = fakeManifest("valmods", "valmods_avx2", "avx2", kAvx2);
  m.spec.sinks = true;
  m.spec.alibi = "runtime";
  m.spec.scale = 0;
  m.spec.scaleAtRuntime = true;
  static FakeKernel fixedArgs(m);
  const int64_t B = 1, T = 3;
  std::vector<float> q(B * T * 4 * 8), k(B * T * 2 * 8), v(B * T * 2 * 8),
      out(B * T * 4 * 8), sinks(4), slopes(4, 0.5f);
  float scale = 0.25f;
  mhagen_call_args a = sdpaArgs(B, T, q.data(), k.data(), v.data(), out.data());
  a.sinks = sinks.data();
  a.alibi_slopes = slopes.data();
  a.scale = &scale;
  ASSERT_EQ(call(&fixedArgs, &a), MHAGEN_OK) << mhagen_last_error();
  mhagen_call_args c = a;
  c.sinks = nullptr;
  expectError(&fixedArgs, &c, MHAGEN_ERR_INVALID_ARGUMENT,
              "sinks is NULL but sinks = learned: pass one f32 logit per "
              "query head");
  c = a;
  c.alibi_slopes = nullptr;
  expectError(&fixedArgs, &c, MHAGEN_ERR_INVALID_ARGUMENT,
              "alibi_slopes is NULL but alibi = runtime: pass one f32 slope "
              "per query head");
  c = a;
  c.scale = nullptr;
  expectError(&fixedArgs, &c, MHAGEN_ERR_INVALID_ARGUMENT,
              "scale is NULL but scale = runtime: pass a pointer to the "
              "call's score scale (one float)");
  // Non-finite modifiers are refused as a non-finite scale is; a negative
  // slope or sink logit is a value like any other.
  for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    std::vector<float> badSinks = sinks, badSlopes = slopes;
    badSinks[2] = bad;
    badSlopes[3] = bad;
    c = a;
    c.sinks = badSinks.data();
    expectError(&fixedArgs, &c, MHAGEN_ERR_INVALID_ARGUMENT,
                "sinks[2] = " + std::to_string(bad) + " must be finite");
    c = a;
    c.alibi_slopes = badSlopes.data();
    expectError(&fixedArgs, &c, MHAGEN_ERR_INVALID_ARGUMENT,
                "alibi_slopes[3] = " + std::to_string(bad) + " must be finite");
  }
  std::vector<float> negative = {-1.5f, 0.0f, -3.0f, 2.0f};
  c = a;
  c.sinks = negative.data();
  c.alibi_slopes = negative.data();
  EXPECT_EQ(call(&fixedArgs, &c), MHAGEN_OK) << mhagen_last_error();
}

// kv_dtype = i8: int8 K/V plus one f32 scale per (batch, token, kv head).
TEST_F(Validation, Int8KvNeedsItsScales) {
  KernelManifest m = fakeManifest("vali8", "vali8_avx2", "avx2", kAvx2);
  m.spec.kv_dtype = "i8";
  static FakeKernel i8(m);
  const int64_t B = 2, T = 5;
  std::vector<float> q(B * T * 4 * 8), out(B * T * 4 * 8);
  std::vector<int8_t> k(B * T * 2 * 8), v(B * T * 2 * 8);
  std::vector<float> ks(B * T * 2), vs(B * T * 2);
  mhagen_call_args a = sdpaArgs(B, T, q.data(), k.data(), v.data(), out.data());
  a.k_scale = ks.data();
  a.v_scale = vs.data();
  ASSERT_EQ(call(&i8, &a), MHAGEN_OK) << mhagen_last_error();
  // int8 elements have no alignment to keep: an odd address is fine.
  std::vector<int8_t> k1(k.size() + 1);
  mhagen_call_args c = a;
  c.k = k1.data() + 1;
  EXPECT_EQ(call(&i8, &c), MHAGEN_OK) << mhagen_last_error();
  c = a;
  c.v_scale = nullptr;
  expectError(&i8, &c, MHAGEN_ERR_INVALID_ARGUMENT,
              "v_scale is NULL but kv_dtype = i8: pass one f32 scale per "
              "(batch, token, kv head)");
  c = a;
  c.k_scale_token_stride = 1; // a token holds kv = 2 scales
  expectError(&i8, &c, MHAGEN_ERR_INVALID_ARGUMENT,
              "k_scale token stride 1 is smaller than one token (2 elements)");
  c = a;
  c.k_scale = reinterpret_cast<const float *>(
      reinterpret_cast<const char *>(ks.data()) + 2);
  expectError(&i8, &c, MHAGEN_ERR_INVALID_ARGUMENT,
              "k_scale is not aligned to its element size (4 bytes)");
  c = a;
  c.out = vs.data(); // the output must not alias the scales either
  expectError(&i8, &c, MHAGEN_ERR_INVALID_ARGUMENT, "out overlaps input");
  // Scales given to a kernel whose K/V are not int8.
  Buffers b;
  b.args.k_scale = ks.data();
  expectError(plain_, &b.args, MHAGEN_ERR_INVALID_ARGUMENT,
              "k_scale given but this kernel's kv_dtype is not i8");
}

// ragged = true: the offsets are checked before any row is touched, and
// the runtime calls the kernel once per run of sequences with the same
// query count, at their packed rows (as [run, n] with a batch stride of n
// rows), their batches of the cache and their key lengths.
TEST_F(Validation, RaggedBatchIsCheckedAndSplitIntoSequences) {
  KernelManifest m = fakeManifest("valragged", "valragged_avx2", "avx2", kAvx2);
  m.spec.ragged = true;
  static FakeKernel ragged(m);
  const int64_t B = 3, Tkv = 6, row = 4 * 8, kvRow = 2 * 8;
  std::vector<int32_t> offsets = {0, 2, 2, 5}; // sequence 1: no queries
  std::vector<int32_t> lens = {4, 3, 6};
  std::vector<float> q(5 * row), out(5 * row);
  std::vector<float> k(B * Tkv * kvRow), v(B * Tkv * kvRow);
  mhagen_call_args a = sdpaArgs(B, 3, q.data(), k.data(), v.data(), out.data());
  a.t_kv = Tkv;
  a.kv_lens = lens.data();
  a.q_offsets = offsets.data();
  ragged.seen.clear();
  ASSERT_EQ(call(&ragged, &a), MHAGEN_OK) << mhagen_last_error();
  ASSERT_EQ(ragged.seen.size(), 2u);
  const mhagen_call_args &s0 = ragged.seen[0], &s2 = ragged.seen[1];
  EXPECT_EQ(s0.batch, 1);
  EXPECT_EQ(s0.t_q, 2);
  EXPECT_EQ(s0.t_kv, Tkv); // the cache; kv_lens places the queries
  EXPECT_EQ(s0.q, q.data());
  EXPECT_EQ(s0.out, out.data());
  EXPECT_EQ(s0.k, k.data());
  EXPECT_EQ(s0.kv_lens, lens.data());
  EXPECT_EQ(s0.q_offsets, nullptr);
  EXPECT_EQ(s2.t_q, 3);
  EXPECT_EQ(s2.t_kv, 6);
  EXPECT_EQ(s2.q, q.data() + 2 * row);
  EXPECT_EQ(s2.out, out.data() + 2 * row);
  EXPECT_EQ(s2.k, k.data() + 2 * Tkv * kvRow);
  EXPECT_EQ(s2.v, v.data() + 2 * Tkv * kvRow);
  EXPECT_EQ(s2.kv_lens, lens.data() + 2);
  // Three sequences of one query each (a decode step): one call of batch
  // 3, the packed rows a [3, 1] view with a token stride.
  std::vector<int32_t> decode = {0, 1, 2, 3};
  mhagen_call_args d = a;
  d.t_q = 1;
  d.q_offsets = decode.data();
  d.q_token_stride = row + 8;
  ragged.seen.clear();
  ASSERT_EQ(call(&ragged, &d), MHAGEN_OK) << mhagen_last_error();
  ASSERT_EQ(ragged.seen.size(), 1u);
  EXPECT_EQ(ragged.seen[0].batch, 3);
  EXPECT_EQ(ragged.seen[0].t_q, 1);
  EXPECT_EQ(ragged.seen[0].q_token_stride, row + 8);
  EXPECT_EQ(ragged.seen[0].q_batch_stride, row + 8);
  EXPECT_EQ(ragged.seen[0].out_batch_stride, 0); // dense rows

  auto refused = [&](std::vector<int32_t> o, const std::string &text,
                     int code = MHAGEN_ERR_INVALID_ARGUMENT) {
    mhagen_call_args c = a;
    c.q_offsets = o.data();
    expectError(&ragged, &c, code, text);
  };
  refused({1, 2, 2, 5}, "q_offsets[0] = 1 but must be 0");
  refused({0, 2, 1, 5},
          "q_offsets[2] = 1 is below q_offsets[1] = 2: offsets must not "
          "decrease");
  refused({0, 0, 0, 4},
          "sequence 2 has 4 queries (q_offsets[3] - q_offsets[2]) but t_q = "
          "3 (t_q is the longest sequence's query count)",
          MHAGEN_ERR_SHAPE_MISMATCH);
  refused({0, 0, 0, 0}, "q_offsets[3] = 0: the batch has no queries");
  mhagen_call_args c = a;
  std::vector<int32_t> shortLens = {4, 2, 6};
  std::vector<int32_t> o = {0, 0, 3, 5};
  c.q_offsets = o.data();
  c.kv_lens = shortLens.data();
  expectError(&ragged, &c, MHAGEN_ERR_SHAPE_MISMATCH,
              "sequence 1 has 3 queries (q_offsets[2] - q_offsets[1]) but "
              "kv_lens[1] = 2 keys: its queries are its last tokens");
  c = a;
  c.q_offsets = nullptr;
  expectError(&ragged, &c, MHAGEN_ERR_INVALID_ARGUMENT,
              "q_offsets is NULL but ragged = true");
  c = a;
  c.q_batch_stride = 5 * row;
  expectError(&ragged, &c, MHAGEN_ERR_INVALID_ARGUMENT,
              "q_batch_stride is set but this kernel's queries are packed");
  c = a;
  c.kv_lens = nullptr;
  expectError(&ragged, &c, MHAGEN_ERR_INVALID_ARGUMENT,
              "kv_lens is NULL but the mask has padding, the cache is paged "
              "or the batch is ragged");
  // The packed rows' extent comes from the offsets: a token stride too
  // small for a row is refused like any other.
  c = a;
  c.out_token_stride = row - 1;
  expectError(&ragged, &c, MHAGEN_ERR_INVALID_ARGUMENT,
              "out token stride 31 is smaller than one token (32 elements)");
  // A kernel whose queries are not packed takes no offsets.
  Buffers b;
  b.args.q_offsets = offsets.data();
  expectError(plain_, &b.args, MHAGEN_ERR_INVALID_ARGUMENT,
              "q_offsets given but this kernel's batch is not ragged");
}

// kv_cache = paged(BLOCK): blocks, a block table and the sequence lengths,
// checked before the kernel runs; a hostile table never reaches it.
TEST_F(Validation, PagedCacheChecksItsTableAndLengths) {
  KernelManifest m = fakeManifest("valpaged", "valpaged_avx2", "avx2", kAvx2);
  m.spec.kv_block = 4;
  m.spec.kv_dtype = "i8";
  static FakeKernel paged(m);
  const int64_t B = 2, Tq = 1, Tkv = 10, NB = 7; // 3 table entries each
  std::vector<float> q(B * Tq * 4 * 8), out(B * Tq * 4 * 8);
  std::vector<int8_t> k(NB * 4 * 2 * 8), v(NB * 4 * 2 * 8);
  std::vector<float> ks(NB * 4 * 2), vs(NB * 4 * 2);
  std::vector<int32_t> lens = {10, 5};
  // Sequence 1 needs two blocks: its third entry is never read.
  std::vector<int32_t> table = {6, 0, 3, 2, 5, -77};
  mhagen_call_args a =
      sdpaArgs(B, Tq, q.data(), k.data(), v.data(), out.data());
  a.t_kv = Tkv;
  a.k_scale = ks.data();
  a.v_scale = vs.data();
  a.kv_lens = lens.data();
  a.block_table = table.data();
  a.num_blocks = NB;
  ASSERT_EQ(call(&paged, &a), MHAGEN_OK) << mhagen_last_error();
  std::vector<int32_t> bad = table;
  bad[4] = 7; // sequence 1's second block, past the cache
  mhagen_call_args c = a;
  c.block_table = bad.data();
  expectError(&paged, &c, MHAGEN_ERR_INVALID_ARGUMENT,
              "block_table[1, 1] = 7 is outside [0, num_blocks = 7) and "
              "sequence 1 (length 5) reads it");
  bad = table;
  bad[0] = -1;
  c.block_table = bad.data();
  expectError(&paged, &c, MHAGEN_ERR_INVALID_ARGUMENT,
              "block_table[0, 0] = -1 is outside");
  // A length the table cannot hold.
  std::vector<int32_t> longer = {13, 5};
  c = a;
  c.kv_lens = longer.data();
  expectError(&paged, &c, MHAGEN_ERR_INVALID_ARGUMENT,
              "kv_lens[0] = 13 is outside [0, t_kv = 10] (t_kv is the block "
              "table's capacity: 3 blocks of 4 tokens per sequence)");
  c = a;
  c.kv_lens = nullptr;
  expectError(&paged, &c, MHAGEN_ERR_INVALID_ARGUMENT,
              "kv_lens is NULL but the mask has padding, the cache is paged "
              "or the batch is ragged");
  c = a;
  c.block_table = nullptr;
  expectError(&paged, &c, MHAGEN_ERR_INVALID_ARGUMENT,
              "block_table is NULL but kv_cache = paged: pass ceil(t_kv / "
              "BLOCK) block indices per sequence");
  c = a;
  c.num_blocks = 0;
  expectError(&paged, &c, MHAGEN_ERR_INVALID_ARGUMENT,
              "num_blocks must be in [1, 2^31) for this kernel's paged K/V "
              "cache (got 0)");
  c = a;
  c.k_scale = nullptr;
  expectError(&paged, &c, MHAGEN_ERR_INVALID_ARGUMENT,
              "k_scale is NULL but kv_dtype = i8: pass one f32 scale per "
              "(block, slot, kv head)");
  c = a;
  c.out = ks.data() + 1; // the output must not alias the blocks' scales
  expectError(&paged, &c, MHAGEN_ERR_INVALID_ARGUMENT, "out overlaps input");
  // The blocks are dense: the contiguous cache's strides are refused, not
  // ignored.
  const struct {
    int64_t mhagen_call_args::*stride;
    int64_t value;
    const char *message;
  } denseStrides[] = {
      {&mhagen_call_args::k_token_stride, -5,
       "k_token_stride is -5 but no tensor of this kernel takes it (k is "
       "dense here): pass 0"},
      {&mhagen_call_args::v_batch_stride, 4096,
       "v_batch_stride is 4096 but no tensor of this kernel takes it"},
      {&mhagen_call_args::k_scale_token_stride, 2,
       "k_scale_token_stride is 2 but no tensor of this kernel takes it "
       "(k_scale is dense here): pass 0"}};
  for (const auto &d : denseStrides) {
    c = a;
    c.*d.stride = d.value;
    expectError(&paged, &c, MHAGEN_ERR_INVALID_ARGUMENT, d.message);
  }
  c = a;
  c.q_token_stride = 4 * 8 * 2; // q is still a strided sequence tensor
  std::vector<float> wideQ(B * Tq * 4 * 8 * 2);
  c.q = wideQ.data();
  EXPECT_EQ(call(&paged, &c), MHAGEN_OK) << mhagen_last_error();
  // A contiguous kernel takes neither a table nor a block count.
  Buffers b;
  b.args.block_table = table.data();
  expectError(plain_, &b.args, MHAGEN_ERR_INVALID_ARGUMENT,
              "block_table given but this kernel's K/V cache is contiguous");
  Buffers b2;
  b2.args.num_blocks = 3;
  expectError(plain_, &b2.args, MHAGEN_ERR_INVALID_ARGUMENT,
              "num_blocks is 3 but this kernel's K/V cache is contiguous");
}

TEST(KvAppend, WritesRowsIntoTheirBlocksAndRefusesBadTables) {
  // block 3, kv 2, width 4: a cache of 5 blocks; the sequence's table
  // names blocks 4 then 1.
  const int64_t BLK = 3, NB = 5, KV = 2, W = 4, row = KV * W;
  const int32_t table[] = {4, 1};
  std::vector<float> src(4 * row);
  for (size_t i = 0; i < src.size(); ++i)
    src[i] = static_cast<float>(i) * 0.25f - 3.0f;
  std::vector<float> cache(NB * BLK * row, -1000.0f);
  // Tokens 2..5: slot 2 of block 4, then slots 0..2 of block 1.
  ASSERT_EQ(mhagen_kv_append_paged(src.data(), 4, 2, table, 2, BLK, NB, KV, W,
                                   MHAGEN_KV_F32, cache.data(), nullptr),
            MHAGEN_OK)
      << mhagen_last_error();
  for (int64_t r = 0; r < 4; ++r) {
    const int64_t pos = 2 + r, slot = table[pos / BLK] * BLK + pos % BLK;
    for (int64_t c = 0; c < row; ++c)
      EXPECT_EQ(cache[slot * row + c], src[r * row + c]) << r << " " << c;
  }
  EXPECT_EQ(std::count(cache.begin(), cache.end(), -1000.0f),
            static_cast<long>(cache.size() - 4 * row))
      << "only the four tokens' slots are written";
  // bf16/f16 round to nearest even; i8 writes a scale per (token, head).
  std::vector<uint16_t> half(NB * BLK * row);
  ASSERT_EQ(mhagen_kv_append_paged(src.data(), 1, 0, table, 2, BLK, NB, KV, W,
                                   MHAGEN_KV_BF16, half.data(), nullptr),
            MHAGEN_OK);
  EXPECT_EQ(half[4 * BLK * row + 1], 0xc030u) << "-2.75 in bf16";
  ASSERT_EQ(mhagen_kv_append_paged(src.data(), 1, 0, table, 2, BLK, NB, KV, W,
                                   MHAGEN_KV_F16, half.data(), nullptr),
            MHAGEN_OK);
  EXPECT_EQ(half[4 * BLK * row], 0xc200u) << "-3 in f16";
  std::vector<int8_t> q8(NB * BLK * row);
  std::vector<float> scales(NB * BLK * KV, 0.0f);
  ASSERT_EQ(mhagen_kv_append_paged(src.data(), 2, 4, table, 2, BLK, NB, KV, W,
                                   MHAGEN_KV_I8, q8.data(), scales.data()),
            MHAGEN_OK);
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t g = 0; g < KV; ++g) {
      const int64_t slot = table[(4 + r) / BLK] * BLK + (4 + r) % BLK;
      const float s = scales[slot * KV + g];
      ASSERT_GT(s, 0.0f);
      for (int64_t c = 0; c < W; ++c)
        EXPECT_NEAR(q8[slot * row + g * W + c] * s, src[r * row + g * W + c],
                    s / 2 + 1e-6f);
    }
  // Refused, nothing written: a table too short, an index outside the
  // cache, scales missing for i8 or given for f32.
  std::vector<float> before = cache;
  EXPECT_EQ(mhagen_kv_append_paged(src.data(), 2, 5, table, 2, BLK, NB, KV, W,
                                   MHAGEN_KV_F32, cache.data(), nullptr),
            MHAGEN_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(mhagen_last_error(),
                       "tokens 5..6 need 3 blocks but the table holds 2"))
      << mhagen_last_error();
  const int32_t hostile[] = {4, 5};
  EXPECT_EQ(mhagen_kv_append_paged(src.data(), 2, 2, hostile, 2, BLK, NB, KV, W,
                                   MHAGEN_KV_F32, cache.data(), nullptr),
            MHAGEN_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(mhagen_last_error(),
                       "table[1] = 5 is outside [0, num_blocks = 5)"))
      << mhagen_last_error();
  EXPECT_EQ(mhagen_kv_append_paged(src.data(), 1, 0, table, 2, BLK, NB, KV, W,
                                   MHAGEN_KV_I8, q8.data(), nullptr),
            MHAGEN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(mhagen_kv_append_paged(src.data(), 1, 0, table, 2, BLK, NB, KV, W,
                                   MHAGEN_KV_F32, cache.data(), scales.data()),
            MHAGEN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(cache, before);
}

TEST(Manifest, KvDtypeIsReadAndChecked) {
  KernelManifest m = fakeManifest("kvm", "kvm_avx2", "avx2", kAvx2);
  m.spec.kv_dtype = "f16";
  KernelManifest back;
  std::string err;
  ASSERT_TRUE(KernelManifest::fromJson(m.toJson(), back, &err)) << err;
  EXPECT_EQ(back.spec.kv_dtype, "f16");
  m.spec.kv_dtype = "i4";
  EXPECT_FALSE(KernelManifest::fromJson(m.toJson(), back, &err));
  EXPECT_TRUE(contains(err, "spec.kv_dtype must be f32, bf16, f16 or i8"))
      << err;
}

TEST(Manifest, KvBlockIsReadAndChecked) {
  KernelManifest m = fakeManifest("kvb", "kvb_avx2", "avx2", kAvx2);
  m.spec.kv_block = 16;
  KernelManifest back;
  std::string err;
  ASSERT_TRUE(KernelManifest::fromJson(m.toJson(), back, &err)) << err;
  EXPECT_EQ(back.spec.kv_block, 16);
  m.spec.kv_block = 70000;
  EXPECT_FALSE(KernelManifest::fromJson(m.toJson(), back, &err));
  EXPECT_TRUE(contains(err, "kv_block")) << err;
  m.spec.kv_block = 16;
  m.spec.op = "layer";
  EXPECT_FALSE(KernelManifest::fromJson(m.toJson(), back, &err));
  EXPECT_TRUE(contains(err, "spec.kv_block (a paged K/V cache) needs op = "
                            "sdpa"))
      << err;
}

TEST(Manifest, RaggedIsReadAndChecked) {
  KernelManifest m = fakeManifest("rg", "rg_avx2", "avx2", kAvx2);
  m.spec.ragged = true;
  KernelManifest back;
  std::string err;
  ASSERT_TRUE(KernelManifest::fromJson(m.toJson(), back, &err)) << err;
  EXPECT_TRUE(back.spec.ragged);
  m.spec.T = 16;
  EXPECT_FALSE(KernelManifest::fromJson(m.toJson(), back, &err));
  EXPECT_TRUE(contains(err, "spec.ragged (packed queries) needs op = sdpa "
                            "and no static T"))
      << err;
  m.spec.T = 0;
  m.spec.T_kv = 64;
  EXPECT_FALSE(KernelManifest::fromJson(m.toJson(), back, &err));
  EXPECT_TRUE(contains(err, "no static T_kv")) << err;
}

TEST(KvQuantize, RowsKeepHalfAStepAndSaturateAt127) {
  const int64_t rows = 3, width = 5;
  std::vector<float> x = {0.5f,   -1.0f, 0.25f, 0.0f, 0.999f, // amax 1
                          0.0f,   0.0f,  0.0f,  0.0f, 0.0f,   // all zero
                          -3e-3f, 1e-3f, 2e-3f, 0.0f, 3e-3f};
  std::vector<int8_t> q(rows * width);
  std::vector<float> s(rows);
  ASSERT_EQ(mhagen_kv_quantize_i8(x.data(), rows, width, q.data(), s.data()),
            MHAGEN_OK)
      << mhagen_last_error();
  EXPECT_FLOAT_EQ(s[0], 1.0f / 127);
  EXPECT_EQ(q[1], -127);
  EXPECT_EQ(s[1], 0.0f);
  for (int64_t c = 0; c < width; ++c)
    EXPECT_EQ(q[width + c], 0);
  EXPECT_EQ(q[2 * width], -127);
  EXPECT_EQ(q[2 * width + 4], 127);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < width; ++c)
      EXPECT_LE(std::fabs(x[r * width + c] - q[r * width + c] * s[r]),
                s[r] / 2 * (1 + 1e-6f))
          << "row " << r << " col " << c;
  x[7] = std::nanf("");
  q.assign(q.size(), 9);
  EXPECT_EQ(mhagen_kv_quantize_i8(x.data(), rows, width, q.data(), s.data()),
            MHAGEN_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(mhagen_last_error(), "src[7] is not finite"));
  EXPECT_EQ(q[0], 9) << "nothing is written on refusal";
  EXPECT_EQ(mhagen_kv_quantize_i8(x.data(), 1, 0, q.data(), s.data()),
            MHAGEN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(mhagen_kv_quantize_i8(nullptr, 1, 5, q.data(), s.data()),
            MHAGEN_ERR_INVALID_ARGUMENT);
}

TEST(KvQuantize, TinyRowsKeepTheirZerosAndSigns) {
  // 127 / amax overflows f32 for amax below ~3.7e-37: the row must still
  // quantise (zeros to 0, the extreme to +-127), not turn into NaN.
  const std::vector<float> x = {1e-37f, 0.0f, -5e-38f, 0.0f, -1e-37f};
  std::vector<int8_t> q(x.size(), 9);
  float s = -1;
  ASSERT_EQ(mhagen_kv_quantize_i8(x.data(), 1, 5, q.data(), &s), MHAGEN_OK)
      << mhagen_last_error();
  EXPECT_GT(s, 0.0f);
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(q[1], 0);
  EXPECT_EQ(q[3], 0);
  EXPECT_EQ(q[4], -127);
  EXPECT_LE(std::abs(q[2] + 64), 1);
}

TEST(Threads, CountIsSettableAndChecked) {
  EXPECT_EQ(mhagen_set_num_threads(0), MHAGEN_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(
      contains(mhagen_last_error(), "thread count must be between 1 and 256"));
  ASSERT_EQ(mhagen_set_num_threads(3), MHAGEN_OK);
  EXPECT_EQ(mhagen_get_num_threads(), 3);
  ASSERT_EQ(mhagen_set_num_threads(2), MHAGEN_OK);
}

TEST(Threads, ConcurrentLookupsRegistrationsAndCalls) {
  static FakeKernel conc(fakeManifest("conc", "conc_avx2", "avx2", kAvx2));
  mhagen_override_cpu_features("avx2 fma f16c");
  ASSERT_EQ(mhagen_register_kernel(&conc.desc), MHAGEN_OK);
  std::vector<std::unique_ptr<FakeKernel>> extra;
  for (int i = 0; i < 8; ++i)
    extra.push_back(std::make_unique<FakeKernel>(
        fakeManifest("conc_extra" + std::to_string(i),
                     "conc_extra" + std::to_string(i), "avx2", kAvx2)));
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t)
    threads.emplace_back([&, t] {
      if (t < 8) // half the threads register while the others call
        if (mhagen_register_kernel(&extra[t]->desc) != MHAGEN_OK)
          ++errors;
      Buffers b(1 + t % 3, 4);
      for (int i = 0; i < 500; ++i) {
        const mhagen_kernel *k = nullptr;
        if (mhagen_find("conc", &k) != MHAGEN_OK ||
            mhagen_call(k, &b.args) != MHAGEN_OK ||
            b.out[0] != static_cast<float>(1 + t % 3))
          ++errors;
        b.args.t_q = 0; // an invalid call on the same thread
        if (mhagen_call(k, &b.args) != MHAGEN_ERR_INVALID_ARGUMENT ||
            !contains(mhagen_last_error(), "t_q must be >= 1"))
          ++errors;
        b.args.t_q = 4;
      }
    });
  for (auto &th : threads)
    th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(conc.calls.load(), 16 * 500);
  mhagen_override_cpu_features(nullptr);
  // The extra kernels stay registered (the registry keeps its pointers).
  for (auto &e : extra)
    e.release();
}

TEST(Libraries, RefusesWhatIsNotAKernelLibrary) {
  mhagen_library *lib = nullptr;
  EXPECT_EQ(mhagen_load_library("/nonexistent/libx.so", &lib),
            MHAGEN_ERR_LOAD_FAILED);
  EXPECT_TRUE(contains(mhagen_last_error(), "cannot open /nonexistent"));
  // A system library is refused before dlopen runs its constructors: mhagen
  // did not seal it.
  EXPECT_EQ(mhagen_load_library("libm.so.6", &lib), MHAGEN_ERR_LOAD_FAILED);
  EXPECT_TRUE(contains(mhagen_last_error(), "no mhagen integrity digest"))
      << mhagen_last_error();
  EXPECT_EQ(mhagen_load_library(nullptr, &lib), MHAGEN_ERR_INVALID_ARGUMENT);
}

TEST(CppWrapper, ThrowsWithTheMessage) {
  try {
    Kernel::find("no_such_kernel_anywhere");
    FAIL() << "expected a RuntimeError";
  } catch (const RuntimeError &e) {
    EXPECT_EQ(e.code(), MHAGEN_ERR_NOT_FOUND);
    EXPECT_TRUE(contains(e.what(), "no kernel matches"));
  }
}

TEST(MergeAttention, WeightsByLogSumExpAndHandlesEmptyParts) {
  // Row 0: two parts of equal mass; row 1: part b three times a's mass;
  // row 2: part a saw no key; row 3: neither did.
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> oa = {1, 2, 4, 4, 9, 9, 5, 5};
  std::vector<float> ob = {3, 4, 0, 8, 1, 2, 7, 7};
  std::vector<float> la = {0.5f, 0.0f, -inf, -inf};
  std::vector<float> lb = {0.5f, std::log(3.0f), 2.0f, -inf};
  std::vector<float> out(8), lse(4);
  ASSERT_EQ(mhagen_merge_attention(4, 2, oa.data(), la.data(), ob.data(),
                                   lb.data(), out.data(), lse.data()),
            MHAGEN_OK)
      << mhagen_last_error();
  EXPECT_FLOAT_EQ(out[0], 2.0f);
  EXPECT_FLOAT_EQ(out[1], 3.0f);
  EXPECT_FLOAT_EQ(lse[0], 0.5f + std::log(2.0f));
  EXPECT_FLOAT_EQ(out[2], 0.25f * 4 + 0.75f * 0);
  EXPECT_FLOAT_EQ(out[3], 0.25f * 4 + 0.75f * 8);
  EXPECT_FLOAT_EQ(lse[1], std::log(4.0f));
  EXPECT_FLOAT_EQ(out[4], 1.0f); // all of b
  EXPECT_FLOAT_EQ(lse[2], 2.0f);
  EXPECT_EQ(out[6], 0.0f); // nothing seen: zeros, lse -inf
  EXPECT_EQ(lse[3], -inf);
  // In place on part a.
  ASSERT_EQ(mhagen_merge_attention(4, 2, oa.data(), la.data(), ob.data(),
                                   lb.data(), oa.data(), la.data()),
            MHAGEN_OK);
  EXPECT_EQ(oa, out);
  EXPECT_EQ(la, lse);
}

TEST(MergeAttention, NaNRowsStayNaN) {
  // A part whose row saw a non-finite input has a NaN lse: the merged row
  // is NaN whatever the other part holds; the other rows merge as usual.
  const float nan = std::nanf(""), inf = std::numeric_limits<float>::infinity();
  std::vector<float> oa = {1, 2, 3, 4, 5, 6}, ob = {1, 2, 3, 4, 5, 6};
  std::vector<float> la = {0.0f, nan, -inf}, lb = {0.0f, 1.0f, nan};
  std::vector<float> out(6, 7.0f), lse(3, 7.0f);
  ASSERT_EQ(mhagen_merge_attention(3, 2, oa.data(), la.data(), ob.data(),
                                   lb.data(), out.data(), lse.data()),
            MHAGEN_OK)
      << mhagen_last_error();
  EXPECT_FLOAT_EQ(out[0], 1.0f);
  EXPECT_FLOAT_EQ(lse[0], std::log(2.0f));
  for (int r : {1, 2}) {
    EXPECT_TRUE(std::isnan(lse[r])) << r;
    EXPECT_TRUE(std::isnan(out[2 * r]) && std::isnan(out[2 * r + 1])) << r;
  }
}

TEST(MergeAttention, RefusesInfinityAndNullWithoutWriting) {
  std::vector<float> o(2, 1.0f),
      l = {0.0f, std::numeric_limits<float>::infinity()}, out(2, 7.0f),
      lse(1, 7.0f);
  EXPECT_EQ(mhagen_merge_attention(2, 1, o.data(), l.data(), o.data(), l.data(),
                                   out.data(), lse.data()),
            MHAGEN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(mhagen_last_error()).find("lse_a[1] is +inf"),
            std::string::npos);
  EXPECT_EQ(out[0], 7.0f);
  EXPECT_EQ(mhagen_merge_attention(1, 1, nullptr, l.data(), o.data(), l.data(),
                                   out.data(), lse.data()),
            MHAGEN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(mhagen_merge_attention(-1, 1, o.data(), l.data(), o.data(),
                                   l.data(), out.data(), lse.data()),
            MHAGEN_ERR_INVALID_ARGUMENT);
}

// Exported by the runtime (Threads.cpp) for kernels without a pool of
// their own; it runs on the same pool, with the same task order, as the
// Halide kernels' parallel loops.
extern "C" int mhagen_parallel_for(int (*fn)(void *, int), void *ctx, int n);

namespace {
struct TaskLog {
  std::mutex mu;
  std::vector<int> order;
};
int logTask(void *ctx, int i) {
  auto *log = static_cast<TaskLog *>(ctx);
  std::lock_guard<std::mutex> lock(log->mu);
  log->order.push_back(i);
  return 0;
}
} // namespace

// Heaviest first (runtime/src/TaskOrder.cpp): the pool hands out a
// loop's tasks from the highest index down, because a causal kernel's
// costliest query tiles carry the highest indices. With one thread the
// order is exactly that; with several every task still runs once.
TEST(Threads, TasksAreHandedOutHighestIndexFirst) {
  if (const char *env = std::getenv("MHAGEN_TASK_ORDER"))
    if (std::string(env) == "ascending")
      GTEST_SKIP() << "MHAGEN_TASK_ORDER=ascending keeps Halide's order";
  ASSERT_EQ(mhagen_set_num_threads(1), MHAGEN_OK);
  TaskLog one;
  ASSERT_EQ(mhagen_parallel_for(logTask, &one, 7), 0);
  EXPECT_EQ(one.order, (std::vector<int>{6, 5, 4, 3, 2, 1, 0}));

  ASSERT_EQ(mhagen_set_num_threads(3), MHAGEN_OK);
  TaskLog three;
  ASSERT_EQ(mhagen_parallel_for(logTask, &three, 100), 0);
  std::sort(three.order.begin(), three.order.end());
  std::vector<int> all(100);
  for (int i = 0; i < 100; ++i)
    all[i] = i;
  EXPECT_EQ(three.order, all);
  ASSERT_EQ(mhagen_set_num_threads(2), MHAGEN_OK);
}
