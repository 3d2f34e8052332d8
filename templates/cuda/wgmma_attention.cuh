/* mhagen's attention kernel for sm_90a (FlashAttention 3's structure):
 * warp-specialised, with one producer warp that loads K/V tiles by TMA
 * into a ring of STAGES shared-memory stages, and one or two consumer
 * warpgroups of 64 query rows that compute S = Q K^T with wgmma (both
 * operands in shared memory), the online softmax in registers, and
 * O += P V with wgmma (P from registers, V transposed in shared memory).
 * mbarriers hand each stage from the producer to the consumers (full: the
 * TMA bytes have landed) and back (empty: every consumer thread is done
 * with it). The generator writes a translation unit that defines `Spec`
 * and the entry points `mhagen_attention` (attentionSm90<Spec>) and
 * `mhagen_combine` (combineSplits<Spec>, shared with the sm_80 kernel, as
 * are the block's work, the softmax and the row output).
 *
 * Shared memory, from a 1024-byte aligned base: Q (BM rows), STAGES K
 * tiles, STAGES V tiles (BN rows each), all in 128-byte swizzled panels
 * (tensor_core_tiles.h, panelSwizzled), then the barriers. */
#include "tensor_core_attention.cuh"
#ifdef __CUDACC__
#include "wgmma_ptx.cuh"
#endif

namespace mh_tc {

template <class S> struct Sm90Layout {
  using T = typename S::T;
  static constexpr int STAGES = 2;
  static constexpr int CONSUMERS = S::WARPS * 32; /* threads */
  /* and the producer warpgroup, whose first lane issues every load */
  static constexpr int THREADS = CONSUMERS + 128;
  /* Registers per thread after setmaxnreg (0: unchanged). With two
   * consumer warpgroups the block starts at 168 (three warps share each
   * quarter of the register file); the producer gives back what the
   * consumers' accumulators need: 128 x 24 + 256 x 240 <= 64 Ki. One
   * consumer warpgroup has 255 from the start. */
  static constexpr int PRODUCER_REGS = S::WARPS == 8 ? 24 : 0;
  static constexpr int CONSUMER_REGS = S::WARPS == 8 ? 240 : 0;
  static constexpr int Q_BYTES = S::BM * S::DK * (int)sizeof(T);
  static constexpr int TILE_BYTES = S::BN * S::DK * (int)sizeof(T);
  static constexpr int BARRIERS = 3 * STAGES + 1;
  /* 1024 bytes of slack to align the base, the tiles, the barriers. */
  static constexpr int SHARED_BYTES =
      1024 + Q_BYTES + 2 * STAGES * TILE_BYTES + 8 * BARRIERS;
};

/* S (this warpgroup's 64 rows x BN keys) = Q K^T over the dk / 16 k16
 * steps: step kk reads 32 bytes into the 128-byte rows of panel kk / 4.
 * The first step overwrites S (scale-d 0), so S needs no zeroing between
 * the fence and the products. */
template <class S>
__device__ __forceinline__ void scoreTile(float (&s)[S::BN / 8][4],
                                          uint32_t qAddr, uint32_t kAddr) {
  using T = typename S::T;
  constexpr int BM = S::BM, BN = S::BN;
#pragma unroll
  for (int kk = 0; kk < S::DK / 16; ++kk) {
    const uint32_t inRow = (kk & 3) * 32u;
    const uint64_t a =
        wgmmaDescriptor(qAddr + (kk >> 2) * BM * 128u + inRow, 16, 1024);
    const uint32_t kPanel = kAddr + (kk >> 2) * BN * 128u + inRow;
    if constexpr (BN == 32) {
      WgmmaSS<T, 32>::run(reinterpret_cast<float(&)[16]>(s[0]), a,
                          wgmmaDescriptor(kPanel, 16, 1024), kk > 0);
    } else {
#pragma unroll
      for (int nb = 0; nb < BN / 64; ++nb)
        WgmmaSS<T, 64>::run(reinterpret_cast<float(&)[32]>(s[8 * nb]), a,
                            wgmmaDescriptor(kPanel + nb * 64 * 128u, 16, 1024),
                            kk > 0);
    }
  }
}

/* O (64 rows x dk) += P V: k16 step kk takes keys 16 kk.. (2048 bytes into
 * each panel), one n64 product per 64-channel panel of V. */
template <class S>
__device__ __forceinline__ void valueTile(float (&o)[S::DK / 8][4],
                                          const float (&s)[S::BN / 8][4],
                                          uint32_t vAddr) {
  using T = typename S::T;
  constexpr int BN = S::BN;
  // P's fragments are packed before the fence: registers written between
  // wgmma.fence and the products would make ptxas serialise them.
  uint32_t a[BN / 16][4];
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk)
    pFragment<S>(a[kk], s, kk);
  wgmmaFence();
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk) {
#pragma unroll
    for (int pn = 0; pn < S::DK / 64; ++pn) {
      const uint64_t b = wgmmaDescriptor(
          vAddr + pn * BN * 128u + kk * 16 * 128u, BN * 128u, 1024);
      WgmmaRS<T, 64>::run(reinterpret_cast<float(&)[32]>(o[8 * pn]), a[kk], b,
                          1);
    }
  }
}

