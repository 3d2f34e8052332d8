// The order in which the thread pool hands out a parallel loop's tasks:
// heaviest first (an explicit work split for causal).
//
// Halide 14's pool gives a loop's iterations out one at a time, lowest
// index first, to whichever thread asks next. mhagen's Halide kernels
// number their attention tasks so that the query tile grows with the task
// index (across the loop, or within each head block;
// compiler/halide/CpuSchedule.cpp, docs/design.md §6), and under a causal
// mask a task's work grows with its query tile: the last tile of S2 scans
// 32x the keys of the first. Taken lowest first, the costliest tasks come
// last, and one thread can still be busy with one of them while the others
// have nothing left. Handing them out highest index first is the longest-
// processing-time-first rule (FlashAttention 3 orders causal tiles the
// same way): a loop ends with its cheapest tasks, and the threads finish
// within one of them of each other. The split stays dynamic, so a thread
// slowed by a neighbour on its core takes fewer tasks instead of holding
// the call up, which a static equal-work split could not do.
//
// Loops whose tasks cost the same (no mask, the layer's GEMM panels, the
// decode variant's key chunks) lose nothing by the reversed order.
// MHAGEN_TASK_ORDER=ascending keeps Halide's order, so the two can be
// compared in one run (bench/run_spread.sh).
#include "RuntimeInternal.h"

#include <HalideRuntime.h>

#include <cstdlib>
#include <cstring>

namespace mhagen::rt {
namespace {

halide_do_par_for_t halideDoParFor = nullptr;

struct ReversedLoop {
  halide_task_t task;
  int first, last; // task i runs iteration first + (last - i)
  uint8_t *closure;
};

int reversedTask(void *userContext, int i, uint8_t *closure) {
  const auto *loop = reinterpret_cast<const ReversedLoop *>(closure);
  return loop->task(userContext, loop->first + (loop->last - i), loop->closure);
}

int doParForHeaviestFirst(void *userContext, halide_task_t task, int min,
                          int size, uint8_t *closure) {
  if (size <= 1)
    return halideDoParFor(userContext, task, min, size, closure);
  ReversedLoop loop{task, min, min + (size - 1), closure};
  return halideDoParFor(userContext, reversedTask, min, size,
                        reinterpret_cast<uint8_t *>(&loop));
}

} // namespace

void installTaskOrder() {
  if (const char *env = std::getenv("MHAGEN_TASK_ORDER"))
    if (std::strcmp(env, "ascending") == 0)
      return;
  halideDoParFor = halide_set_custom_do_par_for(doParForHeaviestFirst);
}

} // namespace mhagen::rt
