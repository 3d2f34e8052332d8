//===- SplitKvDecode.cpp - split-KV decode form of mha.attention ----------===//
//
// mha-split-kv-decode (docs/design.md §1 "Split-KV decode"): a decode step
// has T_q <= D query tokens, so the flash form's tiles of QT tokens of one
// head are almost all padding, and its B x h x 1 tasks each walk the whole
// cache. This pass gives every mha.attention a second form for those calls,
// chosen at call time:
//
//   scf.if T_q <= D:
//     n = clamp(ceil(split-tasks / (B kv)), 1,
//               min(numKT / min-key-tiles, max-splits))   -- chunks, per call
//     scf.forall (b, g, c) in (B, kv, n):                 -- partial states
//       Q tile [D*group x dk]: the call's tokens x the GQA group's heads
//       (row r = token r/group, head g*group + r%group), read once per task
//       the key tiles the mask leaves, cut into n equal chunks; chunk c
//       runs FlashTile's online softmax on its tiles -> (acc, m, l) of c
//     scf.forall (b, g) in (B, kv):                       -- the merge
//       M = max_c m_c (the sink's logit included);  a_c = exp(m_c - M)
//       L = sum_c a_c l_c (+ exp(sink - M));  O = sum_c a_c acc_c
//       out rows = L > 0 ? O / L : 0;  lse = M + log L
//   else:
//     the mha.attention, unchanged (mha-lower-to-linalg's flash form)
//
// A K/V tile is staged once for every head of its group, and the key axis
// gives as many tasks as the machine model asks for (FlashDecoding). A spec
// whose static T_q exceeds D keeps the flash form only; one whose static
// T_q is at most D gets the split form only.
#include "FlashTile.h"
#include "OnlineSoftmax.h"

#include "mhagen/mlir/MhaDialect.h"
#include "mhagen/mlir/MhaPasses.h"
#include "mhagen/spec/SoftmaxNumerics.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tensor/Utils/Utils.h"
#include "mlir/IR/PatternMatch.h"

namespace mhagen::mha {
#define GEN_PASS_DEF_MHASPLITKVDECODE
#include "mhagen/mlir/MhaPasses.h.inc"
} // namespace mhagen::mha

using namespace mlir;
using namespace mhagen::mha;
using mhagen::kLowestScore;

namespace {

struct SplitForm {
  int64_t tokens;      ///< D: the most query tokens of the form
  int64_t keyTile;     ///< keys per online-softmax step
  int64_t splitTasks;  ///< parallel tasks the chunks aim for (0: 1 chunk)
  int64_t minKeyTiles; ///< no chunk shorter than this many key tiles
  int64_t maxSplits;   ///< the most chunks
};

// An elementwise linalg.generic writing `out`.
Value elementwise(OpBuilder &b, Location loc, Value out, ValueRange ins,
                  ArrayRef<AffineMap> maps,
                  function_ref<Value(OpBuilder &, Location, ValueRange)> body) {
  const int rank = cast<RankedTensorType>(out.getType()).getRank();
  return b
      .create<linalg::GenericOp>(
          loc, out.getType(), ins, ValueRange{out}, maps, iteratorTypes(rank),
          [&](OpBuilder &g, Location gl, ValueRange args) {
            g.create<linalg::YieldOp>(gl, body(g, gl, args));
          })
      .getResult(0);
}

// A static [R] f32 tensor of one scalar per tile row: `of(head)` for row
// r's head g*group + r%group.
Value perRowOfHead(OpBuilder &b, Location loc, int64_t rows, int64_t group,
                   Value g, function_ref<Value(Value head)> of) {
  IndexMath im{b, loc};
  SmallVector<Value> values;
  for (int64_t r = 0; r < rows; ++r)
    values.push_back(of(im.add(im.mul(g, im.c(group)), im.c(r % group))));
  return b.create<tensor::FromElementsOp>(
      loc, RankedTensorType::get({rows}, b.getF32Type()), values);
}

// A slice [lead..., 0...] of sizes [1..., rest...], as
// offsets/sizes/strides for extract_slice or parallel_insert_slice.
struct PartialSlice {
  SmallVector<OpFoldResult> offsets, sizes, strides;
  PartialSlice(OpBuilder &b, ArrayRef<Value> lead, ArrayRef<int64_t> rest) {
    for (Value v : lead) {
      offsets.push_back(v);
      sizes.push_back(b.getIndexAttr(1));
    }
    for (int64_t r : rest) {
      offsets.push_back(b.getIndexAttr(0));
      sizes.push_back(b.getIndexAttr(r));
    }
    strides.assign(offsets.size(), b.getIndexAttr(1));
  }
};

// What the stages of one op's split form share.
struct SplitContext {
  AttentionOp op;
  const SplitForm &form;
  IRRewriter &rw;
  Location loc;
  int64_t kv, group;
  int64_t D;  ///< the most query tokens of the form
  int64_t R;  ///< rows per K/V head: D tokens x the group's heads
  int64_t KT; ///< keys per online-softmax step
  int64_t dk, dv;
  Type et; ///< the stored element type
  Type f32;
  Value q, B, Tq, Tkv;
  Value chunks; ///< key-axis chunks, from the call's sizes

