// mhagen against its baselines, in one binary and one run, on the same
// inputs, every implementation checked against the others before it is
// timed. Reports nominal GFLOP/s (4*B*h*Tq*Tkv*dk), useful GFLOP/s (visited
// pairs only) and the fraction of this machine's FMA peak, measured here
// by a small FMA loop with the same thread count.
//
//   mhagen_bench KERNEL_DIR [benchmark flags]
//   (bench/run_benchmarks.sh runs it and writes a JSON file)
#include "Baselines.h"
#include "HostSteal.h"
#include "MachinePeak.h"
#include "ParallelIdle.h"

#include "mhagen/harness/KernelHarness.h"
#include "mhagen/harness/RunCheck.h"
#include "mhagen/manifest.hpp"
#include "mhagen/reference/Numerics.h"
#include "mhagen/reference/Reference.h"
#include "mhagen/runtime.h"
#include "mhagen/spec/CostModel.h"
#include "mhagen/spec/SpecParser.h"

#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

using namespace mhagen;
using namespace mhagen::bench;

namespace {

std::map<int, double> gPeak;    // threads -> f32 FMA GFLOP/s
std::map<int, double> gBf16Dot; // threads -> vdpbf16ps GFLOP/s (0: none)
std::map<int, double> gAmxBf16; // threads -> AMX tdpbf16ps GFLOP/s (0: none)

// ---- cases -----------------------------------------------------------------

struct Shape {
  const char *name;
  int64_t B, Tq, Tkv, h, kv, dk;
  bool causal;
};

const Shape kS1{"S1", 1, 512, 512, 32, 8, 128, true};
const Shape kS2{"S2", 1, 2048, 2048, 32, 8, 128, true};
const Shape kS3{"S3", 4, 512, 512, 12, 12, 64, false};
const Shape kS2none{"S2none", 1, 2048, 2048, 32, 8, 128, false};
// Decode and serving: S4 (one token against a 4096-token
// cache), batched decode, speculative decode (4 draft tokens) and a chunk
// of prefill against a long cache.
const Shape kDecode{"Decode", 1, 1, 4096, 32, 8, 128, true};
const Shape kBatchDecode{"BatchDecode", 16, 1, 4096, 32, 8, 128, true};
const Shape kSpecDecode{"SpecDecode", 1, 4, 4096, 32, 8, 128, true};
// A ragged batch of decode steps: 16 sequences whose cache lengths are
// drawn (seeded) from [512, 8192].
const Shape kRaggedDecode{"RaggedDecode", 16, 1, 8192, 32, 8, 128, true};
constexpr int64_t kRaggedMinLen = 512;
// A continuous-batching step (ragged batches): 8 sequences with
// cache lengths drawn from [512, 4096] and query counts from [1, 128]
// (seeded), packed; against every sequence padded to 128 queries.
const Shape kRaggedServe{"RaggedServe", 8, 128, 4096, 32, 8, 128, true};
// Model families with score modifiers, prefill of 2048 tokens:
// the kernel's spec (bench/kernels.mha) holds the window, cap and sinks.
const Shape kGemma2{"Gemma2", 1, 2048, 2048, 8, 4, 256, true};
const Shape kGptOss{"GptOss", 1, 2048, 2048, 64, 8, 64, true};
const Shape kChunkPrefill{"ChunkPrefill", 1, 512, 8192, 32, 8, 128, true};
// A mask union: StreamingLLM, causal & (window(1024) | sink(4)),
// prefill of 4096 tokens; the kernel's spec holds the mask.
const Shape kStreaming{"Streaming", 1, 4096, 4096, 32, 8, 128, true};

// ProblemOptions::kvLen meaning "T_kv of the shape" (set by
// checkedProblem).
constexpr int64_t kFullLength = -2;
ProblemOptions fullLength() {
  ProblemOptions o;
  o.kvLen = kFullLength;
  return o;
}

bool isDecodeShape(const Shape &s) {
  return s.Tq < s.Tkv; // reads a KV cache longer than its queries
}

std::map<int, double> gTriad; // threads -> triad GB/s

std::string gKernelDir;

const mhagen_kernel *kernelFor(const Shape &s, bool bf16, bool mlir) {
  std::string name = s.h == 12 ? "bench_mha" : "bench_gqa";
  if (!s.causal && s.h != 12)
    name += "_none";
  name += bf16 ? "_bf16" : "_f32";
  if (mlir)
    name += "_mlir";
  const mhagen_kernel *k = nullptr;
  if (mhagen_find(name.c_str(), &k) != MHAGEN_OK)
    return nullptr;
  return k;
}

void setThreads(int n) {
  mhagen_set_num_threads(n);
  setBaselineThreads(n);
}

// Times fn with manual timing and reports the counters.
// kvLens: the per-sequence key lengths of the call (padding, a paged
// cache), empty when every sequence reads all T_kv keys; qLens: a ragged
// batch's query counts (empty: T_q each).
// beforeEach: runs before every timed call, outside the timed region.
template <typename Fn>
void timeLoop(benchmark::State &state, const AttentionSpec &spec,
              const ProblemSize &size, int threads, Fn &&fn,
              const std::vector<int32_t> &kvLens = {},
              const std::vector<int32_t> &qLens = {},
              const std::function<void()> &beforeEach = {}) {
  double total = 0;
  fn(); // warm-up
  const CpuTicks ticksBefore = readCpuTicks();
  for (auto _ : state) {
    if (beforeEach)
      beforeEach();
    auto t0 = std::chrono::steady_clock::now();
    fn();
    double dt =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    state.SetIterationTime(dt);
    total += dt;
  }
  state.counters["steal_pct"] = stealPercent(ticksBefore, readCpuTicks());
  // The cores' speed right after the case, against the peak taken at the
  // start of the run: a run slowed because the cores themselves ran slower
  // (a busy SMT sibling, a lower clock) shows it here too, one slowed by
  // its own work split or memory traffic does not (docs/performance.md,
  // "How to measure").
  state.counters["fma_now_pct"] =
      100.0 * measureFmaPeak(threads) / gPeak[threads];
  const double iters = static_cast<double>(state.iterations());
  const double nominal = nominalFlops(spec, size);
  const double useful = usefulFlops(spec, size, kvLens, qLens);
  state.counters["q_rows"] =
      qLens.empty() ? static_cast<double>(size.B * size.Tq)
                    : std::accumulate(qLens.begin(), qLens.end(), 0.0);
  state.counters["gflops_nominal"] = nominal * iters / total / 1e9;
  state.counters["gflops_useful"] = useful * iters / total / 1e9;
  state.counters["pct_fma_peak"] =
      100.0 * (useful * iters / total / 1e9) / gPeak[threads];
  // A bf16 kernel against the fastest unit that takes bf16 here (the FMA
  // figure flatters a kernel on tiles: an AMX S1 reads over 100 % of it).
  if (spec.dtype == DType::BF16)
    state.counters["pct_bf16_peak"] =
        100.0 * (useful * iters / total / 1e9) /
        bf16Peak(gPeak[threads], gBf16Dot[threads], gAmxBf16[threads]);
  state.counters["ms"] = 1e3 * total / iters;
  // K and V as stored, read once: the floor a decode step cannot beat
  // (the keys past a sequence's length are never read).
  double kvTokens = static_cast<double>(size.B) * size.Tkv;
  if (!kvLens.empty())
    kvTokens = std::accumulate(kvLens.begin(), kvLens.end(), 0.0);
  const double kvBytes = kvTokens * static_cast<double>(spec.kvBytesPerToken());
  state.counters["kv_gbs"] = kvBytes * iters / total / 1e9;
}

// Runs kernel k once on a fresh problem of shape sh and checks it against
// the reference on sampled rows (and, for a low-precision K/V cache, the
// stored values against the values before storage); null, with the
// benchmark skipped, when the call or the check fails.
// Kernels with per-sequence lengths (padding, a paged cache) see every
// sequence at its full T_kv unless `options` says otherwise.
std::unique_ptr<Problem> checkedProblem(benchmark::State &state,
                                        const mhagen_kernel *k, Shape sh,
                                        int threads,
                                        ProblemOptions options = fullLength()) {
  setThreads(threads);
  const AttentionSpec spec = specOfKernel(k);
  if (options.kvLen == kFullLength)
    options.kvLen = sh.Tkv;
  auto p = std::make_unique<Problem>(spec, ProblemSize{sh.B, sh.Tq, sh.Tkv},
                                     options);
  mhagen_call_args a = p->args();
  if (mhagen_call(k, &a) != MHAGEN_OK) {
    state.SkipWithError(mhagen_last_error());
    return nullptr;
  }
  std::vector<int64_t> rows = rowsToCheck(*p, 3e8);
  if (!p->check(rows).ok() ||
      (spec.kv_dtype && !p->checkKvStorage(rows).ok()) ||
      !p->checkLse(rows).ok()) {
    state.SkipWithError("mhagen kernel disagrees with the reference");
    return nullptr;
  }
  return p;
}

// Kernel `name` of the loaded libraries with a checked problem of shape sh
// (checkedProblem); the problem is null, with the benchmark skipped, when
// either the lookup or the check fails.
std::pair<const mhagen_kernel *, std::unique_ptr<Problem>>
namedCheckedProblem(benchmark::State &state, const std::string &name, Shape sh,
                    int threads, ProblemOptions options = fullLength()) {
  const mhagen_kernel *k = nullptr;
  if (mhagen_find(name.c_str(), &k) != MHAGEN_OK) {
    state.SkipWithError(mhagen_last_error());
    return {nullptr, nullptr};
  }
  return {k, checkedProblem(state, k, sh, threads, options)};
}

// A kernel of bench/kernels.mha by name on shape sh: checked against the
// reference (for a K/V cache stored as another kv_dtype also the stored
// values against the values before storage), then timed; kv_gbs counts
// the K/V bytes as stored. The K/V-cache and score-modifier variants.
// minLen > 0: a ragged batch, each sequence's length drawn from [minLen,
// T_kv] (seeded, the same for every kernel).
// Every sequence at its full length, or (minLen > 0) each length drawn
// from [minLen, T_kv].
ProblemOptions lengthsFrom(int64_t minLen) {
  ProblemOptions options = fullLength();
  if (minLen > 0) {
    options.kvLen = -1;
    options.kvLenMin = minLen;
  }
  return options;
}

void raggedKernelBench(benchmark::State &state, Shape sh, std::string kernel,
                       int threads, int64_t minLen) {
  const ProblemOptions options = lengthsFrom(minLen);
  const mhagen_kernel *k = nullptr;
  std::unique_ptr<Problem> p;
  std::tie(k, p) = namedCheckedProblem(state, kernel, sh, threads, options);
  if (!p)
    return;
  mhagen_call_args a = p->args();
  timeLoop(
      state, specOfKernel(k), ProblemSize{sh.B, sh.Tq, sh.Tkv}, threads,
      [&] { mhagen_call(k, &a); }, p->kvLens(), p->qLens());
}
// Evicts [p, p + bytes) from every cache level (outside timed regions).
void evictFromCaches(const void *p, size_t bytes) {
  const char *c = static_cast<const char *>(p);
  for (size_t off = 0; off < bytes; off += 64)
    _mm_clflush(c + off);
  _mm_mfence();
}

// A decode step with its K/V in DRAM only. A serving process walks every
// layer's cache in turn (32 layers of S4 hold 1 GiB), so no cache level
// keeps a layer's K/V until its next step; called back to back on the
// same buffers, S4's 33.5 MB stays in this VM's L3 (480 MiB). Cold cases
// evict the call's K, V and int8 scales from every level before each
// timed call.
void coldKernelBench(benchmark::State &state, Shape sh, std::string kernel,
                     int threads) {
  const mhagen_kernel *k = nullptr;
  std::unique_ptr<Problem> p;
  std::tie(k, p) = namedCheckedProblem(state, kernel, sh, threads);
  if (!p)
    return;
  const AttentionSpec spec = specOfKernel(k);
  mhagen_call_args a = p->args();
  const size_t rows = static_cast<size_t>(sh.B * sh.Tkv * spec.n_kv);
  const size_t elem = static_cast<size_t>(kvTypeBytes(spec.kvType()));
  std::vector<std::pair<const void *, size_t>> cache = {
      {a.k, rows * spec.d_k * elem}, {a.v, rows * spec.d_v * elem}};
  if (spec.kvQuantized()) {
    cache.emplace_back(a.k_scale, rows * sizeof(float));
    cache.emplace_back(a.v_scale, rows * sizeof(float));
  }
  timeLoop(
      state, spec, ProblemSize{sh.B, sh.Tq, sh.Tkv}, threads,
      [&] { mhagen_call(k, &a); }, {}, {},
      [&] {
        for (const auto &[ptr, bytes] : cache)
          evictFromCaches(ptr, bytes);
      });
}

// Every sequence at its full length.
void namedKernelBench(benchmark::State &state, Shape sh, std::string kernel,
                      int threads) {
  raggedKernelBench(state, sh, std::move(kernel), threads, 0);
}

enum class Impl { Mhagen, MhagenMlir, Naive, Blas, Dnnl };
const char *implName(Impl i) {
  switch (i) {
  case Impl::Mhagen:
    return "mhagen";
  case Impl::MhagenMlir:
    return "mhagen_mlir";
  case Impl::Naive:
    return "naive";
  case Impl::Blas:
    return "openblas_unfused";
  case Impl::Dnnl:
    return "onednn_unfused";
  }
  return "?";
}

void attentionBench(benchmark::State &state, Shape sh, bool bf16, Impl impl,
                    int threads) {
  // The MLIR kernel is checked and timed like the Halide one; the
  // baselines are compared with the Halide kernel's output.
  const mhagen_kernel *k = kernelFor(sh, bf16, impl == Impl::MhagenMlir);
  if (!k) {
    state.SkipWithError(mhagen_last_error());
    return;
  }
  AttentionSpec spec = specOfKernel(k);
  ProblemSize size{sh.B, sh.Tq, sh.Tkv};
  // mhagen's output, checked against the reference on sampled rows, is
  // what every baseline must reproduce.
  std::unique_ptr<Problem> checked = checkedProblem(state, k, sh, threads);
  if (!checked)
    return;
  Problem &p = *checked;
  mhagen_call_args a = p.args();
  const std::vector<float> mh = p.output();
  const std::vector<double> mhd(mh.begin(), mh.end());
  std::vector<float> out(mh.size());
  AttnShape as{sh.B, sh.Tq, sh.Tkv, sh.h, sh.kv, sh.dk, sh.causal, bf16};
  auto agree = [&]() -> bool {
    Comparison c = compareToReference(out, mhd, toleranceFor(spec));
    if (!c.ok())
      state.SkipWithError(
          ("disagrees with mhagen: max |err| " + std::to_string(c.maxAbsErr))
              .c_str());
    return c.ok();
  };
  switch (impl) {
  case Impl::Mhagen:
  case Impl::MhagenMlir:
    resetParallelIdle(threads);
    timeLoop(state, spec, size, threads, [&] { mhagen_call(k, &a); });
    // Halide kernels only: MLIR kernels run on OpenMP's threads.
    if (impl == Impl::Mhagen)
      state.counters["par_idle_pct"] = parallelIdlePercent();
    break;
  case Impl::Naive: {
    // The reference loops (f32 accumulation; single-threaded by design).
    std::vector<float> qf, kf, vf;
    auto widen = [&](const void *src, size_t n) {
      std::vector<float> f(n);
      for (size_t i = 0; i < n; ++i)
        f[i] = bf16 ? bf16ToFloat(static_cast<const uint16_t *>(src)[i])
                    : static_cast<const float *>(src)[i];
      return f;
    };
    qf = widen(a.q, static_cast<size_t>(sh.B * sh.Tq * sh.h * sh.dk));
    kf = widen(a.k, static_cast<size_t>(sh.B * sh.Tkv * sh.kv * sh.dk));
    vf = widen(a.v, static_cast<size_t>(sh.B * sh.Tkv * sh.kv * sh.dk));
    ref::SdpaArgs ra;
    ra.B = sh.B;
    ra.Tq = sh.Tq;
    ra.Tkv = sh.Tkv;
    ra.q = qf.data();
    ra.k = kf.data();
    ra.v = vf.data();
    std::vector<float> r = ref::sdpa<float>(spec, ra);
    out = r;
    if (!agree())
      return;
    timeLoop(state, spec, size, threads,
             [&] { benchmark::DoNotOptimize(ref::sdpa<float>(spec, ra)); });
    break;
  }
  case Impl::Blas: {
    BlasAttention blas(as);
    auto call = [&] {
      blas.run(static_cast<const float *>(a.q), static_cast<const float *>(a.k),
               static_cast<const float *>(a.v), out.data());
    };
    call();
    if (!agree())
      return;
    timeLoop(state, spec, size, threads, call);
    break;
  }
  case Impl::Dnnl: {
    DnnlAttention dnnl(as);
    auto call = [&] { dnnl.run(a.q, a.k, a.v, out.data()); };
    call();
    if (!agree())
      return;
    timeLoop(state, spec, size, threads, call);
    break;
  }
  }
}

// op = layer with its KV cache, one decoder step: the kernel of
// bench/kernels.mha on shape sh (minLen > 0: each sequence's length drawn
// from [minLen, T_kv], else every sequence at T_kv), checked (output and
// cache) and timed. A step reads its weights once and the K/V it attends
// over: floor_ms is those bytes over this run's triad bandwidth, x_floor
// the step's time over it.
void layerDecodeBench(benchmark::State &state, Shape sh, std::string kernel,
                      int threads, int64_t minLen) {
  const mhagen_kernel *k = nullptr;
  std::unique_ptr<Problem> p;
  std::tie(k, p) =
      namedCheckedProblem(state, kernel, sh, threads, lengthsFrom(minLen));
  if (!p)
    return;
  if (!p->checkCache().ok()) {
    state.SkipWithError("the cache after the step disagrees with the "
                        "reference");
    return;
  }
  const AttentionSpec spec = specOfKernel(k);
  mhagen_call_args a = p->args();
  timeLoop(state, spec, ProblemSize{sh.B, sh.Tq, sh.Tkv}, threads,
           [&] { mhagen_call(k, &a); }, p->kvLens(), {});
  const CostReport cost = computeCost(spec, sh.Tq, sh.Tkv, sh.B);
  const double kvTokens =
      std::accumulate(p->kvLens().begin(), p->kvLens().end(), 0.0);
  const double bytes = static_cast<double>(cost.weightBytes) +
                       kvTokens * static_cast<double>(spec.kvBytesPerToken());
  const double floorMs = 1e3 * bytes / (gTriad[threads] * 1e9);
  state.counters["floor_ms"] = floorMs;
  state.counters["x_floor"] = state.counters["ms"] / floorMs;
}

// op = layer: the fused mhagen layer, and oneDNN's four projection GEMMs
// (to be added to the best attention core's time, see docs/performance.md, "The
// layer").
void layerBench(benchmark::State &state, bool projectionsOnly, bool mlir,
                int threads) {
  const mhagen_kernel *k = nullptr;
  if (mhagen_find(mlir ? "bench_layer_f32_mlir" : "bench_layer_f32", &k) !=
      MHAGEN_OK) {
    state.SkipWithError(mhagen_last_error());
    return;
  }
  setThreads(threads);
  AttentionSpec spec = specOfKernel(k);
  ProblemSize size{1, 512, 512};
  Problem p(spec, size, {});
  mhagen_call_args a = p.args();
  if (mhagen_call(k, &a) != MHAGEN_OK || !p.check(rowsToCheck(p, 3e8)).ok()) {
    state.SkipWithError("layer kernel failed its check");
    return;
  }
  if (!projectionsOnly) {
    timeLoop(state, spec, size, threads, [&] { mhagen_call(k, &a); });
    return;
  }
  const int64_t T = 512, d = spec.d, h = spec.h, kv = spec.n_kv, dk = spec.d_k;
  DnnlProjections proj(T, d, h, kv, dk);
  std::vector<float> q(T * h * dk), kk(T * kv * dk), v(T * kv * dk),
      o(T * h * dk, 0.01f), y(T * d);
  const float *x = static_cast<const float *>(a.x);
  double total = 0;
  auto run = [&] {
    proj.run(x, static_cast<const float *>(a.w_q),
             static_cast<const float *>(a.w_k),
             static_cast<const float *>(a.w_v), o.data(),
             static_cast<const float *>(a.w_o), q.data(), kk.data(), v.data(),
             y.data());
  };
  run();
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    run();
    double dt =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    state.SetIterationTime(dt);
    total += dt;
  }
  const double flops =
      2.0 * T * d * (h * dk + 2 * kv * dk) + 2.0 * T * h * dk * d;
  const double iters = static_cast<double>(state.iterations());
  state.counters["gflops_useful"] = flops * iters / total / 1e9;
  state.counters["pct_fma_peak"] =
      100.0 * flops * iters / total / 1e9 / gPeak[threads];
  state.counters["ms"] = 1e3 * total / iters;
}

