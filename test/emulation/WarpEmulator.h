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
// Include this file, then the kernel; it defines what the kernel takes
// from CUDA (threadIdx, __syncthreads, __half, ...) and from
// tensor_core_ptx.cuh (Mma, ldmatrix4, copy16, sharedMemory, ...).
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

/// One legal interleaving: when cp.async copies land, and which warp runs
/// first from one __syncthreads to the next.
struct Schedule {
  bool copiesAtIssue = false; ///< false: at cp.async.wait_group
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

} // namespace emu

using emu::blockDim;
using emu::blockIdx;
using emu::gridDim;
using emu::threadIdx;

inline void __syncthreads() { emu::syncthreads(); }
inline float __shfl_xor_sync(unsigned, float v, int m) {
  return emu::shflXor(v, m);
}
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

} // namespace mh_tc

#endif