  IndexMath im() { return IndexMath{rw, loc}; }
};

// The chunk count, from the call's sizes.
Value chunkCount(SplitContext &x) {
  IndexMath im = x.im();
  Value numKT = im.ceilDiv(x.Tkv, im.c(x.KT));
  if (x.form.splitTasks <= 0)
    return im.c(1);
  // (B is at least 1 in any call the runtime lets through; the max keeps
  // the division defined regardless.)
  Value wanted = im.ceilDiv(im.c(x.form.splitTasks), im.max(x.B, im.c(1)));
  Value byKeys = im.max(im.c(1), im.floorDiv(numKT, im.c(x.form.minKeyTiles)));
  return im.max(im.c(1),
                im.min(wanted, im.min(byKeys, im.c(x.form.maxSplits))));
}

// The Q tiles of every K/V head, [kv, R, dk], read once per task: head
// g's rows are q[b, 0:Tq, g*group : (g+1)*group, :] padded to D tokens,
// rows (token, head), scaled once.
Value queryTiles(SplitContext &x, Value bIv) {
  IRRewriter &rw = x.rw;
  Location loc = x.loc;
  IndexMath im = x.im();
  const int64_t kv = x.kv, group = x.group, R = x.R, dk = x.dk, D = x.D;
  Type et = x.et;
  Value q = x.q, Tq = x.Tq;
  auto one = rw.getIndexAttr(1), zero = rw.getIndexAttr(0);
  Value scaleValue = queryScaleOf(rw, loc, x.op);
  auto qTilesType = RankedTensorType::get({kv, R, dk}, x.f32);
  Value qEmpty = rw.create<tensor::EmptyOp>(loc, qTilesType.getShape(), x.f32);
  auto qLoop = rw.create<scf::ForOp>(
      loc, im.c(0), im.c(kv), im.c(1), ValueRange{qEmpty},
      [&](OpBuilder &b, Location l, Value g, ValueRange it) {
        IndexMath gm{b, l};
        Value qSlice = b.create<tensor::ExtractSliceOp>(
            l, RankedTensorType::get({ShapedType::kDynamic, group, dk}, et), q,
            ArrayRef<OpFoldResult>{bIv, zero, gm.mul(g, gm.c(group)), zero},
            ArrayRef<OpFoldResult>{one, Tq, b.getIndexAttr(group),
                                   b.getIndexAttr(dk)},
            ArrayRef<OpFoldResult>{one, one, one, one});
        Value qPad = tensor::createPadHighOp(
            RankedTensorType::get({D, group, dk}, et), qSlice,
            b.create<arith::ConstantOp>(l, b.getZeroAttr(et)),
            /*nofold=*/false, l, b);
        Value qRows = b.create<tensor::CollapseShapeOp>(
            l, RankedTensorType::get({R, dk}, et), qPad,
            ArrayRef<ReassociationIndices>{{0, 1}, {2}});
        Value qTile = tileToF32(b, l, qRows, false, scaleValue);
        Value qAll = b.create<tensor::InsertSliceOp>(
            l, qTile, it[0], ArrayRef<OpFoldResult>{g, zero, zero},
            ArrayRef<OpFoldResult>{one, b.getIndexAttr(R), b.getIndexAttr(dk)},
            ArrayRef<OpFoldResult>{one, one, one});
        b.create<scf::YieldOp>(l, qAll);
      });
  return qLoop.getResult(0);
}

// Chunk cIv's walk over its key tiles for every head: the running (acc,
// m, l) of every head, [kv, R, dv], [kv, R], [kv, R].
scf::ForOp chunkKeyLoop(SplitContext &x, Value bIv, Value cIv) {
  IRRewriter &rw = x.rw;
  Location loc = x.loc;
  IndexMath im = x.im();
  AttentionOp op = x.op;
  const int64_t kv = x.kv, group = x.group, R = x.R, dk = x.dk, dv = x.dv;
  Type f32 = x.f32;
  FlashTile ft = FlashTile::forOp(rw, loc, op, bIv, x.Tkv, R, x.KT);
  // Query token t sits at t + Tkv - Tq (t + kv_lens[b] - Tq in a ragged
  // batch); row r is token r / group.
  Value offset =
      op.getPerSequence() ? im.sub(ft.kvLen, x.Tq) : im.sub(x.Tkv, x.Tq);
  ft.position = [offset, group](OpBuilder &g, Location gl, Value row) {
    IndexMath gm{g, gl};
    return gm.add(gm.floorDiv(row, gm.c(group)), offset);
  };
  Value qTiles = queryTiles(x, bIv);

  // The key tiles the mask leaves to the call's rows (positions offset
  // ... Tq - 1 + offset), the same for every head, cut into `chunks`
  // equal runs; chunk c takes its run (possibly empty).
  Value lastPos = im.add(im.sub(x.Tq, im.c(1)), offset);
  SmallVector<KeyTileRange> ranges = ft.keyTileRanges(rw, loc, offset, lastPos);
  KeyTileRange hull = hullOf(im, ranges);
  Value chunkLen = im.ceilDiv(im.sub(hull.hi, hull.lo), x.chunks);
  Value cLo = im.min(im.add(hull.lo, im.mul(cIv, chunkLen)), hull.hi);
  Value cHi = im.min(im.add(cLo, chunkLen), hull.hi);

  // The state of every head: acc [kv, R, dv], m and l [kv, R].
  Value acc0 = identityTensor(rw, loc, {kv, R, dv}, arith::AtomicRMWKind::addf);
  Value m0 = filledTensor(rw, loc, {kv, R}, kLowestScore);
  Value l0 = identityTensor(rw, loc, {kv, R}, arith::AtomicRMWKind::addf);
  // Head g's slice of a [kv, rest...] tensor.
  auto headSlice = [&](OpBuilder &b, Location l, Value from, Value g,
                       ArrayRef<int64_t> rest) {
    PartialSlice at(b, {g}, rest);
    return b
        .create<tensor::ExtractSliceOp>(l, RankedTensorType::get(rest, f32),
                                        from, at.offsets, at.sizes, at.strides)
        .getResult();
  };
  auto headInsert = [&](OpBuilder &b, Location l, Value part, Value into,
                        Value g, ArrayRef<int64_t> rest) {
    PartialSlice at(b, {g}, rest);
    return b
        .create<tensor::InsertSliceOp>(l, part, into, at.offsets, at.sizes,
                                       at.strides)
        .getResult();
  };
  return rw.create<scf::ForOp>(
      loc, cLo, cHi, im.c(1), ValueRange{acc0, m0, l0},
      [&](OpBuilder &b, Location l, Value kt, ValueRange it) {
        // The tile's rows (in a paged cache: its table entry and
        // block) are the same for every head: located once here.
        const FlashTile::KeyTileRows at = ft.locate(b, l, kt);
        auto headLoop = b.create<scf::ForOp>(
            l, IndexMath{b, l}.c(0), IndexMath{b, l}.c(kv),
            IndexMath{b, l}.c(1), it,
            [&](OpBuilder &hb, Location hl, Value g, ValueRange st) {
              OpBuilder::InsertionGuard guard(rw);
              rw.setInsertionPoint(hb.getInsertionBlock(),
                                   hb.getInsertionPoint());
              FlashTile head = ft;
              head.kvHead = g;
              if (Value slopes = op.getSlopes())
                head.slope = perRowOfHead(rw, hl, R, group, g, [&](Value hd) {
                  return rw.create<tensor::ExtractOp>(hl, slopes,
                                                      ValueRange{hd});
                });
              Value qTile = headSlice(rw, hl, qTiles, g, {R, dk});
              SmallVector<Value> next =
                  head.stepIfVisible(rw, hl, qTile, ranges, kt,
                                     {headSlice(rw, hl, st[0], g, {R, dv}),
                                      headSlice(rw, hl, st[1], g, {R}),
                                      headSlice(rw, hl, st[2], g, {R})},
                                     at);
              rw.create<scf::YieldOp>(
                  hl, ValueRange{headInsert(rw, hl, next[0], st[0], g, {R, dv}),
                                 headInsert(rw, hl, next[1], st[1], g, {R}),
                                 headInsert(rw, hl, next[2], st[2], g, {R})});
            });
        b.create<scf::YieldOp>(l, headLoop.getResults());
      });
}

// 1. Partial states per (batch, chunk, K/V head). A task holds every K/V
//    head of its chunk and walks the heads inside each key tile, so the
//    tile's token rows of K and V ([kv, dk] contiguous) are read whole
//    within a few microseconds: with one head per task each token row is a
//    512-byte slice of every 4 KiB (kv 8, dk 128, f32), which the hardware
//    prefetchers do not follow across pages (docs/performance.md,
//    "Decode").
scf::ForallOp partialStates(SplitContext &x) {
  IRRewriter &rw = x.rw;
  Location loc = x.loc;
  const int64_t kv = x.kv, R = x.R, dv = x.dv;
  auto partialEmpty = [&](ArrayRef<int64_t> rest) -> Value {
    SmallVector<int64_t> shape = {ShapedType::kDynamic, ShapedType::kDynamic,
                                  kv};
    shape.append(rest.begin(), rest.end());
    return rw.create<tensor::EmptyOp>(loc, RankedTensorType::get(shape, x.f32),
                                      ValueRange{x.B, x.chunks});
  };
  SmallVector<Value> partials = {partialEmpty({R, dv}), partialEmpty({R}),
                                 partialEmpty({R})};
  auto one = rw.getIndexAttr(1), zero = rw.getIndexAttr(0);
  auto chunkLoop = rw.create<scf::ForallOp>(
      loc, ArrayRef<OpFoldResult>{zero, zero},
      ArrayRef<OpFoldResult>{x.B, x.chunks}, ArrayRef<OpFoldResult>{one, one},
      partials, std::nullopt);
  OpBuilder::InsertionGuard guard(rw);
  Block *body = chunkLoop.getBody();
  rw.setInsertionPointToStart(body);
  Value bIv = body->getArgument(0), cIv = body->getArgument(1);
  scf::ForOp keyLoop = chunkKeyLoop(x, bIv, cIv);
  auto term = cast<scf::InParallelOp>(body->getTerminator());
  rw.setInsertionPointToStart(term.getBody());
  for (int i = 0; i < 3; ++i) {
    SmallVector<int64_t> rest = {kv, R};
    if (i == 0)
      rest.push_back(dv);
    PartialSlice at(rw, {bIv, cIv}, rest);
    rw.create<tensor::ParallelInsertSliceOp>(loc, keyLoop.getResult(i),
                                             body->getArgument(2 + i),
                                             at.offsets, at.sizes, at.strides);
  }
  return chunkLoop;
}

// The merged rows of one (batch, K/V head): M = max_c m_c (the sink's
// logit included), L = sum_c exp(m_c - M) l_c (+ exp(sink - M)),
// O = sum_c exp(m_c - M) acc_c.
struct MergedRows {
  Value M, L, O;
};

MergedRows mergeChunks(SplitContext &x, scf::ForallOp chunkLoop, Value bIv,
                       Value gIv) {
  IRRewriter &rw = x.rw;
  Location loc = x.loc;
  IndexMath im = x.im();
  const int64_t R = x.R, dv = x.dv;
  Type f32 = x.f32;
  Value accP = chunkLoop.getResult(0), mP = chunkLoop.getResult(1),
        lP = chunkLoop.getResult(2);
  auto chunkState = [&](OpBuilder &b, Location l, Value from, Value c,
                        ArrayRef<int64_t> rest) -> Value {
    PartialSlice at(b, {bIv, c, gIv}, rest);
    return b.create<tensor::ExtractSliceOp>(l, RankedTensorType::get(rest, f32),
                                            from, at.offsets, at.sizes,
                                            at.strides);
  };
  AffineMap id1 = rw.getMultiDimIdentityMap(1),
            id2 = rw.getMultiDimIdentityMap(2);
  AffineMap row2 =
      AffineMap::get(2, 0, {rw.getAffineDimExpr(0)}, rw.getContext());
  // A learned sink is a key of value 0 seen by every row: it starts the
  // running max, and joins the sum below.
  Value sinkRow;
  if (Value sinks = x.op.getSinks())
    sinkRow = perRowOfHead(rw, loc, R, x.group, gIv, [&](Value head) {
      return rw.create<tensor::ExtractOp>(loc, sinks, ValueRange{head});
    });
  Value mInit = filledTensor(rw, loc, {R}, kLowestScore);
  if (sinkRow)
    mInit =
        elementwise(rw, loc, mInit, ValueRange{sinkRow}, {id1, id1},
                    [](OpBuilder &, Location, ValueRange a) { return a[0]; });
  auto maxLoop = rw.create<scf::ForOp>(
      loc, im.c(0), x.chunks, im.c(1), ValueRange{mInit},
      [&](OpBuilder &b, Location l, Value c, ValueRange it) {
        Value mc = chunkState(b, l, mP, c, {R});
        b.create<scf::YieldOp>(l, updateRunningMax(b, l, mc, it[0]));
      });
  Value M = maxLoop.getResult(0);
  Value lInit = identityTensor(rw, loc, {R}, arith::AtomicRMWKind::addf);
  if (sinkRow)
    lInit = elementwise(rw, loc, lInit, ValueRange{sinkRow, M}, {id1, id1, id1},
                        [](OpBuilder &g, Location gl, ValueRange a) -> Value {
                          return g.create<math::ExpOp>(
                              gl, g.create<arith::SubFOp>(gl, a[0], a[1]));
                        });
  Value oInit = identityTensor(rw, loc, {R, dv}, arith::AtomicRMWKind::addf);
  auto sumLoop = rw.create<scf::ForOp>(
      loc, im.c(0), x.chunks, im.c(1), ValueRange{oInit, lInit},
      [&](OpBuilder &b, Location l, Value c, ValueRange it) {
        Value mc = chunkState(b, l, mP, c, {R});
        Value lc = chunkState(b, l, lP, c, {R});
        Value accC = chunkState(b, l, accP, c, {R, dv});
        Value alpha = computeRescale(b, l, mc, M);
        Value lNew = elementwise(
            b, l, it[1], ValueRange{alpha, lc}, {id1, id1, id1},
            [](OpBuilder &g, Location gl, ValueRange a) -> Value {
              return g.create<arith::AddFOp>(
                  gl, a[2], g.create<arith::MulFOp>(gl, a[0], a[1]));
            });
        Value oNew = elementwise(
            b, l, it[0], ValueRange{alpha, accC}, {row2, id2, id2},
            [](OpBuilder &g, Location gl, ValueRange a) -> Value {
              return g.create<arith::AddFOp>(
                  gl, a[2], g.create<arith::MulFOp>(gl, a[0], a[1]));
            });
        b.create<scf::YieldOp>(l, ValueRange{oNew, lNew});
      });
  return {M, sumLoop.getResult(1), sumLoop.getResult(0)};
}

// Writes the merged rows (token, head) back to [Tq, group] of the output,
// and their lse when the op has one, from inside the merge loop's body.
void storeMergedRows(SplitContext &x, Block *body, const MergedRows &m,
                     Value bIv, Value gIv) {
  IRRewriter &rw = x.rw;
  Location loc = x.loc;
  IndexMath im = x.im();
  const int64_t D = x.D, R = x.R, group = x.group, dv = x.dv;
  Type et = x.et;
  Value Tq = x.Tq;
  auto one = rw.getIndexAttr(1), zero = rw.getIndexAttr(0);
  Value outTile = rw.create<tensor::EmptyOp>(loc, ArrayRef<int64_t>{R, dv}, et);
  Value normalized = normalizeRows(rw, loc, m.O, m.L, outTile);
  Value byToken = rw.create<tensor::ExpandShapeOp>(
      loc, RankedTensorType::get({D, group, dv}, et), normalized,
      ArrayRef<ReassociationIndices>{{0, 1}, {2}});
  Value outRows = rw.create<tensor::ExtractSliceOp>(
      loc, RankedTensorType::get({ShapedType::kDynamic, group, dv}, et),
      byToken, ArrayRef<OpFoldResult>{zero, zero, zero},
      ArrayRef<OpFoldResult>{Tq, rw.getIndexAttr(group), rw.getIndexAttr(dv)},
      ArrayRef<OpFoldResult>{one, one, one});
  Value lseRows;
  if (x.op.getLseInit()) {
    Value lse = computeLogSumExp(rw, loc, m.M, m.L);
    Value lseByToken = rw.create<tensor::ExpandShapeOp>(
        loc, RankedTensorType::get({D, group}, x.f32), lse,
        ArrayRef<ReassociationIndices>{{0, 1}});
    lseRows = rw.create<tensor::ExtractSliceOp>(
        loc, RankedTensorType::get({ShapedType::kDynamic, group}, x.f32),
        lseByToken, ArrayRef<OpFoldResult>{zero, zero},
        ArrayRef<OpFoldResult>{Tq, rw.getIndexAttr(group)},
        ArrayRef<OpFoldResult>{one, one});
  }
  Value head0 = im.mul(gIv, im.c(group));
  auto term = cast<scf::InParallelOp>(body->getTerminator());
  rw.setInsertionPointToStart(term.getBody());
  rw.create<tensor::ParallelInsertSliceOp>(
      loc, outRows, body->getArgument(2),
      ArrayRef<OpFoldResult>{bIv, zero, head0, zero},
      ArrayRef<OpFoldResult>{one, Tq, rw.getIndexAttr(group),
                             rw.getIndexAttr(dv)},
      ArrayRef<OpFoldResult>{one, one, one, one});
  if (lseRows)
    rw.create<tensor::ParallelInsertSliceOp>(
        loc, lseRows, body->getArgument(3),
        ArrayRef<OpFoldResult>{bIv, zero, head0},
        ArrayRef<OpFoldResult>{one, Tq, rw.getIndexAttr(group)},
        ArrayRef<OpFoldResult>{one, one, one});
}

// 2. The merge, per (batch, K/V head).
scf::ForallOp mergeStates(SplitContext &x, scf::ForallOp chunkLoop) {
  IRRewriter &rw = x.rw;
  SmallVector<Value> shared = {x.op.getInit()};
  if (Value lseInit = x.op.getLseInit())
    shared.push_back(lseInit);
  auto one = rw.getIndexAttr(1), zero = rw.getIndexAttr(0);
  auto mergeLoop = rw.create<scf::ForallOp>(
      x.loc, ArrayRef<OpFoldResult>{zero, zero},
      ArrayRef<OpFoldResult>{x.B, rw.getIndexAttr(x.kv)},
      ArrayRef<OpFoldResult>{one, one}, shared, std::nullopt);
  OpBuilder::InsertionGuard guard(rw);
  Block *body = mergeLoop.getBody();
  rw.setInsertionPointToStart(body);
  Value bIv = body->getArgument(0), gIv = body->getArgument(1);
  MergedRows merged = mergeChunks(x, chunkLoop, bIv, gIv);
  storeMergedRows(x, body, merged, bIv, gIv);
  return mergeLoop;
}

// Gives `op` the split form for T_q <= form.tokens; returns the flash-form
// op left for the other calls (null when the split form serves every
// call, or `op` itself when none does).
AttentionOp splitOne(AttentionOp op, const SplitForm &form, IRRewriter &rw) {
  Location loc = op.getLoc();
  rw.setInsertionPoint(op);
  auto qType = cast<RankedTensorType>(op.getQuery().getType());
  auto vType = cast<RankedTensorType>(op.getValue().getType());
  SplitContext x{op, form, rw, loc};
  x.kv = op.getNumKvHeads();
  x.group = op.getNumHeads() / x.kv;
  x.D = form.tokens;
  x.R = x.D * x.group;
  x.KT = form.keyTile;
  x.dk = qType.getDimSize(3);
  x.dv = vType.getDimSize(3);
  // A static T_q above D never takes the decode form.
  const int64_t staticTq = qType.getDimSize(1);
  if (!ShapedType::isDynamic(staticTq) && staticTq > x.D)
    return op;
  x.et = qType.getElementType();
  x.f32 = rw.getF32Type();
  x.q = op.getQuery();
  x.B = rw.create<tensor::DimOp>(loc, x.q, 0);
  x.Tq = rw.create<tensor::DimOp>(loc, x.q, 1);
  x.Tkv = keyLengthOf(rw, loc, op);

  // The branch on T_q (none when T_q is static).
  scf::IfOp branch;
  AttentionOp flash;
  if (ShapedType::isDynamic(staticTq)) {
    Value isDecode = rw.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ule,
                                              x.Tq, x.im().c(x.D));
    branch = rw.create<scf::IfOp>(loc, op->getResultTypes(), isDecode,
                                  /*withElseRegion=*/true);
    rw.setInsertionPointToStart(&branch.getElseRegion().front());
    flash = cast<AttentionOp>(rw.clone(*op));
    rw.create<scf::YieldOp>(loc, flash->getResults());
    rw.setInsertionPointToStart(&branch.getThenRegion().front());
  }
  x.chunks = chunkCount(x);
  scf::ForallOp chunkLoop = partialStates(x);
  scf::ForallOp mergeLoop = mergeStates(x, chunkLoop);
  if (branch) {
    rw.create<scf::YieldOp>(loc, mergeLoop.getResults());
    rw.replaceOp(op, branch.getResults());
  } else {
    rw.replaceOp(op, mergeLoop.getResults());
  }
  return flash;
}