// Every implementation runs with its thread pool's own default wait
// policy, as in a program that calls only it: libomp's workers (the MLIR
// kernels) spin for 200 ms after a parallel region, libgomp's (oneDNN)
// and OpenBLAS's spin for a while too. A case on such a pool is followed
// by a pause longer than the longest of those windows, so the next case
// never shares the two cores with its spinning workers. (A process-wide
// OMP_WAIT_POLICY=PASSIVE, used before, made the MLIR kernels' workers
// sleep between the two parallel regions of every call: S4 1.61 ms
// against 1.34-1.38 warm.)
bool spinsAfterwards(const std::string &name) {
  for (const char *pool : {"mhagen_mlir", "onednn", "openblas"})
    if (name.find(pool) != std::string::npos)
      return true;
  return false;
}
void settleThreadPools(const benchmark::State &) {
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
}

// Registers a case timed by hand, in ms, for at least half a second.
template <typename... Args>
benchmark::internal::Benchmark *timedCase(const std::string &name,
                                          Args &&...args) {
  benchmark::internal::Benchmark *b =
      benchmark::RegisterBenchmark(name.c_str(), std::forward<Args>(args)...);
  b->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);
  if (spinsAfterwards(name))
    b->Teardown(settleThreadPools);
  return b;
}

// Reports a figure measured before the benchmarks ran; `scaling` is the
// figure over `threads` times its 1-thread value (1.0 = perfect).
void machineFigureBench(benchmark::State &state, const char *counter,
                        std::map<int, double> *figure, int threads) {
  for (auto _ : state)
    state.SetIterationTime(1.0);
  state.counters[counter] = (*figure)[threads];
  if ((*figure)[1] > 0)
    state.counters["scaling"] = (*figure)[threads] / (threads * (*figure)[1]);
}

} // namespace

