/* mhagen's tensor-core attention kernel for sm_80 and later (FlashAttention
 * 2's algorithm): f16/bf16 in, f32 accumulation, mma.sync m16n8k16 fed by
 * ldmatrix from swizzled shared memory, K/V tiles loaded with cp.async one
 * tile ahead. The generator writes a translation unit that defines `Spec`
 * (the spec's constants) and the two entry points, `mhagen_attention`
 * (calls attention<Spec>) and `mhagen_combine` (combineSplits<Spec>);
 * nvcc compiles it ahead of time.
 *
 * A block holds BM packed query rows of one K/V head (all heads of its
 * group: tensor_core_tiles.h, queryRow) and scans the key tiles its mask
 * leaves (keyTiles), or one slice of them when the call splits the keys
 * (decode: too few blocks for the SMs); the slices' rows are merged by
 * their log-sum-exp in combineSplits. Each warp owns 16 rows. */
#include <stdint.h>

#include "tensor_core_params.h"
#include "tensor_core_tiles.h"
/* The PTX primitives (mma.sync, ldmatrix, cp.async, shared memory). The
 * CPU emulation of the kernel (test/emulation) defines the same names
 * before it includes this file. */
#ifdef __CUDACC__
#include "tensor_core_ptx.cuh"
#endif

namespace mh_tc {

typedef mh_tc_params Params;

/* Rows [0, rows) of a tile of `D` channels from rows of a tensor starting
 * at `base` (`stride` elements apart), zeros from row `valid` on. */
template <class S, int ROWS>
__device__ __forceinline__ void loadTile(typename S::T *tile,
                                         const typename S::T *base,
                                         long long stride, long long valid) {
  constexpr int CHUNKS = S::DK / 8;
  for (int c = threadIdx.x; c < ROWS * CHUNKS; c += S::WARPS * 32) {
    const int r = c / CHUNKS, ch = c % CHUNKS;
    const bool ok = r < valid;
    const typename S::T *src = ok ? base + r * stride + ch * 8 : base;
    copy16(tile + swizzled(r, ch * 8, S::DK), src, ok);
  }
}

template <class S> __device__ __forceinline__ void attention(const Params &p) {
  using T = typename S::T;
  constexpr int D = S::DK, BM = S::BM, BN = S::BN, G = S::GROUP;
  constexpr Mask MASK = {S::CAUSAL, S::WINDOW, S::PADDING};
  const float ninf = __int_as_float(0xff800000);
  unsigned char *smem = sharedMemory();
  T *sQ = reinterpret_cast<T *>(smem);
  T *sK = sQ + BM * D;
  T *sV = sK + BN * D;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int split = blockIdx.x % p.splits;
  // The last row blocks first: under a causal mask they scan the most key
  // tiles, and the short ones then fill the tail of the grid.
  const int rowBlocks = gridDim.x / p.splits;
  const long long row0 =
      (long long)(rowBlocks - 1 - (int)(blockIdx.x / p.splits)) * BM;
  const int kvHead = blockIdx.y, b = blockIdx.z;
  const long long rows = (long long)p.tq * G;
  const long long lastRow = (row0 + BM < rows ? row0 + BM : rows) - 1;
  const long long offset = (long long)p.tkv - p.tq;
  const long long len = MASK.padding ? (long long)p.kv_lens[b] : p.tkv;
  const long long keys = len < p.tkv ? len : p.tkv; /* rows worth loading */
  const long long pFirst = row0 / G + offset, pLast = lastRow / G + offset;
  TileRange tiles = keyTiles(MASK, pFirst, pLast, p.tkv, len, BN);
  if (p.splits > 1) {
    const long long n = tiles.hi - tiles.lo + 1;
    const long long per = n > 0 ? (n + p.splits - 1) / p.splits : 0;
    tiles.lo += split * per;
    if (tiles.lo + per - 1 < tiles.hi)
      tiles.hi = tiles.lo + per - 1;
  }

  const T *qBase = static_cast<const T *>(p.q) + b * p.q_bs;
  const T *kBase = static_cast<const T *>(p.k) + b * p.k_bs + kvHead * D;
  const T *vBase = static_cast<const T *>(p.v) + b * p.v_bs + kvHead * D;

  /* Q: one row per packed (token, head); rows past the call are zeros. */
  for (int c = threadIdx.x; c < BM * (D / 8); c += S::WARPS * 32) {
    const int r = c / (D / 8), ch = c % (D / 8);
    const bool ok = row0 + r < rows;
    const T *src = qBase;
    if (ok) {
      const QueryRow qr = queryRow(row0 + r, G, kvHead);
      src = qBase + qr.token * p.q_ts + qr.head * D + ch * 8;
    }
    copy16(sQ + swizzled(r, ch * 8, D), src, ok);
  }
  if (tiles.lo <= tiles.hi)
    loadTile<S, BN>(sK, kBase + tiles.lo * BN * p.k_ts, p.k_ts,
                    keys - tiles.lo * BN);
  commitCopies();

  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i)
    o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m[2] = {ninf, ninf}, l[2] = {0.f, 0.f};
  // Up to dk 128 the warp's Q fragments stay in registers (dk / 4 of
  // them); dk 256 reads them from shared memory at each step, as its
  // accumulators leave no room.
  constexpr bool Q_IN_REGISTERS = D <= 128;
  uint32_t qf[Q_IN_REGISTERS ? D / 16 : 1][4];
  /* This lane's two rows: packed rows of the block, their positions. */
  long long myPos[2];
  bool myRow[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const long long r = row0 + warp * 16 + (lane >> 2) + 8 * h;
    myRow[h] = r < rows;
    myPos[h] = r / G + offset;
  }

