// Per-thread reuse of kernel scratch buffers.
//
// Halide kernels allocate each parallel task's scratch (the query tile, the
// softmax state, staged K/V tiles) with halide_malloc at the start of the
// task and free it at the end: hundreds of malloc/free pairs of 10-100 KiB
// per call, from every worker thread. glibc serves them from per-thread
// arenas, but trims and refills those arenas between calls, and a decode
// step of ~2 ms spent ~8% of its time there (perf). The cost also varies with
// what the arena looks like, which widens the run-to-run spread.
//
// This allocator keeps the last few freed blocks of each thread and hands
// one back when a later request of that thread fits it; everything else
// goes to the system allocator. MHAGEN_SCRATCH_CACHE=0 turns it off, so
// the two can be compared in one run. Memory is 128-byte aligned, as Halide
// expects of halide_malloc (and more than any vector load needs).
#include "RuntimeInternal.h"

#include <HalideRuntime.h>

#include <cstdint>
#include <cstdlib>

namespace mhagen::rt {
namespace {

constexpr size_t kAlign = 128;
constexpr int kCachedBlocks = 8;
// Blocks above this are not kept (a whole-call buffer of a big prefill,
// which would otherwise stay resident per thread).
constexpr size_t kMaxCachedBytes = size_t(4) << 20;

// Stored in the kAlign bytes before the block returned to Halide.
struct BlockHeader {
  size_t capacity; // usable bytes after the header
};

struct ThreadCache {
  void *blocks[kCachedBlocks] = {};
  int count = 0;
  ~ThreadCache() {
    for (int i = 0; i < count; ++i)
      std::free(blocks[i]);
  }
};
thread_local ThreadCache cache;

BlockHeader *headerOf(void *user) {
  return reinterpret_cast<BlockHeader *>(static_cast<char *>(user) - kAlign);
}
void *userOf(void *raw) { return static_cast<char *>(raw) + kAlign; }

void *scratchMalloc(void *, size_t bytes) {
  // Best fit among the cached blocks that are at most 2x the request, so a
  // small request does not pin a large block.
  int bestIdx = -1;
  size_t bestCap = SIZE_MAX;
  for (int i = 0; i < cache.count; ++i) {
    size_t cap = headerOf(userOf(cache.blocks[i]))->capacity;
    if (cap >= bytes && cap <= 2 * bytes + kAlign && cap < bestCap) {
      bestIdx = i;
      bestCap = cap;
    }
  }
  if (bestIdx >= 0) {
    void *raw = cache.blocks[bestIdx];
    cache.blocks[bestIdx] = cache.blocks[--cache.count];
    return userOf(raw);
  }
  const size_t capacity = (bytes + kAlign - 1) / kAlign * kAlign;
  void *raw = std::aligned_alloc(kAlign, kAlign + capacity);
  if (!raw)
    return nullptr;
  reinterpret_cast<BlockHeader *>(raw)->capacity = capacity;
  return userOf(raw);
}

void scratchFree(void *, void *user) {
  if (!user)
    return;
  void *raw = static_cast<char *>(user) - kAlign;
  if (headerOf(user)->capacity > kMaxCachedBytes) {
    std::free(raw);
    return;
  }
  if (cache.count == kCachedBlocks) {
    // Full: give slot 0 back to the system (order does not matter here).
    std::free(cache.blocks[0]);
    cache.blocks[0] = cache.blocks[--cache.count];
  }
  cache.blocks[cache.count++] = raw;
}

} // namespace

// Under AddressSanitizer every block goes straight to the system allocator,
// so that an overrun of a kernel's scratch is caught at its exact size
// (a reused block would hide overruns into its unused capacity).
#if defined(__SANITIZE_ADDRESS__)
#define MHAGEN_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MHAGEN_ASAN 1
#endif
#endif

void installScratchAllocator() {
#ifdef MHAGEN_ASAN
  return;
#endif
  if (const char *env = std::getenv("MHAGEN_SCRATCH_CACHE"))
    if (env[0] == '0')
      return;
  halide_set_custom_malloc(scratchMalloc);
  halide_set_custom_free(scratchFree);
}

} // namespace mhagen::rt
