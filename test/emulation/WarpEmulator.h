// A CPU emulation of the CUDA execution model, enough to run mhagen's
// tensor-core attention kernel (templates/cuda/tensor_core_attention.cuh)
// here: every thread of a block is a fiber, fibers run in turn from one
// barrier to the next, and the warp-wide instructions (mma.sync,
// ldmatrix, shfl) exchange their operands through the barrier and compute
// each lane's result after the PTX ISA's fragment layouts. Warps are not in
// step with each other between __syncthreads (one runs to the next block
// barrier before the next starts, in either order), and cp.async copies
// land at the issue or at the wait (both are legal), so a kernel that reads
// a tile before it waits for it, or that overwrites a tile another warp
// still reads, computes a wrong result in one of the schedules.
//
// The sm_90a kernel (wgmma_attention.cuh) adds what its warp
// specialisation needs: mbarriers (a thread that waits on one yields until
// its phase completes, so the producer and consumer warps run in whatever
// order the barriers allow, and a wait that nothing will complete is
// reported as a deadlock), TMA tile loads (the box, zeros outside the
// tensor, 128-byte swizzled, landing at the issue or at the first wait on
// their barrier), and wgmma (operands decoded from the shared-memory
// descriptors after the PTX ISA's canonical layouts; the products land at
// the issue or at wgmma.wait_group).
//
// Include this file, then the kernel; it defines what the kernel takes
// from CUDA (threadIdx, __syncthreads, __half, ...) and from
// tensor_core_ptx.cuh and wgmma_ptx.cuh (Mma, ldmatrix4, copy16,
// sharedMemory, WgmmaSS, tmaLoad4, mbarrierWait, ...).
#ifndef MHAGEN_TEST_WARPEMULATOR_H
#define MHAGEN_TEST_WARPEMULATOR_H

#include "mhagen/reference/Numerics.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>

#define __device__
#define __host__
#define __forceinline__ inline

namespace emu {

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};

/// One legal interleaving: when cp.async copies, TMA loads and wgmma
/// products land, and which warp runs first from one __syncthreads to the
/// next.
struct Schedule {
  bool copiesAtIssue = false; ///< false: at the wait that needs them
  bool lastWarpFirst = false;
  std::string str() const;
};

/// Runs `body` once per thread of every block of `grid` (blocks one after
/// the other); returns "" or why the kernel broke the model (lanes of a
/// warp, or threads of a block, that reach different barriers).
std::string launch(Dim3 grid, unsigned threads, size_t sharedBytes,
                   const Schedule &schedule, const std::function<void()> &body);

// What the kernel sees.
extern Dim3 threadIdx, blockIdx, blockDim, gridDim;
void syncthreads();
unsigned char *sharedMemory();
float shflXor(float v, int laneMask);
void ldmatrix(uint32_t (&r)[4], const void *p, bool trans);
/// D += A B for one m16n8k16 tile; `bf16` selects the operand type.
void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
         bool bf16);
void copy16(void *dst, const void *src, bool valid);
void commitCopies();
void waitCopies(int newestPending);
int shflInt(int v, int srcLane);

// sm_90a.
uint32_t sharedAddress(const void *p);
/// What cuTensorMapEncodeTiled encodes for the emulator (16-bit elements,
/// 128-byte swizzle, zeros outside): "" or why the driver would refuse it.
std::string encodeTensorMap(void *map, const void *base, const uint64_t dims[4],
                            const uint64_t strides[3], const uint32_t box[4]);
void tmaLoad4(void *dst, const void *map, uint64_t *bar, const int c[4]);
void mbarrierInit(uint64_t *bar, unsigned count);
void mbarrierArrive(uint64_t *bar, unsigned txBytes);
void mbarrierWait(uint64_t *bar, unsigned parity);
/// D (m64 x n) = A B + (accumulate ? D : 0) for this thread's fragment of
/// the warpgroup; A from a descriptor, or (aRegs non-null) from the warp's
/// registers; B K-major, or N-major when transB.
void wgmma(float *d, int n, uint64_t aDesc, const uint32_t *aRegs,
           uint64_t bDesc, bool transB, bool accumulate, bool bf16);