int main(int argc, char **argv) {
  benchmark::Initialize(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s KERNEL_LIB.so... [benchmark flags]\n",
                 argv[0]);
    return 2;
  }
  for (int i = 1; i < argc; ++i) {
    mhagen_library *lib = nullptr;
    if (mhagen_load_library(argv[i], &lib) != MHAGEN_OK) {
      std::fprintf(stderr, "%s\n", mhagen_last_error());
      return 1;
    }
  }
  // The runtime sets its pool up (and its task order) on first use; the
  // probe wraps what it set.
  mhagen_get_num_threads();
  installParallelIdleProbe();
  for (int t : {1, 2}) {
    gPeak[t] = measureFmaPeak(t);
    gBf16Dot[t] = measureBf16DotPeak(t);
    gAmxBf16[t] = measureAmxBf16Peak(t);
    gTriad[t] = measureTriad(t);
    // A compute peak that does not scale would inflate every "% of peak"
    // at this thread count: say so on stderr, beside the figures.
    for (const std::string &w :
         {scalingWarning("f32 FMA GFLOP/s", gPeak[1], gPeak[t], t),
          scalingWarning("bf16 dot GFLOP/s", gBf16Dot[1], gBf16Dot[t], t),
          scalingWarning("AMX bf16 GFLOP/s", gAmxBf16[1], gAmxBf16[t], t)})
      if (!w.empty())
        std::fprintf(stderr, "warning: %s\n", w.c_str());
    const std::string suffix = "/threads:" + std::to_string(t);
    benchmark::RegisterBenchmark(("Peak/fma_f32" + suffix).c_str(),
                                 machineFigureBench, "gflops", &gPeak, t)
        ->UseManualTime()
        ->Iterations(1);
    if (gBf16Dot[t] > 0)
      benchmark::RegisterBenchmark(("Peak/dpbf16" + suffix).c_str(),
                                   machineFigureBench, "gflops", &gBf16Dot, t)
          ->UseManualTime()
          ->Iterations(1);
    if (gAmxBf16[t] > 0)
      benchmark::RegisterBenchmark(("Peak/amx_bf16" + suffix).c_str(),
                                   machineFigureBench, "gflops", &gAmxBf16, t)
          ->UseManualTime()
          ->Iterations(1);
    benchmark::RegisterBenchmark(("Peak/triad" + suffix).c_str(),
                                 machineFigureBench, "gbs", &gTriad, t)
        ->UseManualTime()
        ->Iterations(1);
  }
  const bool bf16Cpu = mhagen_cpu_has("avx512_bf16");
  for (const Shape &sh : {kS1, kS2, kS3, kS2none, kDecode, kBatchDecode,
                          kSpecDecode, kChunkPrefill})
    for (bool bf16 : {false, true})
      for (int t : {1, 2})
        for (Impl impl : {Impl::Mhagen, Impl::MhagenMlir, Impl::Naive,
                          Impl::Blas, Impl::Dnnl}) {
          if (sh.name == std::string("S2none") && impl != Impl::Mhagen)
            continue; // only to show what causal saves
          if (impl == Impl::MhagenMlir && sh.name == std::string("S2none"))
            continue;
          if (impl == Impl::Naive && (t != 1 || bf16))
            continue; // the reference is single-threaded f32 math
          if (impl == Impl::Naive && isDecodeShape(sh) && sh.Tq * sh.B > 4)
            continue; // minutes per call
          if (bf16 && impl == Impl::Dnnl && !bf16Cpu)
            continue;
          if (bf16 && impl == Impl::Blas)
            continue; // Debian's OpenBLAS has no bf16 GEMM
          std::string name = std::string(sh.name) +
                             (bf16 ? "_bf16/" : "_f32/") + implName(impl) +
                             "/threads:" + std::to_string(t);
          if (impl == Impl::Naive) // one call of seconds
            benchmark::RegisterBenchmark(name.c_str(), attentionBench, sh, bf16,
                                         impl, t)
                ->UseManualTime()
                ->Unit(benchmark::kMillisecond)
                ->Iterations(1);
          else
            timedCase(name, attentionBench, sh, bf16, impl, t);
        }
  // The decode shapes with the K/V cache stored as f16, bf16 and int8
  // (f32 queries and output), beside the f32 cache above; both backends.
  for (const Shape &sh : {kDecode, kBatchDecode, kSpecDecode})
    for (const char *kvd : {"f16", "bf16", "i8"})
      for (int t : {1, 2})
        for (bool mlir : {false, true}) {
          std::string name = std::string(sh.name) + "_f32_kv" + kvd +
                             (mlir ? "/mhagen_mlir" : "/mhagen") +
                             "/threads:" + std::to_string(t);
          timedCase(
              name, namedKernelBench, sh,
              std::string("bench_gqa_f32_kv") + kvd + (mlir ? "_mlir" : ""), t);
        }
  // S4 with its K/V evicted before every call (coldKernelBench), each
  // storage type on both backends and with the Halide decode micro-kernel
  // reading the cache in place (decode_stage_kv = 0, bench/kernels_inplace.mha)
  // against its default tile copy.
  for (const char *kvd : {"", "_kvbf16", "_kvi8"})
    for (int t : {1, 2})
      for (const char *impl : {"", "_mlir", "_inplace"}) {
        const std::string label = impl == std::string("_mlir") ? "mhagen_mlir"
                                  : impl == std::string("_inplace")
                                      ? "mhagen_inplace"
                                      : "mhagen";
        timedCase(std::string("DecodeCold_f32") + kvd + "/" + label +
                      "/threads:" + std::to_string(t),
                  coldKernelBench, kDecode,
                  std::string("bench_gqa_f32") + kvd + impl, t);
      }
  // A paged cache (16-token blocks in shuffled order) beside the
  // contiguous one: S4 in f32 and int8, and the ragged batch of 16
  // sequences, paged against the contiguous cache with the same lengths
  // (causal & padding); the same step as a ragged batch (ragged = true:
  // one call, every sequence with one query); and a continuous-batching
  // step, ragged against every sequence padded to 128 queries.
  using Cases = std::vector<std::pair<const char *, const char *>>;
  // label/threads:t for each (label, kernel) on shape sh; minLen > 0:
  // each sequence's length drawn from [minLen, T_kv].
  auto kernelCases = [](Shape sh, int64_t minLen, const Cases &cases) {
    for (int t : {1, 2})
      for (const auto &[label, kernel] : cases)
        timedCase(std::string(label) + "/threads:" + std::to_string(t),
                  raggedKernelBench, sh, std::string(kernel), t, minLen);
  };
  kernelCases(kDecode, 0,
              {{"Decode_f32_paged16/mhagen", "bench_gqa_f32_paged16"},
               {"Decode_f32_kvi8_paged16/mhagen", "bench_gqa_f32_kvi8_paged16"},
               {"Decode_f32_paged16/mhagen_mlir", "bench_gqa_f32_paged16_mlir"},
               {"Decode_f32_kvi8_paged16/mhagen_mlir",
                "bench_gqa_f32_kvi8_paged16_mlir"}});
  kernelCases(
      kRaggedDecode, kRaggedMinLen,
      {{"RaggedDecode_f32/mhagen", "bench_gqa_f32_pad"},
       {"RaggedDecode_f32_paged16/mhagen", "bench_gqa_f32_paged16"},
       {"RaggedDecode_f32_kvi8_paged16/mhagen", "bench_gqa_f32_kvi8_paged16"},
       {"RaggedDecode_f32_paged16/mhagen_mlir", "bench_gqa_f32_paged16_mlir"},
       {"RaggedDecode_f32_ragged_paged16/mhagen",
        "bench_gqa_f32_ragged_paged16"},
       {"RaggedDecode_f32_ragged_paged16/mhagen_mlir",
        "bench_gqa_f32_ragged_paged16_mlir"},
       {"RaggedDecode_f32_ragged/mhagen", "bench_gqa_f32_ragged"}});
  kernelCases(
      kRaggedServe, kRaggedMinLen,
      {{"RaggedServe_f32/mhagen", "bench_gqa_f32_ragged"},
       {"RaggedServe_f32_paged16/mhagen", "bench_gqa_f32_ragged_paged16"},
       {"RaggedServe_f32/mhagen_mlir", "bench_gqa_f32_ragged_mlir"},
       {"RaggedServe_f32_paged16/mhagen_mlir",
        "bench_gqa_f32_ragged_paged16_mlir"},
       {"RaggedServe_f32_padded_paged16/mhagen", "bench_gqa_f32_paged16"}});
  // Each score modifier alone on S1 and S2 (at most 10 % over
  // the plain kernel, S1_f32/mhagen and S2_f32/mhagen above), and the
  // log-sum-exp output.
  for (const Shape &sh : {kS1, kS2})
    for (const char *mod : {"softcap", "alibi", "sinks", "lse", "srt"})
      for (int t : {1, 2}) {
        std::string name = std::string(sh.name) + "_f32_" + mod +
                           "/mhagen/threads:" + std::to_string(t);
        timedCase(name, namedKernelBench, sh,
                  std::string("bench_gqa_f32_") + mod, t);
      }
  // The StreamingLLM union beside the window alone and plain causal at
  // the same size (what the sink tile costs and what skipping saves).
  for (const auto &[label, kernel] :
       {std::pair<const char *, const char *>{"Streaming_f32/mhagen",
                                              "bench_streaming"},
        {"Streaming_f32/mhagen_mlir", "bench_streaming_mlir"},
        {"Streaming_window_only_f32/mhagen", "bench_window1024"},
        {"Streaming_causal_f32/mhagen", "bench_gqa_f32"}})
    for (int t : {1, 2})
      timedCase(std::string(label) + "/threads:" + std::to_string(t),
                namedKernelBench, kStreaming, std::string(kernel), t);
  for (const auto &[sh, kernel] :
       {std::pair<Shape, const char *>{kGemma2, "bench_gemma2"},
        std::pair<Shape, const char *>{kGptOss, "bench_gptoss"}})
    for (int t : {1, 2})
      timedCase(std::string(sh.name) +
                    "_f32/mhagen/threads:" + std::to_string(t),
                namedKernelBench, sh, std::string(kernel), t);
  // The layer as a decoder step through its cache: S4's one token after
  // 4095 cached ones, and 16 sequences of one query each with lengths
  // drawn from [512, 4096]; f32 weights over a bf16 cache read half the
  // K/V bytes of f32's, over an i8 cache a quarter (and the scales).
  for (const char *dtype : {"f32", "bf16", "f32_kvbf16", "f32_kvi8"})
    for (int t : {1, 2}) {
      const std::string kernel = std::string("bench_layer_decode_") + dtype,
                        suffix = "/mhagen/threads:" + std::to_string(t);
      timedCase(std::string("LayerDecode_") + dtype + suffix, layerDecodeBench,
                kDecode, kernel, t, int64_t(0));
      timedCase(std::string("LayerBatchDecode_") + dtype + suffix,
                layerDecodeBench, kBatchDecode, kernel, t, kRaggedMinLen);
    }
  for (int t : {1, 2}) {
    const std::string threads = "/threads:" + std::to_string(t);
    timedCase("Layer_f32/mhagen_fused" + threads, layerBench, false, false, t);
    timedCase("Layer_f32/mhagen_mlir" + threads, layerBench, false, true, t);
    timedCase("Layer_f32/onednn_projections" + threads, layerBench, true, false,
              t);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
