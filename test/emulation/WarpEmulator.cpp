// The fibers, barriers and warp instructions of WarpEmulator.h.
#include "WarpEmulator.h"

#include "../../templates/cuda/tensor_core_tiles.h"

#include <ucontext.h>

#include <cstdio>
#include <cstdlib>

#include <algorithm>
#include <climits>
#include <deque>
#include <map>
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

// A TMA box on its way to shared memory.
struct PendingBox {
  void *dst;
  const void *map;
  int c[4];
};

// An mbarrier: the arrivals its phase still waits for, the transaction
// bytes, the phases completed, and the TMA boxes that complete it.
struct Barrier {
  unsigned count = 0, pending = 0;
  long long tx = 0;
  unsigned phase = 0;
  std::vector<PendingBox> boxes;
};

struct Fiber {
  ucontext_t ctx;
  std::unique_ptr<char[]> stack;
  bool done = false;
  bool atBlockBarrier = false;
  bool inWarpBarrier = false;
  long blockBarriers = 0, warpBarriers = 0;
  long steps = 0;                // yields that were not a blocked wait's retry
  std::vector<PendingCopy> open; // issued, not committed
  std::deque<std::vector<PendingCopy>> groups; // committed, oldest first
  std::vector<std::function<void()>> openMma;  // wgmma not committed
  std::deque<std::vector<std::function<void()>>> mmaGroups;
};

