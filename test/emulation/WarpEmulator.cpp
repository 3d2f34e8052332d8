// The fibers, barriers and warp instructions of WarpEmulator.h.
#include "WarpEmulator.h"

#include "../../templates/cuda/tensor_core_tiles.h"

#include <ucontext.h>

#include <algorithm>
#include <deque>
#include <memory>
#include <vector>

namespace emu {

Dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace {

constexpr size_t kStackBytes = 256 * 1024;

// What a lane posts for a warp instruction: up to 10 words and an address.
struct Slot {
  uint32_t w[10];
  const void *addr;
};

struct PendingCopy {
  void *dst;
  const void *src;
  bool valid;
};

struct Fiber {
  ucontext_t ctx;
  std::unique_ptr<char[]> stack;
  bool done = false;
  bool atBlockBarrier = false;
  long blockBarriers = 0, warpBarriers = 0;
  std::vector<PendingCopy> open;               // issued, not committed
  std::deque<std::vector<PendingCopy>> groups; // committed, oldest first
};

struct Block {
  ucontext_t main;
  std::vector<Fiber> fibers;
  std::vector<Slot> slots;
  std::vector<unsigned char> shared;
  unsigned current = 0;
  Schedule schedule;
  const std::function<void()> *body = nullptr;
};

Block block;

Fiber &self() { return block.fibers[block.current]; }
unsigned lane() { return block.current & 31; }
unsigned warpBase() { return block.current & ~31u; }

void trampoline() {
  (*block.body)();
  self().done = true;
  swapcontext(&self().ctx, &block.main); // never resumed
}

void perform(const PendingCopy &c) {
  if (c.valid)
    std::memcpy(c.dst, c.src, 16);
  else
    std::memset(c.dst, 0, 16);
}

float half16(uint32_t word, int half, bool bf16) {
  const uint16_t b = static_cast<uint16_t>(word >> (16 * half));
  return bf16 ? mhagen::bf16ToFloat(b) : mhagen::f16ToFloat(b);
}

} // namespace

std::string Schedule::str() const {
  return std::string(copiesAtIssue ? "copies land at issue"
                                   : "copies land at the wait") +
         (lastWarpFirst ? ", last warp first" : ", first warp first");
}

namespace {

// Runs warp w's lanes in turn, each to its next barrier, until all of them
// wait at __syncthreads or are done; "" or what diverged.
std::string runWarpToBlockBarrier(unsigned w) {
  const unsigned first = 32 * w,
                 last = std::min<unsigned>(first + 32, block.fibers.size());
  for (;;) {
    for (unsigned i = first; i < last; ++i) {
      Fiber &f = block.fibers[i];
      if (f.done || f.atBlockBarrier)
        continue;
      block.current = i;
      threadIdx = {i, 0, 0};
      swapcontext(&block.main, &f.ctx);
    }
    unsigned done = 0, waiting = 0;
    for (unsigned i = first; i < last; ++i) {
      done += block.fibers[i].done;
      waiting += block.fibers[i].atBlockBarrier;
      if (block.fibers[i].warpBarriers != block.fibers[first].warpBarriers)
        return "the lanes of warp " + std::to_string(w) +
               " reach different warp instructions";
    }
    if (done + waiting == last - first) {
      if (done && waiting)
        return "some lanes of warp " + std::to_string(w) +
               " returned while others wait at __syncthreads";
      return "";
    }
    if (done || waiting)
      return "the lanes of warp " + std::to_string(w) +
             " diverge around a warp instruction";
  }
}

} // namespace

std::string launch(Dim3 grid, unsigned threads, size_t sharedBytes,
                   const Schedule &schedule,
                   const std::function<void()> &body) {
  block.fibers.resize(threads);
  block.slots.assign(threads, Slot{});
  block.schedule = schedule;
  block.body = &body;
  blockDim = {threads, 1, 1};
  gridDim = grid;
  const unsigned warps = (threads + 31) / 32;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        blockIdx = {x, y, z};
        // Shared memory starts as NaN patterns: a read before a write shows.
        block.shared.assign(sharedBytes + 128, 0xff);
        for (Fiber &f : block.fibers) {
          if (!f.stack)
            f.stack.reset(new char[kStackBytes]);
          f.done = f.atBlockBarrier = false;
          f.blockBarriers = f.warpBarriers = 0;
          f.open.clear();
          f.groups.clear();
          getcontext(&f.ctx);
          f.ctx.uc_stack.ss_sp = f.stack.get();
          f.ctx.uc_stack.ss_size = kStackBytes;
          f.ctx.uc_link = nullptr;
          makecontext(&f.ctx, trampoline, 0);
        }
        for (;;) {
          for (unsigned k = 0; k < warps; ++k) {
            const std::string why = runWarpToBlockBarrier(
                schedule.lastWarpFirst ? warps - 1 - k : k);
            if (!why.empty())
              return why;
          }
          unsigned done = 0;
          for (const Fiber &f : block.fibers)
            done += f.done;
          if (done == threads)
            break;
          if (done != 0)
            return "some threads of block (" + std::to_string(x) + ", " +
                   std::to_string(y) + ", " + std::to_string(z) +
                   ") returned while others wait at __syncthreads";
          for (Fiber &f : block.fibers) {
            if (f.blockBarriers != block.fibers[0].blockBarriers)
              return "the threads of a block reach different __syncthreads";
            f.atBlockBarrier = false;
          }
        }
      }
  return "";
}

