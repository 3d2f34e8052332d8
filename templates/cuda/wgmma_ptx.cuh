/* The sm_90a PTX the warp-specialised kernel (wgmma_attention.cuh) is
 * built from, one wrapper per instruction: wgmma.mma_async (both operands
 * from shared memory, or A from registers) with its fence and groups, the
 * mbarrier operations, the TMA tile load, and the proxy fences between
 * them. test/emulation defines the same functions for the CPU. */
#ifndef MHAGEN_WGMMA_PTX_CUH
#define MHAGEN_WGMMA_PTX_CUH

#include "tensor_core_ptx.cuh"

namespace mh_tc {

/* D (m64 x N, f32) = A (m64 x k16) B (k16 x N) + (accumulate ? D : 0):
 * A and B from shared memory through descriptors (wgmmaDescriptor), both
 * K-major. */
template <class T, int N> struct WgmmaSS;
/* The same with A from registers (the m16n8k16 A fragment of each warp's
 * 16 rows) and B N-major (transposed). */
template <class T, int N> struct WgmmaRS;

/* The instructions, one specialisation per element type (PT: its PTX
 * name) and shape. */
// clang-format off
#define MH_WGMMA_SS32(CT, PT)                                                  \
  template <> struct WgmmaSS<CT, 32> {                                         \
    static __device__ __forceinline__ void                                     \
    run(float (&d)[16], uint64_t a, uint64_t b, int accumulate) {              \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"                \
                   "wgmma.mma_async.sync.aligned.m64n32k16.f32." PT "." PT " {"\
                   "%0, %1, %2, %3, %4, %5, %6, %7,"                           \
                   "%8, %9, %10, %11, %12, %13, %14, %15"                      \
                   "}, %16, %17, p, 1, 1, 0, 0;\n}\n"                          \
                   : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]),           \
                     "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),           \
                     "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),         \
                     "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])        \
                   : "l"(a), "l"(b), "r"(accumulate));                         \
    }                                                                          \
  };

// The 32 accumulators of an n64 product: their operand names and their
// read-write constraints.
#define MH_WGMMA_D32                                                           \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "     \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "     \
  "%30, %31"
#define MH_WGMMA_D32_OUT                                                       \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),      \
      "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]),             \
      "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),         \
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),         \
      "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),         \
      "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),         \
      "+f"(d[31])

#define MH_WGMMA_SS64(CT, PT)                                                  \
  template <> struct WgmmaSS<CT, 64> {                                         \
    static __device__ __forceinline__ void                                     \
    run(float (&d)[32], uint64_t a, uint64_t b, int accumulate) {              \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                \
                   "wgmma.mma_async.sync.aligned.m64n64k16.f32." PT "." PT " {"\
                   MH_WGMMA_D32                                                \
                   "}, %32, %33, p, 1, 1, 0, 0;\n}\n"                          \
                   : MH_WGMMA_D32_OUT                                          \
                   : "l"(a), "l"(b), "r"(accumulate));                         \
    }                                                                          \
  };

#define MH_WGMMA_RS64(CT, PT)                                                  \
  template <> struct WgmmaRS<CT, 64> {                                         \
    static __device__ __forceinline__ void                                     \
    run(float (&d)[32], const uint32_t (&a)[4], uint64_t b, int accumulate) {  \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                \
                   "wgmma.mma_async.sync.aligned.m64n64k16.f32." PT "." PT " {"\
                   MH_WGMMA_D32                                                \
                   "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"            \
                   : MH_WGMMA_D32_OUT                                          \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b),       \
                     "r"(accumulate));                                         \
    }                                                                          \
  };
// clang-format on

MH_WGMMA_SS32(__half, "f16")
MH_WGMMA_SS64(__half, "f16")
MH_WGMMA_RS64(__half, "f16")
MH_WGMMA_SS32(__nv_bfloat16, "bf16")
MH_WGMMA_SS64(__nv_bfloat16, "bf16")
MH_WGMMA_RS64(__nv_bfloat16, "bf16")
#undef MH_WGMMA_SS32
#undef MH_WGMMA_SS64
#undef MH_WGMMA_RS64
#undef MH_WGMMA_D32
#undef MH_WGMMA_D32_OUT

__device__ __forceinline__ void wgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void wgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void mbarrierInit(uint64_t *bar, unsigned count) {
  asm volatile(
      "mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(sharedAddress(bar)),
      "r"(count)
      : "memory");
}
/* Makes the initialised barriers visible to the async proxy (TMA). */
__device__ __forceinline__ void mbarrierInitFence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbarrierArrive(uint64_t *bar) {
  asm volatile(
      "mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(sharedAddress(bar))
      : "memory");
}
/* Arrives and adds `bytes` to the transactions the phase waits for. */
__device__ __forceinline__ void mbarrierArriveExpect(uint64_t *bar,
                                                     unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                   sharedAddress(bar)),
               "r"(bytes)
               : "memory");
}
/* Waits until the phase of parity `parity` has completed. */
__device__ __forceinline__ void mbarrierWait(uint64_t *bar, unsigned parity) {
  uint32_t done = 0;
  do {
    asm volatile("{\n.reg .pred p;\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(sharedAddress(bar)), "r"(parity)
                 : "memory");
  } while (!done);
}

/* One box of a 4-d tensor map into shared memory; the bytes count toward
 * `bar`'s transactions. Coordinates are in elements, innermost first. */
__device__ __forceinline__ void tmaLoad4(void *dst, const void *map,
                                         uint64_t *bar, int c0, int c1, int c2,
                                         int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::"
      "bytes [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(sharedAddress(dst)),
      "l"(map), "r"(sharedAddress(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

/* Orders this thread's generic-proxy shared-memory writes before later
 * async-proxy reads (wgmma, TMA). */
__device__ __forceinline__ void fenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* Gives registers back to the SM (grow = false) or takes them, for every
 * thread of the warpgroup. */
template <int N, bool GROW> __device__ __forceinline__ void setMaxRegisters() {
  if constexpr (GROW)
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
  else
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

/* A 16-byte global load and shared store (the Q tile). */
__device__ __forceinline__ void copy16Sync(void *dst, const void *src,
                                           bool valid) {
  uint4 v = make_uint4(0, 0, 0, 0);
  if (valid)
    v = *static_cast<const uint4 *>(src);
  *static_cast<uint4 *>(dst) = v;
}

} // namespace mh_tc

#endif