  for (long long t = tiles.lo; t <= tiles.hi; ++t) {
    const long long j0 = t * BN;
    loadTile<S, BN>(sV, vBase + j0 * p.v_ts, p.v_ts, keys - j0);
    commitCopies();
    waitCopies<1>(); /* Q and this K tile */
    __syncthreads();
    if (Q_IN_REGISTERS && t == tiles.lo) {
#pragma unroll
      for (int kk = 0; kk < (Q_IN_REGISTERS ? D / 16 : 0); ++kk)
        ldmatrix4(qf[kk], sQ + swizzled(warp * 16 + ldmARow(lane),
                                        kk * 16 + ldmACol(lane), D));
    }

    /* S = Q K^T for this warp's 16 rows and the tile's BN keys. */
    float s[BN / 8][4];
#pragma unroll
    for (int i = 0; i < BN / 8; ++i)
      s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4];
      if constexpr (Q_IN_REGISTERS) {
        for (int i = 0; i < 4; ++i)
          a[i] = qf[kk < D / 16 ? kk : 0][i];
      } else {
        ldmatrix4(a, sQ + swizzled(warp * 16 + ldmARow(lane),
                                   kk * 16 + ldmACol(lane), D));
      }
#pragma unroll
      for (int nn = 0; nn < BN / 16; ++nn) {
        uint32_t bk[4];
        ldmatrix4(bk, sK + swizzled(nn * 16 + ldmKRow(lane),
                                    kk * 16 + ldmKCol(lane), D));
        Mma<T>::run(s[2 * nn], a, bk[0], bk[1]);
        Mma<T>::run(s[2 * nn + 1], a, bk[2], bk[3]);
      }
    }
    __syncthreads(); /* every warp is done with this K tile */
    if (t < tiles.hi)
      loadTile<S, BN>(sK, kBase + (j0 + BN) * p.k_ts, p.k_ts, keys - j0 - BN);
    commitCopies();

    if (!tileWhole(MASK, pFirst, pLast, j0, BN, p.tkv, len)) {
#pragma unroll
      for (int i = 0; i < BN / 8; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int h = e >> 1;
          const long long j = j0 + i * 8 + fragCCol(lane, e);
          if (!myRow[h] || !visible(MASK, myPos[h], j, p.tkv, len))
            s[i][e] = ninf;
        }
    }

    /* Online softmax in log2 units: the row's maximum over the quad of
     * lanes that share it, the rescale of what came before, then P. */
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = ninf;
#pragma unroll
      for (int i = 0; i < BN / 8; ++i)
        mx = fmaxf(mx, fmaxf(s[i][2 * h], s[i][2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float mNew = fmaxf(m[h], mx * S::SCALE_LOG2);
      const float base = mNew == ninf ? 0.f : mNew;
      const float alpha = exp2f(m[h] - base);
      m[h] = mNew;
      l[h] *= alpha;
#pragma unroll
      for (int i = 0; i < D / 8; ++i) {
        o[i][2 * h] *= alpha;
        o[i][2 * h + 1] *= alpha;
      }
#pragma unroll
      for (int i = 0; i < BN / 8; ++i)
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e) {
          s[i][e] = exp2f(fmaf(s[i][e], S::SCALE_LOG2, -base));
          l[h] += s[i][e];
        }
    }

    waitCopies<1>(); /* this V tile */
    __syncthreads();
    /* O += P V: the C fragments of two key n8 tiles are the A fragment of
     * one k16 step (the lane layouts coincide). */
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      const uint32_t a[4] = {Mma<T>::pack(s[2 * kk][0], s[2 * kk][1]),
                             Mma<T>::pack(s[2 * kk][2], s[2 * kk][3]),
                             Mma<T>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             Mma<T>::pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int nn = 0; nn < D / 16; ++nn) {
        uint32_t bv[4];
        ldmatrix4Trans(bv, sV + swizzled(kk * 16 + ldmVRow(lane),
                                         nn * 16 + ldmVCol(lane), D));
        Mma<T>::run(o[2 * nn], a, bv[0], bv[1]);
        Mma<T>::run(o[2 * nn + 1], a, bv[2], bv[3]);
      }
    }
    __syncthreads(); /* every warp is done with this V tile */
  }
  waitCopies<0>();

  /* The rows: divide by the sum (a row that saw no key writes zeros and a
   * log-sum-exp of -inf), or hand the slice to combineSplits. */
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    if (!myRow[h])
      continue;
    const QueryRow qr =
        queryRow(row0 + warp * 16 + (lane >> 2) + 8 * h, G, kvHead);
    const float inv = l[h] > 0.f ? 1.f / l[h] : 0.f;
    const float lse2 = l[h] > 0.f ? m[h] + log2f(l[h]) : ninf;
    if (p.splits > 1) {
      const long long slot =
          ((((long long)b * S::HEADS + qr.head) * p.tq + qr.token) * p.splits +
           split);
      float *dst = p.part_o + slot * D;
#pragma unroll
      for (int i = 0; i < D / 8; ++i) {
        const int c = i * 8 + 2 * (lane & 3);
        *reinterpret_cast<float2 *>(dst + c) =
            make_float2(o[i][2 * h] * inv, o[i][2 * h + 1] * inv);
      }
      if ((lane & 3) == 0)
        p.part_lse[slot] = lse2;
      continue;
    }
    T *dst =
        static_cast<T *>(p.out) + b * p.o_bs + qr.token * p.o_ts + qr.head * D;
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      const int c = i * 8 + 2 * (lane & 3);
      *reinterpret_cast<uint32_t *>(dst + c) =
          Mma<T>::pack(o[i][2 * h] * inv, o[i][2 * h + 1] * inv);
    }
    if (S::LSE && p.lse && (lane & 3) == 0)
      p.lse[((long long)b * p.tq + qr.token) * S::HEADS + qr.head] =
          lse2 * 0.69314718055994531f;
  }
}

