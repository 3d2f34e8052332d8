// How much of a call's parallel loops the threads spend idle: the measure
// of "both threads get equal work" (docs/performance.md, "How to measure").
#ifndef MHAGEN_BENCH_PARALLELIDLE_H
#define MHAGEN_BENCH_PARALLELIDLE_H

namespace mhagen::bench {

/// Wraps the thread pool's loop handler (whatever order the runtime set)
/// so that every parallel loop of a Halide kernel records its wall time
/// and the time its tasks ran. Call once, after the runtime has set its
/// pool up (after mhagen_set_num_threads). Two clock reads per task: ~40
/// ns against tasks of 50 us and more.
void installParallelIdleProbe();

/// Starts a new tally for a pool of `threads` threads.
void resetParallelIdle(int threads);

/// Since the last reset: the share of threads x wall time of all parallel
/// loops in which no task ran, in percent (0 when no loop ran). It counts
/// the tail of a loop, where threads with nothing left wait for the last
/// task, and the pool's hand-out cost.
double parallelIdlePercent();

} // namespace mhagen::bench

#endif