void wgmmaCommit();
void wgmmaWait(int newestPending);

} // namespace emu

using emu::blockDim;
using emu::blockIdx;
using emu::gridDim;
using emu::threadIdx;

inline void __syncthreads() { emu::syncthreads(); }
inline float __shfl_xor_sync(unsigned, float v, int m) {
  return emu::shflXor(v, m);
}
inline int __shfl_sync(unsigned, int v, int srcLane) {
  return emu::shflInt(v, srcLane);
}
struct uint4 {
  unsigned x, y, z, w;
};
inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, sizeof f);
  return f;
}
struct float2 {
  float x, y;
};
inline float2 make_float2(float x, float y) { return {x, y}; }

struct __half {
  uint16_t bits = 0;
  __half() = default;
  __half(float f) : bits(mhagen::floatToF16(f)) {}
  operator float() const { return mhagen::f16ToFloat(bits); }
};
struct __nv_bfloat16 {
  uint16_t bits = 0;
  __nv_bfloat16() = default;
  __nv_bfloat16(float f) : bits(mhagen::floatToBf16(f)) {}
  operator float() const { return mhagen::bf16ToFloat(bits); }
};

namespace mh_tc {

inline unsigned char *sharedMemory() { return emu::sharedMemory(); }

template <class T> struct Mma {
  static uint32_t pack(float a, float b) {
    return uint32_t(T(a).bits) | uint32_t(T(b).bits) << 16;
  }
  static void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                  uint32_t b1) {
    emu::mma(d, a, b0, b1, std::is_same<T, __nv_bfloat16>::value);
  }
};

inline void copy16(void *dst, const void *src, bool valid) {
  emu::copy16(dst, src, valid);
}
inline void commitCopies() { emu::commitCopies(); }
template <int N> inline void waitCopies() { emu::waitCopies(N); }
inline void ldmatrix4(uint32_t (&r)[4], const void *p) {
  emu::ldmatrix(r, p, false);
}
inline void ldmatrix4Trans(uint32_t (&r)[4], const void *p) {
  emu::ldmatrix(r, p, true);
}

// sm_90a (wgmma_ptx.cuh).
inline uint32_t sharedAddress(const void *p) { return emu::sharedAddress(p); }
template <class T, int N> struct WgmmaSS {
  static void run(float (&d)[N / 2], uint64_t a, uint64_t b, int accumulate) {
    emu::wgmma(d, N, a, nullptr, b, false, accumulate != 0,
               std::is_same<T, __nv_bfloat16>::value);
  }
};
template <class T, int N> struct WgmmaRS {
  static void run(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b,
                  int accumulate) {
    emu::wgmma(d, N, 0, a, b, true, accumulate != 0,
               std::is_same<T, __nv_bfloat16>::value);
  }
};
inline void wgmmaFence() {}
inline void wgmmaCommit() { emu::wgmmaCommit(); }
template <int N> inline void wgmmaWait() { emu::wgmmaWait(N); }
inline void mbarrierInit(uint64_t *bar, unsigned count) {
  emu::mbarrierInit(bar, count);
}
inline void mbarrierInitFence() {}
inline void mbarrierArrive(uint64_t *bar) { emu::mbarrierArrive(bar, 0); }
inline void mbarrierArriveExpect(uint64_t *bar, unsigned bytes) {
  emu::mbarrierArrive(bar, bytes);
}
inline void mbarrierWait(uint64_t *bar, unsigned parity) {
  emu::mbarrierWait(bar, parity);
}
inline void tmaLoad4(void *dst, const void *map, uint64_t *bar, int c0, int c1,
                     int c2, int c3) {
  const int c[4] = {c0, c1, c2, c3};
  emu::tmaLoad4(dst, map, bar, c);
}
inline void fenceProxyAsync() {}
template <int N, bool GROW> inline void setMaxRegisters() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg's range");
}
inline void copy16Sync(void *dst, const void *src, bool valid) {
  if (valid)
    std::memcpy(dst, src, 16);
  else
    std::memset(dst, 0, 16);
}

} // namespace mh_tc

#endif
