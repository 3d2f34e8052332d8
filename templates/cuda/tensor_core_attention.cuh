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

/* What one block computes: its packed query rows, its K/V head and
 * sequence, and the key tiles it scans (one slice of them when the call
 * splits the keys). */
struct BlockWork {
  int split, kvHead, b;
  long long row0; /* first packed row of the block */
  long long rows; /* packed rows of the call: T_q * group */
  /* Positions and key counts fit 32 bits (T_q and T_kv are int32); 32-bit
   * mask arithmetic keeps dk 256's registers within 255 (with 64-bit
   * positions its sm_90 SASS spills). */
  int offset; /* T_kv - T_q: a row's position is token + offset */
  int len;    /* padding: the sequence's keys; else T_kv */
  int keys;   /* K/V rows worth loading: min(len, T_kv) */
  int pFirst, pLast;
  TileRange tiles;
};

template <class S>
__device__ __forceinline__ BlockWork blockWork(const Params &p) {
  constexpr Mask MASK = {S::CAUSAL, S::WINDOW, S::PADDING};
  BlockWork w;
  w.split = blockIdx.x % p.splits;
  // The last row blocks first: under a causal mask they scan the most key
  // tiles, and the short ones then fill the tail of the grid.
  const int rowBlocks = gridDim.x / p.splits;
  w.row0 = (long long)(rowBlocks - 1 - (int)(blockIdx.x / p.splits)) * S::BM;
  w.kvHead = blockIdx.y;
  w.b = blockIdx.z;
  w.rows = (long long)p.tq * S::GROUP;
  const long long lastRow =
      (w.row0 + S::BM < w.rows ? w.row0 + S::BM : w.rows) - 1;
  w.offset = p.tkv - p.tq;
  w.len = MASK.padding ? p.kv_lens[w.b] : p.tkv;
  w.keys = w.len < p.tkv ? w.len : p.tkv;
  w.pFirst = (int)(w.row0 / S::GROUP) + w.offset;
  w.pLast = (int)(lastRow / S::GROUP) + w.offset;
  w.tiles = keyTiles(MASK, w.pFirst, w.pLast, p.tkv, w.len, S::BN);
  if (p.splits > 1) {
    const long long n = w.tiles.hi - w.tiles.lo + 1;
    const long long per = n > 0 ? (n + p.splits - 1) / p.splits : 0;
    w.tiles.lo += w.split * per;
    if (w.tiles.lo + per - 1 < w.tiles.hi)
      w.tiles.hi = w.tiles.lo + per - 1;
  }
  return w;
}

/* The block's Q tile in 16-byte chunks, `threads` threads striding over
 * them: `put(r, ch, src, ok)` stores chunk ch (8 channels) of packed row r
 * from `src`, or zeros when the row is past the call (ok false). */
template <class S, class Put>
__device__ __forceinline__ void
forQueryChunks(const Params &p, const BlockWork &w, int threads, Put put) {
  using T = typename S::T;
  constexpr int D = S::DK;
  const T *qBase = static_cast<const T *>(p.q) + w.b * p.q_bs;
  for (int c = threadIdx.x; c < S::BM * (D / 8); c += threads) {
    const int r = c / (D / 8), ch = c % (D / 8);
    const bool ok = w.row0 + r < w.rows;
    const T *src = qBase;
    if (ok) {
      const QueryRow qr = queryRow(w.row0 + r, S::GROUP, w.kvHead);
      src = qBase + qr.token * p.q_ts + qr.head * D + ch * 8;
    }
    put(r, ch, src, ok);
  }
}

/* A thread's two rows in the m16n8k16 accumulator layout: row `r0 +
 * lane / 4 + 8 h` of the block, whether it is a row of the call, and its
 * position. */
struct LaneRows {
  int pos[2];
  bool live[2];
};
template <class S>
__device__ __forceinline__ LaneRows laneRows(const BlockWork &w, int r0,
                                             int lane) {
  LaneRows r;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const long long row = w.row0 + r0 + (lane >> 2) + 8 * h;
    r.live[h] = row < w.rows;
    r.pos[h] = (int)(row / S::GROUP) + w.offset;
  }
  return r;
}

/* One key tile's scores `s` (the tile's BN keys from j0, accumulator
 * layout) become P: the mask, then the online softmax in log2 units (the
 * row's maximum over the quad of lanes that share it, the rescale of o and
 * l, then P = 2^(s scale - m)). */
