// The machine's own ceilings, measured in the benchmark's run: the f32 FMA
// rate, the bf16 pairwise-dot (vdpbf16ps) and tile (AMX) rates and the
// STREAM triad
// bandwidth, each with 1..N threads started together.
//
// Every "% of FMA peak" and every decode bandwidth floor the benchmark
// prints divides by these figures, so they must not be inflated or
// deflated by how they are taken: each thread runs
// ~0.3 s, all threads wait at a barrier and start together, and the time
// is from the release to the last thread's end. A peak that does not scale
// with the threads is reported (scalingWarning), not silently used.
#pragma once

#include <string>

namespace mhagen::bench {

// Each figure is for all `threads` together.

// f32 FMA GFLOP/s: 16 (AVX-512) or 12 (AVX2) independent FMA chains per
// thread, enough to cover the FMA latency on every machine class here.
double measureFmaPeak(int threads);

// bf16 dot GFLOP/s (vdpbf16ps, 2 multiply-adds per lane pair): 16
// independent accumulators per thread. Zero where the CPU lacks
// AVX512_BF16.
double measureBf16DotPeak(int threads);

// bf16 tile GFLOP/s (AMX tdpbf16ps, 16x16 outputs of 32-deep dots per
// instruction): four independent accumulator tiles per thread. Zero where
// the CPU or the OS lacks AMX-BF16.
double measureAmxBf16Peak(int threads);

// The fastest of the f32 FMA, vdpbf16ps and AMX figures: the ceiling of a
// bf16 kernel on this machine, whichever unit it uses.
double bf16Peak(double fma, double bf16Dot, double amxBf16);

// STREAM triad a = b + s*c over 128 MiB arrays, GB/s counting three arrays
// (the write-allocate of a is not counted, as in STREAM).
double measureTriad(int threads);

// "" when the figure for `threads` is within 15% of `threads` times the
// 1-thread figure, else a sentence naming both.
std::string scalingWarning(const char *what, double one, double many,
                           int threads);

} // namespace mhagen::bench