template <class S>
__device__ __forceinline__ void attentionSm90(const Params &p) {
  using T = typename S::T;
  using L = Sm90Layout<S>;
  constexpr int D = S::DK, BM = S::BM, BN = S::BN;
  constexpr int STAGES = L::STAGES, PANELS = D / 64;
  unsigned char *raw = sharedMemory();
  unsigned char *base = raw + ((1024u - sharedAddress(raw) % 1024u) % 1024u);
  T *sQ = reinterpret_cast<T *>(base);
  T *sK = reinterpret_cast<T *>(base + L::Q_BYTES);
  T *sV = reinterpret_cast<T *>(base + L::Q_BYTES + STAGES * L::TILE_BYTES);
  uint64_t *bars = reinterpret_cast<uint64_t *>(base + L::Q_BYTES +
                                                2 * STAGES * L::TILE_BYTES);
  uint64_t *fullK = bars, *fullV = bars + STAGES, *empty = bars + 2 * STAGES;
  uint64_t *vZeroed = bars + 3 * STAGES;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // The warpgroup from lane 0: ptxas then knows the role branches are
  // warp-uniform and keeps the wgmma instructions asynchronous.
  const int group = __shfl_sync(0xffffffffu, (int)(threadIdx.x >> 7), 0);
  const BlockWork w = blockWork<S>(p);
  const TileRange tiles = w.tiles;

  /* Every thread: Q into its swizzled panels (rows past the call are
   * zeros), made visible to wgmma; thread 0: the barriers. */
  forQueryChunks<S>(p, w, L::THREADS,
                    [&](int r, int ch, const T *src, bool ok) {
                      copy16Sync(sQ + panelSwizzled(r, ch * 8, BM), src, ok);
                    });
  fenceProxyAsync();
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbarrierInit(&fullK[s], 1);
      mbarrierInit(&fullV[s], 1);
      mbarrierInit(&empty[s], L::CONSUMERS);
    }
    mbarrierInit(vZeroed, L::CONSUMERS);
    mbarrierInitFence();
  }
  __syncthreads();

  if (group == S::WARPS / 4) {
    if constexpr (L::PRODUCER_REGS != 0)
      setMaxRegisters<L::PRODUCER_REGS, false>();
    /* The producer: one lane issues every load. A stage is refilled once
     * all consumer threads have released it (the first round of waits
     * passes at once: parity 1 is the phase before the first). */
    if (warp == S::WARPS && lane == 0) {
      long long i = 0;
      for (long long t = tiles.lo; t <= tiles.hi; ++t, ++i) {
        const int s = (int)(i % STAGES);
        const unsigned phase = (unsigned)(i / STAGES) & 1u;
        mbarrierWait(&empty[s], phase ^ 1u);
        const int j0 = (int)(t * BN);
        mbarrierArriveExpect(&fullK[s], L::TILE_BYTES);
#pragma unroll
        for (int pn = 0; pn < PANELS; ++pn)
          tmaLoad4(sK + s * BN * D + pn * BN * 64, &p.tm_k, &fullK[s], pn * 64,
                   w.kvHead, j0, w.b);
        mbarrierArriveExpect(&fullV[s], L::TILE_BYTES);
#pragma unroll
        for (int pn = 0; pn < PANELS; ++pn)
          tmaLoad4(sV + s * BN * D + pn * BN * 64, &p.tm_v, &fullV[s], pn * 64,
                   w.kvHead, j0, w.b);
      }
    }
    return;
  }

  /* A consumer: warp `warp` owns rows 16 warp.. of the block, inside its
   * warpgroup's 64. */
  if constexpr (L::CONSUMER_REGS != 0)
    setMaxRegisters<L::CONSUMER_REGS, true>();
  const uint32_t qAddr = sharedAddress(sQ) + group * 64 * 128u;
  float o[D / 8][4], m[2], l[2];
  startRows<S>(o, m, l);
  const LaneRows rows = laneRows<S>(w, warp * 16, lane);

  long long i = 0;
  for (long long t = tiles.lo; t <= tiles.hi; ++t, ++i) {
    const int s = (int)(i % STAGES);
    const unsigned phase = (unsigned)(i / STAGES) & 1u;
    const long long j0 = t * BN;
    float sc[BN / 8][4];
    mbarrierWait(&fullK[s], phase);
    wgmmaFence();
    scoreTile<S>(sc, qAddr, sharedAddress(sK + s * BN * D));
    wgmmaCommit();
    wgmmaWait<0>();

    softmaxTile<S>(sc, o, m, l, w, rows, j0, p, lane);

    mbarrierWait(&fullV[s], phase);
    if (S::PADDING && j0 + BN > w.keys && j0 < p.tkv) {
      /* TMA zero-fills rows past T_kv only: the rows past this sequence's
       * length hold whatever the cache holds (NaN included), and P's zeros
       * would not cancel a NaN. The consumers zero them, once per block
       * (only the last tile of the sequence straddles its end). */
      T *tile = sV + s * BN * D;
      const int first = (int)(w.keys - j0 > 0 ? w.keys - j0 : 0);
      for (int c = threadIdx.x; c < (BN - first) * (D / 8); c += L::CONSUMERS) {
        const int r = first + c / (D / 8), ch = c % (D / 8);
        copy16Sync(tile + panelSwizzled(r, ch * 8, BN), tile, false);
      }
      fenceProxyAsync();
      mbarrierArrive(vZeroed);
      mbarrierWait(vZeroed, 0);
    }
    valueTile<S>(o, sc, sharedAddress(sV + s * BN * D));
    wgmmaCommit();
    wgmmaWait<0>();
    mbarrierArrive(&empty[s]);
  }
  finishRows<S>(o, m, l, w, warp * 16, p, lane);
}

} // namespace mh_tc