template <class S>
__device__ __forceinline__ void
softmaxTile(float (&s)[S::BN / 8][4], float (&o)[S::DK / 8][4], float (&m)[2],
            float (&l)[2], const BlockWork &w, const LaneRows &r, long long j0,
            const Params &p, int lane) {
  constexpr Mask MASK = {S::CAUSAL, S::WINDOW, S::PADDING};
  const float ninf = __int_as_float(0xff800000);
  if (!tileWhole(MASK, w.pFirst, w.pLast, j0, S::BN, p.tkv, w.len)) {
#pragma unroll
    for (int i = 0; i < S::BN / 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e >> 1;
        const int j = (int)j0 + i * 8 + fragCCol(lane, e);
        if (!r.live[h] || !visible(MASK, r.pos[h], j, p.tkv, w.len))
          s[i][e] = ninf;
      }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = ninf;
#pragma unroll
    for (int i = 0; i < S::BN / 8; ++i)
      mx = fmaxf(mx, fmaxf(s[i][2 * h], s[i][2 * h + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float mNew = fmaxf(m[h], mx * S::SCALE_LOG2);
    const float base = mNew == ninf ? 0.f : mNew;
    const float alpha = exp2f(m[h] - base);
    m[h] = mNew;
    l[h] *= alpha;
#pragma unroll
    for (int i = 0; i < S::DK / 8; ++i) {
      o[i][2 * h] *= alpha;
      o[i][2 * h + 1] *= alpha;
    }
#pragma unroll
    for (int i = 0; i < S::BN / 8; ++i)
#pragma unroll
      for (int e = 2 * h; e < 2 * h + 2; ++e) {
        s[i][e] = exp2f(fmaf(s[i][e], S::SCALE_LOG2, -base));
        l[h] += s[i][e];
      }
  }
}

/* A thread's rows before the first key: O = 0, l = 0, m = -inf. */
template <class S>
__device__ __forceinline__ void startRows(float (&o)[S::DK / 8][4],
                                          float (&m)[2], float (&l)[2]) {
#pragma unroll
  for (int i = 0; i < S::DK / 8; ++i)
    o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  m[0] = m[1] = __int_as_float(0xff800000);
  l[0] = l[1] = 0.f;
}

/* The A fragment of k16 step kk of P V: the accumulators of two key n8
 * tiles (the lane layouts coincide). */
template <class S>
__device__ __forceinline__ void
pFragment(uint32_t (&a)[4], const float (&s)[S::BN / 8][4], int kk) {
  using T = typename S::T;
  a[0] = Mma<T>::pack(s[2 * kk][0], s[2 * kk][1]);
  a[1] = Mma<T>::pack(s[2 * kk][2], s[2 * kk][3]);
  a[2] = Mma<T>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
  a[3] = Mma<T>::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

/* The rows: divide by the sum (a row that saw no key writes zeros and a
 * log-sum-exp of -inf), or hand the slice to combineSplits. */
template <class S>
__device__ __forceinline__ void
finishRows(float (&o)[S::DK / 8][4], float (&m)[2], float (&l)[2],
           const BlockWork &w, int r0, const Params &p, int lane) {
  using T = typename S::T;
  constexpr int D = S::DK;
  const float ninf = __int_as_float(0xff800000);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    const long long row = w.row0 + r0 + (lane >> 2) + 8 * h;
    if (row >= w.rows)
      continue;
    const QueryRow qr = queryRow(row, S::GROUP, w.kvHead);
    const float inv = l[h] > 0.f ? 1.f / l[h] : 0.f;
    const float lse2 = l[h] > 0.f ? m[h] + log2f(l[h]) : ninf;
    if (p.splits > 1) {
      const long long slot =
          ((((long long)w.b * S::HEADS + qr.head) * p.tq + qr.token) *
               p.splits +
           w.split);
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
    T *dst = static_cast<T *>(p.out) + w.b * p.o_bs + qr.token * p.o_ts +
             qr.head * D;
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      const int c = i * 8 + 2 * (lane & 3);
      *reinterpret_cast<uint32_t *>(dst + c) =
          Mma<T>::pack(o[i][2 * h] * inv, o[i][2 * h + 1] * inv);
    }
    if (S::LSE && p.lse && (lane & 3) == 0)
      p.lse[((long long)w.b * p.tq + qr.token) * S::HEADS + qr.head] =
          lse2 * 0.69314718055994531f;
  }
}

template <class S> __device__ __forceinline__ void attention(const Params &p) {
  using T = typename S::T;
  constexpr int D = S::DK, BM = S::BM, BN = S::BN;
  unsigned char *smem = sharedMemory();
  T *sQ = reinterpret_cast<T *>(smem);
  T *sK = sQ + BM * D;
  T *sV = sK + BN * D;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const BlockWork w = blockWork<S>(p);
  const TileRange tiles = w.tiles;
  const T *kBase = static_cast<const T *>(p.k) + w.b * p.k_bs + w.kvHead * D;
  const T *vBase = static_cast<const T *>(p.v) + w.b * p.v_bs + w.kvHead * D;

  forQueryChunks<S>(p, w, S::WARPS * 32,
                    [&](int r, int ch, const T *src, bool ok) {
                      copy16(sQ + swizzled(r, ch * 8, D), src, ok);
                    });
  if (tiles.lo <= tiles.hi)
    loadTile<S, BN>(sK, kBase + tiles.lo * BN * p.k_ts, p.k_ts,
                    w.keys - tiles.lo * BN);
  commitCopies();

  float o[D / 8][4], m[2], l[2];
  startRows<S>(o, m, l);
  // Up to dk 128 the warp's Q fragments stay in registers (dk / 4 of
  // them); dk 256 reads them from shared memory at each step, as its
  // accumulators leave no room.
  constexpr bool Q_IN_REGISTERS = D <= 128;
  uint32_t qf[Q_IN_REGISTERS ? D / 16 : 1][4];
  const LaneRows rows = laneRows<S>(w, warp * 16, lane);

  for (long long t = tiles.lo; t <= tiles.hi; ++t) {
    const long long j0 = t * BN;
    loadTile<S, BN>(sV, vBase + j0 * p.v_ts, p.v_ts, w.keys - j0);
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
      loadTile<S, BN>(sK, kBase + (j0 + BN) * p.k_ts, p.k_ts, w.keys - j0 - BN);
    commitCopies();

    softmaxTile<S>(s, o, m, l, w, rows, j0, p, lane);

    waitCopies<1>(); /* this V tile */
    __syncthreads();
    /* O += P V. */
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32_t a[4];
      pFragment<S>(a, s, kk);
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
  finishRows<S>(o, m, l, w, warp * 16, p, lane);
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
