// The shared thread pool. Kernels of both backends run their parallel loops
// on the Halide runtime's thread pool, which is linked into this library
// once (kernel objects are generated without their own copy), so one call
// sets the thread count for every kernel in the process.
#include "mhagen/runtime.h"

#include "RuntimeInternal.h"

#include <HalideRuntime.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <shared_mutex>
#include <thread>

namespace mhagen::rt {

namespace {
std::mutex backendErrorMu;
std::string backendError;
std::once_flag initOnce;
int numThreads = 0;
std::mutex threadsMu;
// Kernel calls hold poolMu shared; changing the thread count holds it
// exclusively and rebuilds the pool: Halide 14's pool keeps every worker
// it once started busy even after its count is lowered.
std::shared_mutex poolMu;

// Halide reports errors (e.g. a failed allocation) through this handler;
// keep the message for the caller instead of printing it.
void onHalideError(void *, const char *msg) {
  std::lock_guard<std::mutex> lock(backendErrorMu);
  backendError = msg ? msg : "";
  while (!backendError.empty() && backendError.back() == '\n')
    backendError.pop_back();
}
void onHalidePrint(void *, const char *) {}

// Halide's GPU runtimes dlopen "libcuda.so" and "libOpenCL.so", names that
// only development packages provide; drivers install the versioned ".so.1".
halide_load_library_t defaultLoadLibrary = nullptr;
void *loadLibrary(const char *name) {
  void *h = defaultLoadLibrary ? defaultLoadLibrary(name) : nullptr;
  if (!h && name) {
    std::string versioned = std::string(name) + ".1";
    h = defaultLoadLibrary ? defaultLoadLibrary(versioned.c_str()) : nullptr;
  }
  return h;
}

int defaultThreads() {
  if (const char *env = std::getenv("MHAGEN_NUM_THREADS")) {
    int n = std::atoi(env);
    if (n >= 1)
      return std::min(n, MHAGEN_MAX_THREADS);
  }
  unsigned hw = std::thread::hardware_concurrency();
  return hw ? std::min(static_cast<int>(hw), MHAGEN_MAX_THREADS) : 1;
}

struct ParallelClosure {
  int (*fn)(void *, int);
  void *ctx;
};
int parallelTrampoline(void *, int i, uint8_t *closure) {
  auto *c = reinterpret_cast<ParallelClosure *>(closure);
  return c->fn(c->ctx, i);
}
} // namespace

std::string takeBackendError() {
  std::lock_guard<std::mutex> lock(backendErrorMu);
  std::string e = backendError;
  backendError.clear();
  return e;
}

void ensureRuntimeInitialized() {
  std::call_once(initOnce, [] {
    halide_set_error_handler(onHalideError);
    halide_set_custom_print(onHalidePrint);
    defaultLoadLibrary = halide_set_custom_load_library(loadLibrary);
    installScratchAllocator();
    installTaskOrder();
    std::lock_guard<std::mutex> lock(threadsMu);
    if (numThreads == 0)
      numThreads = defaultThreads();
    halide_set_num_threads(numThreads);
  });
}

std::shared_lock<std::shared_mutex> lockPoolForCall() {
  ensureRuntimeInitialized();
  return std::shared_lock<std::shared_mutex>(poolMu);
}

} // namespace mhagen::rt

using namespace mhagen::rt;

extern "C" int mhagen_set_num_threads(int n) {
  if (n < 1 || n > MHAGEN_MAX_THREADS)
    return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                "thread count must be between 1 and " +
                    std::to_string(MHAGEN_MAX_THREADS) + " (got " +
                    std::to_string(n) + ")");
  ensureRuntimeInitialized();
  std::unique_lock<std::shared_mutex> pool(poolMu); // waits for calls
  std::lock_guard<std::mutex> lock(threadsMu);
  if (n != numThreads) {
    numThreads = n;
    halide_shutdown_thread_pool(); // joins the workers; the next call
    halide_set_num_threads(n);     // starts at most n - 1 of them
  }
  clearError();
  return MHAGEN_OK;
}

extern "C" int mhagen_get_num_threads(void) {
  ensureRuntimeInitialized();
  std::lock_guard<std::mutex> lock(threadsMu);
  return numThreads;
}

/* Runs fn(ctx, i) for i in [0, n) on the shared pool, handed out as the
 * pool hands out a kernel's tasks (highest index first, TaskOrder.cpp).
 * Exported for code without a pool of its own; MLIR kernels run on OpenMP
 * threads instead (mha-parallelize). */
extern "C" int mhagen_parallel_for(int (*fn)(void *, int), void *ctx, int n) {
  ensureRuntimeInitialized();
  ParallelClosure c{fn, ctx};
  return halide_do_par_for(nullptr, parallelTrampoline, 0, n,
                           reinterpret_cast<uint8_t *>(&c));
}