/* Merges the key slices of each row: out = sum_s w_s o_s with w_s =
 * 2^(lse_s - lse), lse = log2 sum_s 2^lse_s. One block per (b, head,
 * token), one thread per channel. */
template <class S>
__device__ __forceinline__ void combineSplits(const Params &p) {
  using T = typename S::T;
  const long long row = blockIdx.x; /* (b * HEADS + head) * tq + token */
  const int token = (int)(row % p.tq);
  const int head = (int)((row / p.tq) % S::HEADS);
  const int b = (int)(row / ((long long)p.tq * S::HEADS));
  const float ninf = __int_as_float(0xff800000);
  const float *lse = p.part_lse + row * p.splits;
  float mx = ninf;
  for (int s = 0; s < p.splits; ++s)
    mx = fmaxf(mx, lse[s]);
  float sum = 0.f;
  if (mx != ninf)
    for (int s = 0; s < p.splits; ++s)
      sum += exp2f(lse[s] - mx);
  const float total = sum > 0.f ? mx + log2f(sum) : ninf;
  for (int c = threadIdx.x; c < S::DK; c += blockDim.x) {
    float acc = 0.f;
    if (sum > 0.f)
      for (int s = 0; s < p.splits; ++s)
        acc +=
            exp2f(lse[s] - total) * p.part_o[(row * p.splits + s) * S::DK + c];
    T *dst =
        static_cast<T *>(p.out) + b * p.o_bs + token * p.o_ts + head * S::DK;
    dst[c] = static_cast<T>(acc);
  }
  if (S::LSE && p.lse && threadIdx.x == 0)
    p.lse[((long long)b * p.tq + token) * S::HEADS + head] =
        total * 0.69314718055994531f;
}

} // namespace mh_tc