struct MhaSplitKvDecodePass
    : public mhagen::mha::impl::MhaSplitKvDecodeBase<MhaSplitKvDecodePass> {
  using MhaSplitKvDecodeBase::MhaSplitKvDecodeBase;
  void runOnOperation() override {
    if (decodeTokens <= 0)
      return;
    // Two tiers when decode-tokens > 1: a one-token form (a decode step
    // computes only its group's rows) and a decode-tokens form (speculative
    // decoding), each with its own static tile. S4 (T_q 1) pads to 4
    // tokens at 2.12 ms against 1.39 ms for the one-token tile; SpecDecode
    // (T_q 4) runs 2.13 ms in the 4-token tile against 22.6 ms in the flash
    // form (B1 T_kv 4096 h32 kv8 dk128 f32, 2 threads, Sapphire Rapids
    // class).
    SmallVector<int64_t> tiers = {1};
    if (decodeTokens > 1)
      tiers.push_back(decodeTokens);
    // The ops as they are now: each tier splits the flash-form copy the
    // previous one left in its else branch.
    SmallVector<AttentionOp> ops;
    getOperation().walk([&](AttentionOp op) { ops.push_back(op); });
    IRRewriter rw(&getContext());
    for (AttentionOp op : ops)
      for (int64_t tokens : tiers) {
        if (!op)
          break;
        // A paged cache's tile divides its block (FlashTile.h).
        const int64_t kt = keyTileFor(op, keyTile);
        const SplitForm form{tokens, kt, splitTasks,
                             std::max<int64_t>(1, splitMinKeys / kt),
                             maxSplits};
        op = splitOne(op, form, rw);
      }
  }
};

} // namespace
