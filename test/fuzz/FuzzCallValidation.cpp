// libFuzzer target: mhagen_call with arbitrary mhagen_call_args against
// kernels of several shapes (sdpa and layer, padding or not, biases, paged
// caches, ragged batches). The
// fuzzer chooses sizes, strides and flags freely and each pointer among
// NULL, a misaligned address and a few buffers. Validation must answer
// every combination with a status code and a message, never crash or
// overflow (UBSan checks its arithmetic); a refused call never runs and an
// accepted one runs once. The kernels' run functions only count calls:
// the runtime cannot know how large a caller's buffers are, only that
// sizes, strides and spans are consistent.
#include "mhagen/abi.h"
#include "mhagen/manifest.hpp"
#include "mhagen/runtime.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Shape {
  const char *op;
  int64_t d, h, kv, dk, dv;
  bool causal, padding, bias;
  int64_t kvBlock; // kv_cache = paged(kvBlock); 0: contiguous
  bool ragged;     // packed queries with q_offsets
};
const Shape kShapes[] = {
    {"sdpa", 32, 4, 2, 8, 8, true, false, false, 0, false},
    {"sdpa", 24, 3, 1, 8, 5, false, true, false, 0, false},
    {"layer", 16, 4, 2, 4, 4, true, true, true, 0, false},
    {"layer", 12, 2, 2, 6, 6, false, false, false, 0, false},
    {"sdpa", 32, 4, 2, 8, 8, true, false, false, 4, false},
    {"sdpa", 24, 3, 1, 8, 5, false, true, false, 3, false},
    {"sdpa", 32, 4, 2, 8, 8, true, false, false, 0, true},
    {"sdpa", 24, 3, 1, 8, 5, false, false, false, 2, true},
};

std::vector<std::string> gJson, gSymbols;
std::vector<mhagen_kernel_desc> gDescs;
std::vector<const mhagen_kernel *> gKernels;
int gCalls = 0;

int recordCall(const mhagen_call_args *, char *, size_t) {
  ++gCalls;
  return 0;
}

void setUp() {
  if (!gKernels.empty())
    return;
  mhagen_override_cpu_features("sse41 avx avx2 fma f16c");
  gJson.reserve(16);
  gSymbols.reserve(16);
  gDescs.reserve(16);
  for (const Shape &s : kShapes) {
    mhagen::KernelManifest m;
    m.abiVersion = MHAGEN_ABI_VERSION;
    m.mhagenVersion = "fuzz";
    m.symbol = "fuzz_call_" + std::to_string(gSymbols.size());
    m.kernelName = m.symbol;
    m.spec.canonical = "spec " + m.symbol + " { d = 1; h = 1 }";
    m.spec.semanticKey = m.symbol;
    m.spec.hash = m.symbol;
    m.spec.op = s.op;
    m.spec.d = s.d;
    m.spec.h = s.h;
    m.spec.n_kv = s.kv;
    m.spec.d_k = s.dk;
    m.spec.d_v = s.dv;
    m.spec.causal = s.causal;
    m.spec.padding = s.padding;
    m.spec.bias = s.bias;
    m.spec.kv_block = s.kvBlock;
    m.spec.ragged = s.ragged;
    // Per-head modifiers and the lse output on some kernels: pointers the
    // runtime must require there and refuse elsewhere.
    const size_t i = gSymbols.size();
    m.spec.sinks = i % 2 == 1;
    m.spec.alibi = i % 3 == 1 ? "runtime" : "false";
    m.spec.lse = i % 3 == 2;
    m.spec.scaleAtRuntime = i % 4 == 3;
    m.spec.dtype = "f32";
    m.spec.kv_dtype = s.kvBlock == 3 ? "i8" : "f32";
    m.spec.scale = m.spec.scaleAtRuntime ? 0.0 : 0.5;
    m.target = "avx2";
    m.backend = "halide";
    m.device = "cpu";
    m.cpuFeatures = {"avx2", "fma"};
    gSymbols.push_back(m.symbol);
    gJson.push_back(m.toJson());
    gDescs.push_back(mhagen_kernel_desc{MHAGEN_ABI_VERSION,
                                        gSymbols.back().c_str(),
                                        gJson.back().c_str(), recordCall});
    if (mhagen_register_kernel(&gDescs.back()) != MHAGEN_OK)
      std::abort();
    const mhagen_kernel *k = nullptr;
    if (mhagen_find_variant(gSymbols.back().c_str(), "avx2", nullptr, &k) !=
        MHAGEN_OK)
      std::abort();
    gKernels.push_back(k);
  }
}

struct Reader {
  const uint8_t *p;
  size_t n;
  uint64_t take(int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i)
      v = (v << 8) | (n ? (--n, *p++) : 0);
    return v;
  }
  // Sizes near the interesting edges: 0, 1, small, huge, negative.
  int64_t size() {
    switch (take(1) % 6) {
    case 0:
      return 0;
    case 1:
      return 1 + static_cast<int64_t>(take(1) % 8);
    case 2:
      return static_cast<int64_t>(take(2));
    case 3:
      return -static_cast<int64_t>(take(2));
    case 4:
      return static_cast<int64_t>(take(8));
    default:
      return INT64_C(1) << (take(1) % 63);
    }
  }
};