struct Block {
  ucontext_t main;
  std::vector<Fiber> fibers;
  std::vector<Slot> slots;
  std::vector<unsigned char> shared;
  unsigned char *sharedBase = nullptr; // 1024-byte aligned
  std::map<const void *, Barrier> barriers;
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

void resume(unsigned i) {
  block.current = i;
  threadIdx = {i, 0, 0};
  swapcontext(&block.main, &block.fibers[i].ctx);
}

// Runs warp w's lanes until each is done, waits at __syncthreads, or waits
// on an mbarrier that has not completed. A warp instruction's exchange
// resumes the lanes that have reached it only once every lane still
// running has (the lanes furthest behind run first). Sets `progress` when
// a lane got anywhere; returns "" or what broke the model.
std::string runWarp(unsigned w, bool &progress) {
  const unsigned first = 32 * w,
                 last = std::min<unsigned>(first + 32, block.fibers.size());
  for (;;) {
    long behind = LONG_MAX;
    bool anyDone = false;
    for (unsigned i = first; i < last; ++i) {
      const Fiber &f = block.fibers[i];
      anyDone = anyDone || f.done;
      if (!f.done && !f.atBlockBarrier)
        behind = std::min(behind, f.warpBarriers);
    }
    if (behind == LONG_MAX)
      return "";
    bool moved = false;
    for (unsigned i = first; i < last; ++i) {
      Fiber &f = block.fibers[i];
      if (f.done || f.atBlockBarrier || f.warpBarriers != behind)
        continue;
      if (f.inWarpBarrier && anyDone)
        return "lanes of warp " + std::to_string(w) +
               " run a warp instruction after other lanes returned";
      const long steps = f.steps;
      resume(i);
      moved = moved || f.done || f.steps != steps;
    }
    if (!moved)
      return "";
    progress = true;
  }
}

// Yields to the scheduler until `ready` holds.
template <class F> void waitUntil(F ready) {
  while (!ready())
    swapcontext(&block.fibers[block.current].ctx, &block.main);
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
        block.shared.assign(sharedBytes + 1024, 0xff);
        const auto raw = reinterpret_cast<uintptr_t>(block.shared.data());
        block.sharedBase = block.shared.data() + (1024 - raw % 1024) % 1024;
        block.barriers.clear();
        for (Fiber &f : block.fibers) {
          if (!f.stack)
            f.stack.reset(new char[kStackBytes]);
          f.done = f.atBlockBarrier = f.inWarpBarrier = false;
          f.blockBarriers = f.warpBarriers = f.steps = 0;
          f.open.clear();
          f.groups.clear();
          f.openMma.clear();
          f.mmaGroups.clear();
          getcontext(&f.ctx);
          f.ctx.uc_stack.ss_sp = f.stack.get();
          f.ctx.uc_stack.ss_size = kStackBytes;
          f.ctx.uc_link = nullptr;
          makecontext(&f.ctx, trampoline, 0);
        }
        for (;;) {
          bool progress = false;
          for (unsigned k = 0; k < warps; ++k) {
            const std::string why =
                runWarp(schedule.lastWarpFirst ? warps - 1 - k : k, progress);
            if (!why.empty())
              return why;
          }
          unsigned done = 0, waiting = 0;
          for (const Fiber &f : block.fibers) {
            done += f.done;
            waiting += f.atBlockBarrier;
          }
          if (done == threads)
            break;
          if (done + waiting < threads) {
            if (!progress)
              return "deadlock in block (" + std::to_string(x) + ", " +
                     std::to_string(y) + ", " + std::to_string(z) +
                     "): every running thread waits on an mbarrier";
            continue;
          }
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
  ++self().steps;
  self().atBlockBarrier = true;
  swapcontext(&self().ctx, &block.main);
}

namespace {
// The lanes of this thread's warp exchange what they posted.
void warpBarrier() {
  ++self().warpBarriers;
  ++self().steps;
  self().inWarpBarrier = true;
  swapcontext(&self().ctx, &block.main);
  self().inWarpBarrier = false;
}
} // namespace

unsigned char *sharedMemory() {
  // 1024-byte aligned (the kernel declares 128 and aligns its sm_90a
  // tiles to 1024 itself; an aligned base keeps the emulated shared
  // addresses' swizzle bits those of the offsets).
  return block.sharedBase;
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

int shflInt(int v, int srcLane) {
  std::memcpy(block.slots[block.current].w, &v, 4);
  warpBarrier();
  int r;
  std::memcpy(&r, block.slots[warpBase() + (srcLane & 31)].w, 4);
  warpBarrier();
  return r;
}

// sm_90a.

uint32_t sharedAddress(const void *p) {
  return static_cast<uint32_t>(static_cast<const unsigned char *>(p) -
                               block.sharedBase);
}

namespace {

// The 128-byte swizzle on a shared-memory address (PTX ISA, "Shared
// Memory Matrix Layout"; the TMA's CU_TENSOR_MAP_SWIZZLE_128B): bits 4-6,
// the 16-byte chunk in a 128-byte row, XOR bits 7-9, the row in a 1024-byte
// repeat.
uint32_t swizzle128(uint32_t address) {
  return address ^ (((address >> 7) & 7u) << 4);
}

uint16_t sharedHalf(uint32_t address) {
  uint16_t v;
  std::memcpy(&v, block.sharedBase + swizzle128(address), 2);
  return v;
}

constexpr uint64_t kMapMagic = 0x6d6861676e746d61ull; // what encode writes

struct EmulatedMap {
  uint64_t magic;
  const unsigned char *base;
  uint64_t dims[4], strides[4]; // strides in bytes, strides[0] = 2
  uint32_t box[4];
};
static_assert(sizeof(EmulatedMap) <= 128, "a CUtensorMap is 128 bytes");

void landBox(const PendingBox &b) {
  EmulatedMap m;
  std::memcpy(&m, b.map, sizeof m);
  const uint32_t dst = sharedAddress(b.dst);
  uint32_t offset = 0;
  for (uint32_t i3 = 0; i3 < m.box[3]; ++i3)
    for (uint32_t i2 = 0; i2 < m.box[2]; ++i2)
      for (uint32_t i1 = 0; i1 < m.box[1]; ++i1)
        for (uint32_t i0 = 0; i0 < m.box[0]; ++i0, offset += 2) {
          const long long g[4] = {
              (long long)b.c[0] + i0, (long long)b.c[1] + i1,
              (long long)b.c[2] + i2, (long long)b.c[3] + i3};
          bool inside = true;
          uint64_t at = 0;
          for (int d = 0; d < 4; ++d) {
            inside = inside && g[d] >= 0 && (uint64_t)g[d] < m.dims[d];
            at += (uint64_t)g[d] * m.strides[d];
          }
          uint16_t v = 0;
          if (inside)
            std::memcpy(&v, m.base + at, 2);
          std::memcpy(block.sharedBase + swizzle128(dst + offset), &v, 2);
        }
}

void completeIfDone(Barrier &b) {
  if (b.pending == 0 && b.tx == 0) {
    ++b.phase;
    b.pending = b.count;
  }
}

Barrier &barrierAt(const uint64_t *bar) {
  auto it = block.barriers.find(bar);
  if (it == block.barriers.end()) {
    std::fprintf(stderr, "emulator: an mbarrier used before its init\n");
    std::abort();
  }
  return it->second;
}

uint32_t boxBytes(const void *map) {
  EmulatedMap m;
  std::memcpy(&m, map, sizeof m);
  return 2 * m.box[0] * m.box[1] * m.box[2] * m.box[3];
}

} // namespace

std::string encodeTensorMap(void *map, const void *base, const uint64_t dims[4],
                            const uint64_t strides[3], const uint32_t box[4]) {
  if (reinterpret_cast<uintptr_t>(base) % 16)
    return "the tensor's address is not 16-byte aligned";
  EmulatedMap m{};
  m.magic = kMapMagic;
  m.base = static_cast<const unsigned char *>(base);
  m.strides[0] = 2;
  for (int d = 0; d < 4; ++d) {
    if (dims[d] == 0 || dims[d] > (1ull << 32))
      return "extent " + std::to_string(d) + " out of range";
    if (box[d] == 0 || box[d] > 256)
      return "box extent " + std::to_string(d) + " out of range";
    m.dims[d] = dims[d];
    m.box[d] = box[d];
  }
  for (int d = 0; d < 3; ++d) {
    if (strides[d] % 16 || strides[d] >= (1ull << 40))
      return "stride " + std::to_string(d + 1) +
             " is not a multiple of 16 bytes below 2^40";
    m.strides[d + 1] = strides[d];
  }
  if (box[0] * 2 > 128)
    return "a 128-byte swizzle takes boxes of at most 128 bytes a row";
  std::memset(map, 0, 128);
  std::memcpy(map, &m, sizeof m);
  return "";
}

void tmaLoad4(void *dst, const void *map, uint64_t *bar, const int c[4]) {
  EmulatedMap m;
  std::memcpy(&m, map, sizeof m);
  if (m.magic != kMapMagic || sharedAddress(dst) % 1024) {
    std::fprintf(stderr, "emulator: a TMA load with a bad descriptor or a "
                         "destination not 1024-byte aligned\n");
    std::abort();
  }
  const PendingBox box{dst, map, {c[0], c[1], c[2], c[3]}};
  Barrier &b = barrierAt(bar);
  if (block.schedule.copiesAtIssue) {
    landBox(box);
    b.tx -= boxBytes(map);
    completeIfDone(b);
  } else {
    b.boxes.push_back(box);
  }
}

void mbarrierInit(uint64_t *bar, unsigned count) {
  Barrier &b = block.barriers[bar];
  b = Barrier{};
  b.count = b.pending = count;
}

void mbarrierArrive(uint64_t *bar, unsigned txBytes) {
  Barrier &b = barrierAt(bar);
  b.tx += txBytes;
  if (b.pending == 0) {
    std::fprintf(stderr, "emulator: more arrivals than an mbarrier counts\n");
    std::abort();
  }
  --b.pending;
  completeIfDone(b);
}

void mbarrierWait(uint64_t *bar, unsigned parity) {
  waitUntil([&] {
    Barrier &b = barrierAt(bar);
    // Boxes still on their way land now, the latest they may.
    for (const PendingBox &box : b.boxes) {
      landBox(box);
      b.tx -= boxBytes(box.map);
    }
    b.boxes.clear();
    completeIfDone(b);
    return (b.phase & 1u) != (parity & 1u);
  });
}

namespace {

// Element (row, k) of a K-major operand, or (k, col) of an N-major one,
// from a 128-byte-swizzle descriptor: rows of 128 bytes, groups of 8 rows
// `sbo` apart; N-major panels of 64 elements `lbo` apart.
float descElement(uint64_t desc, int mn, int k, bool nMajor, bool bf16) {
  const uint32_t start = static_cast<uint32_t>(desc & 0x3FFF) << 4;
  const uint32_t lbo = static_cast<uint32_t>((desc >> 16) & 0x3FFF) << 4;
  const uint32_t sbo = static_cast<uint32_t>((desc >> 32) & 0x3FFF) << 4;
  if ((desc >> 62) != 1) {
    std::fprintf(stderr, "emulator: only the 128-byte swizzle is modelled\n");
    std::abort();
  }
  uint32_t a;
  if (!nMajor)
    a = start + (mn / 8) * sbo + (mn % 8) * 128 + k * 2;
  else
    a = start + (mn / 64) * lbo + (k / 8) * sbo + (k % 8) * 128 + (mn % 64) * 2;
  const uint16_t v = sharedHalf(a);
  return bf16 ? mhagen::bf16ToFloat(v) : mhagen::f16ToFloat(v);
}

} // namespace

void wgmma(float *d, int n, uint64_t aDesc, const uint32_t *aRegs,
           uint64_t bDesc, bool transB, bool accumulate, bool bf16) {
  const int l = static_cast<int>(lane());
  const int warpInGroup = static_cast<int>((block.current / 32) % 4);
  // A from registers: this lane's two rows, gathered from the warp now
  // (the registers are read at the issue).
  float aRows[2][16] = {};
  if (aRegs) {
    Slot &s = block.slots[block.current];
    for (int i = 0; i < 4; ++i)
      s.w[i] = aRegs[i];
    warpBarrier();
    for (int h = 0; h < 2; ++h) {
      const int row = l / 4 + 8 * h;
      for (int k = 0; k < 16; ++k) {
        const Slot &sa = block.slots[warpBase() + 4 * (row % 8) + (k % 8) / 2];
        aRows[h][k] = half16(sa.w[(row / 8) + 2 * (k / 8)], k % 2, bf16);
      }
    }
    warpBarrier();
  }
  auto product = [=]() {
    for (int i = 0; i < n / 8; ++i)
      for (int e = 0; e < 4; ++e) {
        const int h = e / 2;
        const int row = 16 * warpInGroup + l / 4 + 8 * h;
        const int col = 8 * i + 2 * (l % 4) + e % 2;
        float acc = accumulate ? d[4 * i + e] : 0.f;
        for (int k = 0; k < 16; ++k) {
          const float x =
              aRegs ? aRows[h][k] : descElement(aDesc, row, k, false, bf16);
          acc += x * descElement(bDesc, col, k, transB, bf16);
        }
        d[4 * i + e] = acc;
      }
  };
  if (block.schedule.copiesAtIssue)
    product();
  else
    self().openMma.push_back(product);
}

void wgmmaCommit() {
  self().mmaGroups.push_back(std::move(self().openMma));
  self().openMma.clear();
}

void wgmmaWait(int newestPending) {
  Fiber &f = self();
  while (static_cast<int>(f.mmaGroups.size()) > newestPending) {
    for (const auto &op : f.mmaGroups.front())
      op();
    f.mmaGroups.pop_front();
  }
}

} // namespace emu
