#include "MachinePeak.h"

#include "mhagen/runtime.h"

#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iterator>
#include <thread>
#include <vector>

namespace mhagen::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Each thread's share of a measurement runs about this long: long enough
// that a thread which starts a few milliseconds late still overlaps the
// others (the old 8 ms runs made the 2-thread FMA peak read ~1x the
// 1-thread one on a Zen 3).
constexpr double kSecondsPerRun = 0.3;
constexpr int kRuns = 3; // best of

// Runs work(thread) on `threads` threads released together from a
// barrier; returns the summed amount (FLOPs or bytes) over the seconds
// from the release to the last thread's end.
double runTogether(int threads, const std::function<double(int)> &work) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<double> amount(threads, 0);
  std::vector<Clock::time_point> end(threads);
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire))
        _mm_pause();
      amount[t] = work(t);
      end[t] = Clock::now();
    });
  while (ready.load() < threads)
    std::this_thread::yield();
  const Clock::time_point start = Clock::now();
  go.store(true, std::memory_order_release);
  for (auto &th : ts)
    th.join();
  const Clock::time_point last = *std::max_element(end.begin(), end.end());
  double total = 0;
  for (double a : amount)
    total += a;
  return total / std::chrono::duration<double>(last - start).count();
}

// Best of kRuns, with each thread's work sized from a short 1-thread
// calibration so one thread's share lasts about kSecondsPerRun.
double best(int threads, const std::function<double(long)> &loop) {
  auto t0 = Clock::now();
  const double calAmount = loop(200000);
  const double calRate =
      calAmount / std::chrono::duration<double>(Clock::now() - t0).count();
  const double perIter = calAmount / 200000;
  const long iters =
      std::max(1L, static_cast<long>(kSecondsPerRun * calRate / perIter));
  double bestRate = 0;
  for (int r = 0; r < kRuns; ++r)
    bestRate = std::max(bestRate,
                        runTogether(threads, [&](int) { return loop(iters); }));
  return bestRate / 1e9;
}

__attribute__((target("avx512f"))) double fmaLoop512(long iters) {
  __m512 a[16];
  const __m512 b = _mm512_set1_ps(1.0000001f), c = _mm512_set1_ps(1e-7f);
  for (int i = 0; i < 16; ++i)
    a[i] = _mm512_set1_ps(static_cast<float>(i));
  for (long n = 0; n < iters; ++n)
    for (int i = 0; i < 16; ++i)
      a[i] = _mm512_fmadd_ps(a[i], b, c);
  float s = 0;
  for (int i = 0; i < 16; ++i)
    s += _mm512_reduce_add_ps(a[i]);
  benchmark::DoNotOptimize(s);
  return static_cast<double>(iters) * 16 * 16 * 2;
}

__attribute__((target("avx2,fma"))) double fmaLoop256(long iters) {
  __m256 a[12];
  const __m256 b = _mm256_set1_ps(1.0000001f), c = _mm256_set1_ps(1e-7f);
  for (int i = 0; i < 12; ++i)
    a[i] = _mm256_set1_ps(static_cast<float>(i));
  for (long n = 0; n < iters; ++n)
    for (int i = 0; i < 12; ++i)
      a[i] = _mm256_fmadd_ps(a[i], b, c);
  float s = 0;
  for (int i = 0; i < 12; ++i) {
    float t[8];
    _mm256_storeu_ps(t, a[i]);
    s += t[0];
  }
  benchmark::DoNotOptimize(s);
  return static_cast<double>(iters) * 12 * 8 * 2;
}

// vdpbf16ps: per lane, acc += a[2l]*b[2l] + a[2l+1]*b[2l+1], i.e. 4 FLOPs
// per f32 lane, 64 per instruction. 16 accumulators cover its latency.
__attribute__((target("avx512f,avx512bf16"))) double bf16DotLoop(long iters) {
  __m512 a[16];
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80); // bf16 1.0
  const __m512bh y = (__m512bh)_mm512_set1_epi16(0x3380); // bf16 ~6e-8
  for (int i = 0; i < 16; ++i)
    a[i] = _mm512_set1_ps(static_cast<float>(i));
  for (long n = 0; n < iters; ++n)
    for (int i = 0; i < 16; ++i)
      a[i] = _mm512_dpbf16_ps(a[i], x, y);
  float s = 0;
  for (int i = 0; i < 16; ++i)
    s += _mm512_reduce_add_ps(a[i]);
  benchmark::DoNotOptimize(s);
  return static_cast<double>(iters) * 16 * 64;
}