alignas(64) float gBuffers[4][4096];
int32_t gLens[8];
int32_t gTable[128]; // a paged cache's block table, any entries
int32_t gOffsets[9]; // a ragged batch's query offsets, any entries

const void *pointer(Reader &r) {
  switch (r.take(1) % 6) {
  case 0:
    return nullptr;
  case 1:
    return reinterpret_cast<const char *>(gBuffers[0]) + 1; // misaligned
  default:
    return gBuffers[r.take(1) % 4];
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  setUp();
  Reader r{data, size};
  const mhagen_kernel *k = gKernels[r.take(1) % gKernels.size()];
  mhagen_call_args a;
  std::memset(&a, 0, sizeof a);
  a.abi_version =
      r.take(1) % 8 ? MHAGEN_ABI_VERSION : static_cast<uint32_t>(r.take(4));
  a.batch = r.size();
  a.t_q = r.size();
  a.t_kv = r.size();
  a.q = pointer(r);
  a.k = pointer(r);
  a.v = pointer(r);
  a.x = pointer(r);
  a.w_q = pointer(r);
  a.w_k = pointer(r);
  a.w_v = pointer(r);
  a.w_o = pointer(r);
  if (r.take(1) % 2) {
    a.b_q = pointer(r);
    a.b_k = pointer(r);
    a.b_v = pointer(r);
    a.b_o = pointer(r);
  }
  a.out = const_cast<void *>(pointer(r));
  a.q_token_stride = r.size();
  a.k_token_stride = r.size();
  a.v_token_stride = r.size();
  a.out_token_stride = r.size();
  a.q_batch_stride = r.size();
  a.k_batch_stride = r.size();
  a.v_batch_stride = r.size();
  a.out_batch_stride = r.size();
  for (int32_t &len : gLens)
    len = static_cast<int32_t>(r.take(4));
  // kv_lens holds one entry per batch (the caller's contract); gLens has 8.
  a.kv_lens = r.take(1) % 2 && a.batch <= 8 ? gLens : nullptr;
  a.flags = r.take(1) % 8 == 0 ? static_cast<uint32_t>(r.take(4)) : 0;
  a.device_pointers = r.take(1) % 8 == 0;
  // Last, so older corpus inputs decode as before.
  a.sinks = static_cast<const float *>(pointer(r));
  a.alibi_slopes = static_cast<const float *>(pointer(r));
  a.lse = static_cast<float *>(const_cast<void *>(pointer(r)));
  // A runtime scale: any bit pattern (NaN, inf, 0, negative, fine), which
  // the runtime reads before the call.
  const uint32_t scaleBits = static_cast<uint32_t>(r.take(4));
  std::memcpy(&gBuffers[3][0], &scaleBits, sizeof scaleBits);
  a.scale = static_cast<const float *>(pointer(r));
  // A paged cache: any block count and any table entries (the caller's
  // contract is only the table's size, batch x ceil(t_kv / BLOCK) <= 128
  // entries here), and scales for the int8 one.
  a.num_blocks = r.take(1) % 4 ? r.size() : 0;
  for (int32_t &entry : gTable)
    entry = static_cast<int32_t>(r.take(r.take(1) % 2 ? 1 : 4));
  a.block_table = r.take(1) % 4 && a.batch >= 1 && a.batch <= 8 &&
                          a.t_kv >= 1 && a.t_kv <= 48
                      ? gTable
                      : nullptr;
  if (r.take(1) % 2) {
    a.k_scale = static_cast<const float *>(pointer(r));
    a.v_scale = static_cast<const float *>(pointer(r));
  }
  // A ragged batch: offsets that mostly rise by a few rows (sometimes
  // anything), B + 1 <= 9 of them.
  gOffsets[0] = r.take(1) % 8 ? 0 : static_cast<int32_t>(r.take(4));
  // (The rise wraps at 2^32 as the bits of an unsigned sum: the runtime
  // must refuse what that gives.)
  for (int i = 1; i < 9; ++i)
    gOffsets[i] = static_cast<int32_t>(
        r.take(1) % 8 ? static_cast<uint32_t>(gOffsets[i - 1]) +
                            static_cast<uint32_t>(r.take(1) % 4)
                      : static_cast<uint32_t>(r.take(4)));
  a.q_offsets =
      r.take(1) % 4 && a.batch >= 1 && a.batch <= 8 ? gOffsets : nullptr;
  // An accepted call runs once, a ragged one once per run of consecutive
  // sequences with the same query count, runs without queries skipped
  // (the offsets were checked, so the counts are >= 0).
  int runs = 1;
  if (std::strstr(mhagen_kernel_manifest(k), "\"ragged\": true") ||
      std::strstr(mhagen_kernel_manifest(k), "\"ragged\":true")) {
    runs = 0;
    for (int64_t b = 0; a.q_offsets && b < a.batch; ++b) {
      const int64_t n = int64_t(gOffsets[b + 1]) - gOffsets[b];
      const bool sameRun = b > 0 && n == int64_t(gOffsets[b]) - gOffsets[b - 1];
      runs += n > 0 && !sameRun;
    }
  }
  int before = gCalls;
  int rc = mhagen_call(k, &a);
  if (rc == MHAGEN_OK) {
    if (gCalls != before + runs)
      std::abort();
  } else if (gCalls != before || !*mhagen_last_error()) {
    std::abort(); // refused calls never run and always say why
  }
  return 0;
}
