// The runtime's scratch allocator (runtime/src/ScratchCache.cpp), reached
// through the Halide entry points generated kernels call. Every numeric
// test also runs through it; these check its own promises: alignment,
// reuse of a freed block by a later request that fits, no reuse of a block
// far larger than the request, and frees from another thread.
#include "mhagen/runtime.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <thread>

// Exported by libmhagen_runtime's embedded Halide runtime (HalideRuntime.h
// declares them; the test does not need the rest of that header).
extern "C" void *halide_malloc(void *user_context, size_t size);
extern "C" void halide_free(void *user_context, void *ptr);

namespace {

// Any runtime call installs the allocator (once, before kernels run).
void initRuntime() { ASSERT_GE(mhagen_get_num_threads(), 1); }

bool aligned128(void *p) { return reinterpret_cast<uintptr_t>(p) % 128 == 0; }

// Under AddressSanitizer the runtime leaves Halide's own allocator in place
// (ScratchCache.cpp), which promises less alignment and no reuse.
bool cacheActive() {
#if defined(__SANITIZE_ADDRESS__)
  return false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  return false;
#endif
#endif
  return true;
}

TEST(ScratchCache, AlignedAndWritable) {
  initRuntime();
  for (size_t n : {size_t(1), size_t(100), size_t(4096), size_t(100000),
                   size_t(5) << 20}) {
    void *p = halide_malloc(nullptr, n);
    ASSERT_NE(p, nullptr);
    if (cacheActive())
      EXPECT_TRUE(aligned128(p)) << n;
    std::memset(p, 0xab, n); // ASan checks the whole block is ours
    halide_free(nullptr, p);
  }
}

TEST(ScratchCache, ReusesAFreedBlockThatFits) {
  initRuntime();
  if (!cacheActive())
    GTEST_SKIP() << "the cache is off under AddressSanitizer";
  void *a = halide_malloc(nullptr, 64 * 1024);
  halide_free(nullptr, a);
  void *b = halide_malloc(nullptr, 60 * 1024); // fits, within 2x
  EXPECT_EQ(a, b);
  void *c = halide_malloc(nullptr, 1024); // would waste 64x: a new block
  EXPECT_NE(b, c);
  std::memset(c, 1, 1024);
  halide_free(nullptr, b);
  halide_free(nullptr, c);
}

TEST(ScratchCache, NeverHandsOutALiveBlockTwice) {
  initRuntime();
  void *blocks[32];
  for (int i = 0; i < 32; ++i) {
    blocks[i] = halide_malloc(nullptr, 8192);
    std::memset(blocks[i], i, 8192);
  }
  for (int i = 0; i < 32; ++i)
    for (int j = i + 1; j < 32; ++j)
      ASSERT_NE(blocks[i], blocks[j]);
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(static_cast<unsigned char *>(blocks[i])[8191], i);
    halide_free(nullptr, blocks[i]); // more than the cache keeps
  }
}

TEST(ScratchCache, FreeFromAnotherThread) {
  initRuntime();
  void *p = halide_malloc(nullptr, 32 * 1024);
  std::thread([p] { halide_free(nullptr, p); }).join();
  void *q = halide_malloc(nullptr, 32 * 1024);
  std::memset(q, 0, 32 * 1024);
  halide_free(nullptr, q);
}

} // namespace