void syncthreads() {
  ++self().blockBarriers;
  self().atBlockBarrier = true;
  swapcontext(&self().ctx, &block.main);
}

namespace {
// The lanes of this thread's warp exchange what they posted.
void warpBarrier() {
  ++self().warpBarriers;
  swapcontext(&self().ctx, &block.main);
}
} // namespace

unsigned char *sharedMemory() {
  // 128-byte aligned, as the kernel declares its shared array.
  auto p = reinterpret_cast<uintptr_t>(block.shared.data());
  return block.shared.data() + ((128 - p % 128) % 128);
}

float shflXor(float v, int laneMask) {
  std::memcpy(block.slots[block.current].w, &v, 4);
  warpBarrier();
  float r;
  std::memcpy(&r, block.slots[warpBase() + (lane() ^ laneMask)].w, 4);
  warpBarrier();
  return r;
}

// ldmatrix .x4: lane l addresses row l % 8 of matrix l / 8; register i of
// lane l holds row l / 4, columns 2 (l % 4) + {0, 1} of matrix i (with
// .trans: column l / 4, rows 2 (l % 4) + {0, 1}).
void ldmatrix(uint32_t (&r)[4], const void *p, bool trans) {
  block.slots[block.current].addr = p;
  warpBarrier();
  const unsigned l = lane();
  for (int i = 0; i < 4; ++i) {
    uint16_t e[2];
    for (int h = 0; h < 2; ++h) {
      const unsigned row = trans ? 2 * (l % 4) + h : l / 4;
      const unsigned col = trans ? l / 4 : 2 * (l % 4) + h;
      const auto *base = static_cast<const uint16_t *>(
          block.slots[warpBase() + 8 * i + row].addr);
      e[h] = base[col];
    }
    r[i] = uint32_t(e[0]) | uint32_t(e[1]) << 16;
  }
  warpBarrier();
}

// mma.sync.m16n8k16.row.col: each lane posts its A, B and C fragments and
// computes its four D elements from the warp's (tensor_core_tiles.h has
// the layouts). The products of 16-bit inputs are exact in f32.
void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
         bool bf16) {
  Slot &s = block.slots[block.current];
  for (int i = 0; i < 4; ++i)
    s.w[i] = a[i];
  s.w[4] = b0;
  s.w[5] = b1;
  warpBarrier();
  const int l = static_cast<int>(lane());
  float out[4];
  for (int e = 0; e < 4; ++e) {
    const int row = mh_tc::fragCRow(l, e), col = mh_tc::fragCCol(l, e);
    float acc = d[e];
    for (int k = 0; k < 16; ++k) {
      // A[row][k]: lane 4 (row % 8) + (k % 8) / 2, register (row / 8) +
      // 2 (k / 8), half k % 2; B[k][col]: lane 4 col + (k % 8) / 2,
      // register k / 8, half k % 2.
      const Slot &sa = block.slots[warpBase() + 4 * (row % 8) + (k % 8) / 2];
      const Slot &sb = block.slots[warpBase() + 4 * col + (k % 8) / 2];
      const float x = half16(sa.w[(row / 8) + 2 * (k / 8)], k % 2, bf16);
      const float y = half16(sb.w[4 + k / 8], k % 2, bf16);
      acc += x * y;
    }
    out[e] = acc;
  }
  warpBarrier();
  for (int e = 0; e < 4; ++e)
    d[e] = out[e];
}

void copy16(void *dst, const void *src, bool valid) {
  if (block.schedule.copiesAtIssue)
    perform({dst, src, valid});
  else
    self().open.push_back({dst, src, valid});
}

void commitCopies() {
  self().groups.push_back(std::move(self().open));
  self().open.clear();
}

void waitCopies(int newestPending) {
  Fiber &f = self();
  while (static_cast<int>(f.groups.size()) > newestPending) {
    for (const PendingCopy &c : f.groups.front())
      perform(c);
    f.groups.pop_front();
  }
}

} // namespace emu
