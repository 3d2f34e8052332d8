#include "ParallelIdle.h"

#include <HalideRuntime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace mhagen::bench {
namespace {

halide_do_par_for_t runtimeDoParFor = nullptr;
std::atomic<int64_t> busyNs{0}, threadSlotsNs{0};
std::atomic<int> poolThreads{1};

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct TimedLoop {
  halide_task_t task;
  uint8_t *closure;
  std::atomic<int64_t> busy{0};
};

int timedTask(void *userContext, int i, uint8_t *closure) {
  auto *loop = reinterpret_cast<TimedLoop *>(closure);
  const int64_t t0 = nowNs();
  const int r = loop->task(userContext, i, loop->closure);
  loop->busy += nowNs() - t0;
  return r;
}

int timedDoParFor(void *userContext, halide_task_t task, int min, int size,
                  uint8_t *closure) {
  TimedLoop loop{task, closure};
  const int64_t t0 = nowNs();
  const int r = runtimeDoParFor(userContext, timedTask, min, size,
                                reinterpret_cast<uint8_t *>(&loop));
  const int64_t wall = nowNs() - t0;
  busyNs += loop.busy.load();
  // A loop of fewer tasks than threads cannot use them all; it is counted
  // with the threads it could use.
  threadSlotsNs += wall * std::min(size, poolThreads.load());
  return r;
}

} // namespace

void installParallelIdleProbe() {
  if (!runtimeDoParFor)
    runtimeDoParFor = halide_set_custom_do_par_for(timedDoParFor);
}

void resetParallelIdle(int threads) {
  poolThreads = threads;
  busyNs = 0;
  threadSlotsNs = 0;
}

double parallelIdlePercent() {
  const double slots = static_cast<double>(threadSlotsNs.load());
  if (slots <= 0)
    return 0;
  return 100.0 *
         std::max(0.0, 1.0 - static_cast<double>(busyNs.load()) / slots);
}

} // namespace mhagen::bench