// The tile configuration tdpbf16ps reads (Intel SDM, LDTILECFG): palette
// 1, every tile 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t startRow = 0;
  uint8_t reserved[14] = {};
  uint16_t bytesPerRow[16] = {};
  uint8_t rows[16] = {};
};

// tdpbf16ps: C[16x16 f32] += A[16x32 bf16] B[32x16 bf16], 16384 FLOPs per
// instruction. Four accumulators (tiles 0-3) cover its latency; A and B
// (tiles 4, 5) stay loaded, so the loop times the unit, not the loads.
__attribute__((target("amx-tile,amx-bf16"))) double amxBf16Loop(long iters) {
  TileConfig config;
  for (int t = 0; t < 6; ++t) {
    config.bytesPerRow[t] = 64;
    config.rows[t] = 16;
  }
  _tile_loadconfig(&config);
  alignas(64) uint16_t a[16 * 32], b[16 * 32];
  std::fill(std::begin(a), std::end(a), uint16_t(0x3f80)); // bf16 1.0
  std::fill(std::begin(b), std::end(b), uint16_t(0x3380)); // bf16 ~6e-8
  _tile_loadd(4, a, 64);
  _tile_loadd(5, b, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (long n = 0; n < iters; ++n) {
    _tile_dpbf16ps(0, 4, 5);
    _tile_dpbf16ps(1, 4, 5);
    _tile_dpbf16ps(2, 4, 5);
    _tile_dpbf16ps(3, 4, 5);
  }
  alignas(64) float c[16 * 16];
  _tile_stored(0, c, 64);
  _tile_release();
  benchmark::DoNotOptimize(c[0]);
  return static_cast<double>(iters) * 4 * 16 * 16 * 32 * 2;
}

// Linux hands a process the AMX tile state only when asked (arch_prctl
// ARCH_REQ_XCOMP_PERM for XTILEDATA), as the runtime does before a kernel
// that uses tiles.
bool amxPermitted() {
#if defined(__x86_64__) && defined(__linux__)
  const long archReqXcompPerm = 0x1023, xfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, archReqXcompPerm, xfeatureXtiledata) == 0;
#else
  return false;
#endif
}

} // namespace

double measureFmaPeak(int threads) {
  const bool avx512 = mhagen_cpu_has("avx512f");
  return best(threads, [avx512](long n) {
    return avx512 ? fmaLoop512(n) : fmaLoop256(n);
  });
}

double measureBf16DotPeak(int threads) {
  if (!mhagen_cpu_has("avx512_bf16"))
    return 0;
  return best(threads, bf16DotLoop);
}

double measureAmxBf16Peak(int threads) {
  if (!mhagen_cpu_has("amx_bf16") || !amxPermitted())
    return 0;
  return best(threads, amxBf16Loop);
}

double bf16Peak(double fma, double bf16Dot, double amxBf16) {
  return std::max({fma, bf16Dot, amxBf16});
}

double measureTriad(int threads) {
  const size_t n = size_t(1) << 25; // 128 MiB per array
  std::vector<float> a(n), b(n, 1.0f), c(n, 2.0f);
  // One "iteration" is one pass of every thread over its slice; the
  // calibration's 200000 would be far too many, so size passes here.
  auto pass = [&](int t, int tn) {
    const size_t lo = n * t / tn, hi = n * (t + 1) / tn;
    for (size_t i = lo; i < hi; ++i)
      a[i] = b[i] + 3.0f * c[i];
    benchmark::DoNotOptimize(a.data());
    return 3.0 * (hi - lo) * sizeof(float);
  };
  auto t0 = Clock::now();
  pass(0, 1);
  const double onePass =
      std::chrono::duration<double>(Clock::now() - t0).count();
  // Each thread streams its 1/threads slice; as many passes as fill the
  // run at the 1-thread rate.
  const int passes =
      std::max(2, static_cast<int>(kSecondsPerRun / std::max(onePass, 1e-6)));
  double bestRate = 0;
  for (int r = 0; r < kRuns; ++r)
    bestRate = std::max(bestRate, runTogether(threads, [&](int t) {
                          double bytes = 0;
                          for (int p = 0; p < passes; ++p)
                            bytes += pass(t, threads);
                          return bytes;
                        }));
  return bestRate / 1e9;
}

std::string scalingWarning(const char *what, double one, double many,
                           int threads) {
  if (one <= 0 || many >= 0.85 * threads * one)
    return "";
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "%s with %d threads is %.1f, only %.2fx the 1-thread %.1f",
                what, threads, many, many / one, one);
  return buf;
}

} // namespace mhagen::bench
