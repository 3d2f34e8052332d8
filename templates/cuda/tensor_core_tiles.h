/* The index arithmetic of mhagen's tensor-core attention kernel
 * (tensor_core_attention.cuh), apart from the kernel so that the host can
 * check it: which query rows a block holds, which key tiles it scans, which
 * keys a row sees, where an element sits in shared memory, and which lane of
 * a warp holds which element of an mma.sync m16n8k16 fragment (PTX ISA,
 * "Matrix Fragments for mma.m16n8k16"). The kernel and the unit test
 * (test/unit/TensorCoreTilesTest.cpp) include this one file. */
#ifndef MHAGEN_TENSOR_CORE_TILES_H
#define MHAGEN_TENSOR_CORE_TILES_H

#ifdef __CUDACC__
#define MH_HD __host__ __device__ __forceinline__
#else
#define MH_HD inline
#endif

namespace mh_tc {

/* The mask of a kernel: one conjunction of causal, window(W) and padding
 * (docs/design.md, section 2). A query row at position p sees key j when
 * j <= p (causal), p - W < j (window), j < L (padding) and j < T_kv. */
struct Mask {
  bool causal;
  long long window; /* 0: none; implies causal */
  bool padding;
};

MH_HD bool visible(const Mask &m, long long p, long long j, long long tkv,
                   long long len) {
  if (j >= tkv || j < 0)
    return false;
  if ((m.causal || m.window > 0) && j > p)
    return false;
  if (m.window > 0 && j <= p - m.window)
    return false;
  if (m.padding && j >= len)
    return false;
  return true;
}

MH_HD long long floorDiv(long long a, long long b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

/* The key tiles [lo, hi] a block whose rows sit at positions [pFirst,
 * pLast] scans (hi < lo: none), tiles of `bn` keys; the rule of
 * clauseKeyTiles (mhagen/spec/CostModel.h) for one conjunction. */
struct TileRange {
  long long lo, hi;
};
MH_HD TileRange keyTiles(const Mask &m, long long pFirst, long long pLast,
                         long long tkv, long long len, int bn) {
  TileRange r{0, (tkv + bn - 1) / bn - 1};
  if (m.causal || m.window > 0) {
    long long h = floorDiv(pLast, bn);
    r.hi = h < r.hi ? h : r.hi;
  }
  if (m.window > 0) {
    long long l = floorDiv(pFirst - m.window + 1, bn);
    r.lo = l > r.lo ? l : r.lo;
  }
  if (m.padding) {
    long long h = floorDiv(len - 1, bn);
    r.hi = h < r.hi ? h : r.hi;
  }
  return r;
}

/* Whether every row of the block sees every key of tile [j0, j0 + bn):
 * then the kernel skips the per-element mask. */
MH_HD bool tileWhole(const Mask &m, long long pFirst, long long pLast,
                     long long j0, int bn, long long tkv, long long len) {
  long long j1 = j0 + bn - 1;
  if (j1 >= tkv)
    return false;
  if ((m.causal || m.window > 0) && j1 > pFirst)
    return false;
  if (m.window > 0 && j0 <= pLast - m.window)
    return false;
  if (m.padding && j1 >= len)
    return false;
  return true;
}

/* Query rows of a block: the heads of one K/V group share the block (one
 * K/V tile load serves all of them), so packed row r of the call's
 * T_q * group rows is token r / group, head kvHead * group + r % group. */
struct QueryRow {
  long long token;
  int head;
};
MH_HD QueryRow queryRow(long long packed, int group, int kvHead) {
  QueryRow q;
  q.token = packed / group;
  q.head = kvHead * group + (int)(packed % group);
  return q;
}

/* Shared-memory tiles hold rows of `width` 16-bit elements as 16-byte
 * chunks; chunk c of row r lives at chunk c ^ (r % 8). The 8 rows an
 * ldmatrix phase reads then fall on 8 different groups of 4 banks (each
 * row starts on bank 0 when a row is a multiple of 128 bytes). Needs
 * width >= 64. Returns the element offset. */
MH_HD int swizzled(int row, int col, int width) {
  int chunk = (col >> 3) ^ (row & 7);
  return row * width + (chunk << 3) + (col & 7);
}

/* sm_90a tiles (wgmma_attention.cuh): a tile of `rows` x `width` 16-bit
 * elements is width / 64 panels of rows x 64 elements, 128 bytes a row,
 * each panel 1024-byte aligned; within a panel, 16-byte chunk c of row r
 * sits at chunk c ^ (r % 8). This is the layout TMA's 128-byte swizzle
 * writes and wgmma's 128-byte-swizzle descriptors read. Returns the
 * element offset. */
MH_HD int panelSwizzled(int row, int col, int rows) {
  const int c = col & 63;
  const int chunk = (c >> 3) ^ (row & 7);
  return (col >> 6) * rows * 64 + row * 64 + (chunk << 3) + (c & 7);
}

/* A wgmma shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor
 * Format"): the start address, the leading and the stride byte offsets,
 * each in 16-byte units in 14 bits, and the swizzle mode in bits 62-63
 * (1: 128 bytes). For the 128-byte swizzle the stride byte offset is the
 * distance between groups of 8 rows (1024 bytes here); the leading byte
 * offset is unused for a K-major operand and, for an N-major one, is the
 * distance between 64-element panels. */
MH_HD unsigned long long wgmmaDescriptor(unsigned address, unsigned lbo,
                                         unsigned sbo) {
  return (unsigned long long)((address & 0x3FFFFu) >> 4) |
         (unsigned long long)((lbo & 0x3FFFFu) >> 4) << 16 |
         (unsigned long long)((sbo & 0x3FFFFu) >> 4) << 32 | 1ull << 62;
}

/* mma.sync.m16n8k16 fragments: lane l = 4 * g + t (g = l / 4, t = l % 4).
 * A (16 x 16, row major): register i of lane l holds the element pair at
 * row g + 8 * (i % 2), columns k = 8 * (i / 2) + 2 * t + {0, 1}.
 * B (16 x 8, "col"): register i holds rows k = 8 * i + 2 * t + {0, 1} of
 * column n = g. C/D (16 x 8, f32): element e holds row g + 8 * (e / 2),
 * column 2 * t + e % 2. */
MH_HD int fragARow(int lane, int reg) { return (lane >> 2) + 8 * (reg & 1); }
MH_HD int fragACol(int lane, int reg, int half) {
  return 8 * (reg >> 1) + 2 * (lane & 3) + half;
}
MH_HD int fragBRow(int lane, int reg, int half) {
  return 8 * reg + 2 * (lane & 3) + half;
}
MH_HD int fragBCol(int lane) { return lane >> 2; }
MH_HD int fragCRow(int lane, int e) { return (lane >> 2) + 8 * (e >> 1); }
MH_HD int fragCCol(int lane, int e) { return 2 * (lane & 3) + (e & 1); }

/* ldmatrix.x4: lane l gives the address of row l % 8 of 8 x 8 matrix l / 8,
 * and receives, in register i, row l / 4 (columns 2 * (l % 4) + {0, 1}) of
 * matrix i (its transpose with .trans). The kernel's lane addresses: */
/* A from Q (rows x channels, 16 x 16 at (r0, c0)): matrices ordered as the
 * A registers (rows 0-7/8-15, then columns 8-15). */
MH_HD int ldmARow(int lane) { return lane & 15; }
MH_HD int ldmACol(int lane) { return (lane >> 4) << 3; }
/* B from K (keys x channels): two n8 tiles of 16 keys, k16 channels:
 * matrices (keys 0-7, ch 0-7), (keys 0-7, ch 8-15), (keys 8-15, ..). */
MH_HD int ldmKRow(int lane) { return (lane & 7) + ((lane >> 4) << 3); }
MH_HD int ldmKCol(int lane) { return ((lane >> 3) & 1) << 3; }
/* B from V (keys x channels) transposed: k16 keys, two n8 tiles of
 * channels: matrices (keys 0-7, ch 0-7), (keys 8-15, ch 0-7), (keys 0-7,
 * ch 8-15), (keys 8-15, ch 8-15). */
MH_HD int ldmVRow(int lane) { return (lane & 7) + (((lane >> 3) & 1) << 3); }
MH_HD int ldmVCol(int lane) { return (lane >> 4) << 3; }

} // namespace mh_tc

#endif
