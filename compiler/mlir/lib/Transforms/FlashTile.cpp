//===- FlashTile.cpp - one query tile's walk over its key tiles -----------===//
#include "FlashTile.h"

#include "mhagen/mlir/MhaPasses.h"

#include "OnlineSoftmax.h"

#include "mhagen/spec/SoftmaxNumerics.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tensor/Utils/Utils.h"

#include <algorithm>

using namespace mlir;

namespace mhagen::mha {

Value IndexMath::c(int64_t v) {
  return b.create<arith::ConstantIndexOp>(loc, v);
}
Value IndexMath::add(Value x, Value y) {
  return b.create<arith::AddIOp>(loc, x, y);
}
Value IndexMath::sub(Value x, Value y) {
  return b.create<arith::SubIOp>(loc, x, y);
}
Value IndexMath::mul(Value x, Value y) {
  return b.create<arith::MulIOp>(loc, x, y);
}
Value IndexMath::min(Value x, Value y) {
  return b.create<arith::MinSIOp>(loc, x, y);
}
Value IndexMath::max(Value x, Value y) {
  return b.create<arith::MaxSIOp>(loc, x, y);
}
Value IndexMath::floorDiv(Value x, Value y) {
  return b.create<arith::FloorDivSIOp>(loc, x, y);
}
Value IndexMath::ceilDiv(Value x, Value y) {
  return b.create<arith::CeilDivSIOp>(loc, x, y);
}

SmallVector<utils::IteratorType> iteratorTypes(int parallel, int reduction) {
  SmallVector<utils::IteratorType> it(parallel, utils::IteratorType::parallel);
  it.append(reduction, utils::IteratorType::reduction);
  return it;
}

Value loadHeadRows(OpBuilder &b, Location loc, Value src, Value batch, Value t0,
                   Value rows, Value head, int64_t full) {
  auto st = cast<RankedTensorType>(src.getType());
  const int64_t width = st.getDimSize(3);
  SmallVector<OpFoldResult> offs = {batch, t0, head, b.getIndexAttr(0)};
  SmallVector<OpFoldResult> sizes = {b.getIndexAttr(1), rows, b.getIndexAttr(1),
                                     b.getIndexAttr(width)};
  SmallVector<OpFoldResult> strides(4, b.getIndexAttr(1));
  auto sliceType =
      RankedTensorType::get({ShapedType::kDynamic, width}, st.getElementType());
  Value slice = b.create<tensor::ExtractSliceOp>(loc, sliceType, src, offs,
                                                 sizes, strides);
  auto padType = RankedTensorType::get({full, width}, st.getElementType());
  Value zero =
      b.create<arith::ConstantOp>(loc, b.getZeroAttr(st.getElementType()));
  return tensor::createPadHighOp(padType, slice, zero, /*nofold=*/false, loc,
                                 b);
}

Value tileToF32(OpBuilder &b, Location loc, Value t, bool transpose,
                Value mul) {
  auto tt = cast<RankedTensorType>(t.getType());
  const int64_t r = tt.getDimSize(0), c = tt.getDimSize(1);
  SmallVector<int64_t> shape =
      transpose ? SmallVector<int64_t>{c, r} : SmallVector<int64_t>{r, c};
  Value empty = b.create<tensor::EmptyOp>(loc, shape, b.getF32Type());
  AffineMap id = b.getMultiDimIdentityMap(2);
  AffineMap tr =
      AffineMap::getPermutationMap(ArrayRef<unsigned>{1, 0}, b.getContext());
  return b
      .create<linalg::GenericOp>(
          loc, empty.getType(), ValueRange{t}, ValueRange{empty},
          ArrayRef<AffineMap>{transpose ? tr : id, id}, iteratorTypes(2),
          [&](OpBuilder &g, Location l, ValueRange args) {
            Value x = args[0];
            if (!x.getType().isF32())
              x = g.create<arith::ExtFOp>(l, g.getF32Type(), x);
            if (mul)
              x = g.create<arith::MulFOp>(l, x, mul);
            g.create<linalg::YieldOp>(l, x);
          })
      .getResult(0);
}

Value loadHeadScales(OpBuilder &b, Location loc, Value src, Value batch,
                     Value t0, Value rows, Value head, int64_t full) {
  SmallVector<OpFoldResult> offs = {batch, t0, head};
  SmallVector<OpFoldResult> sizes = {b.getIndexAttr(1), rows,
                                     b.getIndexAttr(1)};
  SmallVector<OpFoldResult> strides(3, b.getIndexAttr(1));
  auto sliceType =
      RankedTensorType::get({ShapedType::kDynamic}, b.getF32Type());
  Value slice = b.create<tensor::ExtractSliceOp>(loc, sliceType, src, offs,
                                                 sizes, strides);
  Value zero = b.create<arith::ConstantOp>(loc, b.getF32FloatAttr(0.0f));
  return tensor::createPadHighOp(RankedTensorType::get({full}, b.getF32Type()),
                                 slice, zero,
                                 /*nofold=*/false, loc, b);
}

Value kvTileToF32(OpBuilder &b, Location loc, Value t, Value scales,
                  bool transpose) {
  if (!scales)
    return tileToF32(b, loc, t, transpose, Value());
  auto tt = cast<RankedTensorType>(t.getType());
  const int64_t r = tt.getDimSize(0), c = tt.getDimSize(1);
  SmallVector<int64_t> shape =
      transpose ? SmallVector<int64_t>{c, r} : SmallVector<int64_t>{r, c};
  Value empty = b.create<tensor::EmptyOp>(loc, shape, b.getF32Type());
  MLIRContext *ctx = b.getContext();
  AffineMap id = b.getMultiDimIdentityMap(2);
  AffineMap tr = AffineMap::getPermutationMap(ArrayRef<unsigned>{1, 0}, ctx);
  // The tile's row (a token) is the result's column when transposed.
  AffineMap row =
      AffineMap::get(2, 0, {b.getAffineDimExpr(transpose ? 1 : 0)}, ctx);
  return b
      .create<linalg::GenericOp>(
          loc, empty.getType(), ValueRange{t, scales}, ValueRange{empty},
          ArrayRef<AffineMap>{transpose ? tr : id, row, id}, iteratorTypes(2),
          [&](OpBuilder &g, Location l, ValueRange args) {
            Value x = g.create<arith::SIToFPOp>(l, g.getF32Type(), args[0]);
            g.create<linalg::YieldOp>(
                l, g.create<arith::MulFOp>(l, x, args[1]).getResult());
          })
      .getResult(0);
}

Value queryScaleOf(OpBuilder &b, Location loc, AttentionOp op) {
  Value scale;
  if (const float attr = op.getScale().convertToFloat(); attr != 1.0f)
    scale = b.create<arith::ConstantOp>(loc, b.getF32FloatAttr(attr));
  if (Value factor = op.getScaleFactor()) {
    Value f = b.create<tensor::ExtractOp>(
        loc, factor, ValueRange{b.create<arith::ConstantIndexOp>(loc, 0)});
    scale = scale ? b.create<arith::MulFOp>(loc, scale, f).getResult() : f;
  }
  return scale;
}

Value keyLengthOf(OpBuilder &b, Location loc, AttentionOp op) {
  if (Value table = op.getBlockTable()) {
    IndexMath im{b, loc};
    return im.mul(b.create<tensor::DimOp>(loc, table, 1),
                  im.c(op.kvBlockSize()));
  }
  return b.create<tensor::DimOp>(loc, op.getKey(), 1);
}

int64_t pagedKeyTile(int64_t keyTile, int64_t block) {
  for (int64_t t = std::min(keyTile, block); t > 1; --t)
    if (block % t == 0 && (t <= 16 || t % 16 == 0))
      return t;
  return 1;
}

int64_t keyTileFor(AttentionOp op, int64_t keyTile) {
  if (!op.getBlockTable())
    return keyTile;
  return pagedKeyTile(keyTile, op.kvBlockSize());
}

FlashTile FlashTile::forOp(OpBuilder &b, Location loc, AttentionOp op,
                           Value batch, Value tkv, int64_t rows,
                           int64_t keyTile) {
  FlashTile ft;
  ft.k = op.getKey();
  ft.v = op.getValue();
  ft.kScales = op.getKScales();
  ft.vScales = op.getVScales();
  ft.batch = batch;
  ft.tkv = tkv;
  if (Value table = op.getBlockTable()) {
    ft.blockTable = table;
    ft.kvBlock = op.kvBlockSize();
  }
  if (Value lens = op.getKvLens()) {
    Value l32 = b.create<tensor::ExtractOp>(loc, lens, ValueRange{batch});
    ft.kvLen = b.create<arith::IndexCastOp>(loc, b.getIndexType(), l32);
  }
  ft.rows = rows;
  ft.keyTile = keyTile;
  ft.clauses = op.maskClauses();
  if (std::optional<APFloat> c = op.getSoftcap())
    ft.softcap = c->convertToFloat();
  return ft;
}

namespace {
bool isCausal(MaskAttr m) { return m.getCausal() || m.getWindow() > 0; }
} // namespace

SmallVector<KeyTileRange> FlashTile::keyTileRanges(OpBuilder &b, Location loc,
                                                   Value firstPos,
                                                   Value lastPos) const {
  IndexMath im{b, loc};
  const int64_t KT = keyTile;
  Value numKT = im.ceilDiv(tkv, im.c(KT));
  SmallVector<KeyTileRange> ranges;
  for (MaskAttr m : clauses) {
    Value hi = numKT, lo = im.c(0);
    if (isCausal(m))
      hi = im.min(hi, im.add(im.floorDiv(lastPos, im.c(KT)), im.c(1)));
    if (m.getPadding())
      hi = im.min(hi, im.ceilDiv(kvLen, im.c(KT)));
    if (m.getSink() > 0)
      hi = im.min(hi, im.c((m.getSink() + KT - 1) / KT));
    if (m.getWindow() > 0)
      lo = im.max(
          im.c(0),
          im.floorDiv(im.add(im.sub(firstPos, im.c(m.getWindow())), im.c(1)),
                      im.c(KT)));
    ranges.push_back({lo, im.max(hi, lo)});
  }
  return ranges;
}

KeyTileRange hullOf(IndexMath &im, ArrayRef<KeyTileRange> ranges) {
  KeyTileRange h = ranges.front();
  for (const KeyTileRange &r : ranges.drop_front()) {
    h.lo = im.min(h.lo, r.lo);
    h.hi = im.max(h.hi, r.hi);
  }
  return h;
}

FlashTile::KeyTileRows FlashTile::locate(OpBuilder &b, Location l,
                                         Value kt) const {
  IndexMath bm{b, l};
  KeyTileRows at;
  at.k0 = bm.mul(kt, bm.c(keyTile));
  at.rows = bm.min(bm.c(keyTile), bm.sub(tkv, at.k0));
  // Where the tile's rows are: rows [k0, k0 + rows) of this batch, or in
  // a paged cache (KT divides BLOCK: one block holds the tile) slots
  // [k0 % BLOCK, ...) of block block_table[batch, k0 / BLOCK]. The table
  // column and the block index are clamped, so no table makes the tile
  // leave the table or the pool, and the rows stop at the sequence's
  // length: slots past it may never have been written (NaN), and a NaN
  // times its zero weight in P V would still be NaN.
  at.from = batch;
  at.t0 = at.k0;
  if (blockTable) {
    Value column =
        bm.min(bm.floorDiv(at.k0, bm.c(kvBlock)),
               bm.sub(b.create<tensor::DimOp>(l, blockTable, 1), bm.c(1)));
    Value entry =
        b.create<tensor::ExtractOp>(l, blockTable, ValueRange{batch, column});
    Value lastBlock = bm.sub(b.create<tensor::DimOp>(l, k, 0), bm.c(1));
    at.from =
        bm.max(bm.c(0),
               bm.min(b.create<arith::IndexCastOp>(l, b.getIndexType(), entry),
                      lastBlock));
    at.t0 = b.create<arith::RemSIOp>(l, at.k0, bm.c(kvBlock));
    at.rows = bm.max(bm.c(0), bm.min(at.rows, bm.sub(kvLen, at.k0)));
  }
  return at;
}

SmallVector<Value> FlashTile::step(RewriterBase &rw, Location l, Value qTile,
                                   const KeyTileRows &at, Value acc, Value m,
                                   Value lsum) const {
  const int64_t QT = rows, KT = keyTile;
  Type f32 = rw.getF32Type();
  const Value k0 = at.k0, from = at.from, t0 = at.t0, kRows = at.rows;
  // The K/V tiles of this head, widened to f32 once (int8: times each
  // row's scale).
  auto scalesOf = [&](Value src) {
    return src ? loadHeadScales(rw, l, src, from, t0, kRows, kvHead, KT)
               : Value();
  };
  // (Rows, then scales, in statements of their own: the IR's order does
  // not depend on the compiler's order of evaluating arguments.)
  Value kRowsTile = loadHeadRows(rw, l, k, from, t0, kRows, kvHead, KT);
  Value kT = kvTileToF32(rw, l, kRowsTile, scalesOf(kScales),
                         /*transpose=*/true);
  Value vRowsTile = loadHeadRows(rw, l, v, from, t0, kRows, kvHead, KT);
  Value vTile = kvTileToF32(rw, l, vRowsTile, scalesOf(vScales),
                            /*transpose=*/false);
  auto filled = [&](ArrayRef<int64_t> shape, float value) {
    return filledTensor(rw, l, shape, value);
  };
  auto zeros = [&](ArrayRef<int64_t> shape) {
    return identityTensor(rw, l, shape, arith::AtomicRMWKind::addf);
  };

  // visible(i, j) for row i, key j of this tile: some conjunction of the
  // mask shows the key.
  auto visible = [&](OpBuilder &g, Location gl) -> Value {
    Value i = g.create<linalg::IndexOp>(gl, 0);
    Value j = g.create<linalg::IndexOp>(gl, 1);
    IndexMath gm{g, gl};
    Value key = gm.add(k0, j);
    Value pos = position(g, gl, i);
    auto both = [&](Value a, Value c) {
      return g.create<arith::AndIOp>(gl, a, c).getResult();
    };
    auto cmp = [&](arith::CmpIPredicate p, Value a, Value c) {
      return g.create<arith::CmpIOp>(gl, p, a, c).getResult();
    };
    Value any;
    for (MaskAttr mc : clauses) {
      Value vis = cmp(arith::CmpIPredicate::slt, key, tkv);
      if (isCausal(mc))
        vis = both(vis, cmp(arith::CmpIPredicate::sle, key, pos));
      if (mc.getWindow() > 0)
        vis = both(vis, cmp(arith::CmpIPredicate::sgt, key,
                            gm.sub(pos, gm.c(mc.getWindow()))));
      if (mc.getPadding())
        vis = both(vis, cmp(arith::CmpIPredicate::slt, key, kvLen));
      if (mc.getSink() > 0)
        vis =
            both(vis, cmp(arith::CmpIPredicate::slt, key, gm.c(mc.getSink())));
      any = any ? g.create<arith::OrIOp>(gl, any, vis).getResult() : vis;
    }
    return any;
  };
  // S = Q K^T, the score modifiers, then the mask.
  Value s = rw.create<linalg::MatmulOp>(
                  l, TypeRange{RankedTensorType::get({QT, KT}, f32)},
                  ValueRange{qTile, kT}, ValueRange{zeros({QT, KT})})
                .getResult(0);
  if (softcap)
    s = capScores(rw, l, s, *softcap);
  if (slope) {
    // s += slope * (key - pos(i)): the ALiBi distance.
    auto distance = [&](OpBuilder &g, Location gl) -> Value {
      IndexMath gm{g, gl};
      Value key = gm.add(k0, g.create<linalg::IndexOp>(gl, 1));
      Value pos = position(g, gl, g.create<linalg::IndexOp>(gl, 0));
      Value d =
          g.create<arith::IndexCastOp>(gl, g.getI32Type(), gm.sub(key, pos));
      return g.create<arith::SIToFPOp>(gl, g.getF32Type(), d);
    };
    s = isa<RankedTensorType>(slope.getType())
            ? addAlibiBiasPerRow(rw, l, s, slope, distance)
            : addAlibiBias(rw, l, s, slope, distance);
  }
  Value sm = maskScores(rw, l, s, visible);
  // The online softmax step (OnlineSoftmax.h). alpha before m is updated
  // in place; m' is written into the carried tensor, so the loop yields
  // the value it was given and bufferization keeps one running-max buffer.
  Value tm = computeRowwiseReduction(rw, l, sm, filled({QT}, kLowestScore),
                                     arith::AtomicRMWKind::maximumf);
  Value alpha = computeRescale(rw, l, m, tm);
  Value mNew = updateRunningMax(rw, l, tm, m);
  Value p = computeProbabilities(rw, l, mNew, sm, visible);
  Value rowSum = computeRowwiseReduction(rw, l, p, zeros({QT}),
                                         arith::AtomicRMWKind::addf);
  Value lNew = updateRunningSum(rw, l, alpha, rowSum, lsum);
  // acc' = acc a + P V: rescale in place, then accumulate the matmul into
  // it (no separate P V buffer).
  Value accScaled = scaleAccumulator(rw, l, alpha, acc);
  Value accNew =
      rw.create<linalg::MatmulOp>(l, TypeRange{acc.getType()},
                                  ValueRange{p, vTile}, ValueRange{accScaled})
          .getResult(0);
  return {accNew, mNew, lNew};
}

SmallVector<Value>
FlashTile::stepIfVisible(RewriterBase &rw, Location l, Value qTile,
                         ArrayRef<KeyTileRange> ranges, Value kt, ValueRange it,
                         std::optional<KeyTileRows> located) const {
  auto stepHere = [&] {
    return step(rw, l, qTile, located ? *located : locate(rw, l, kt), it[0],
                it[1], it[2]);
  };
  if (ranges.size() == 1)
    return stepHere();
  // A union: visit the tile only if some conjunction's range holds it;
  // otherwise the state passes through unchanged.
  Value inRange;
  for (const KeyTileRange &r : ranges) {
    Value in = rw.create<arith::AndIOp>(
        l, rw.create<arith::CmpIOp>(l, arith::CmpIPredicate::sge, kt, r.lo),
        rw.create<arith::CmpIOp>(l, arith::CmpIPredicate::slt, kt, r.hi));
    inRange =
        inRange ? rw.create<arith::OrIOp>(l, inRange, in).getResult() : in;
  }
  auto visit = rw.create<scf::IfOp>(l, TypeRange(it), inRange,
                                    /*withElseRegion=*/true);
  OpBuilder::InsertionGuard guard(rw);
  rw.setInsertionPointToStart(&visit.getThenRegion().front());
  rw.create<scf::YieldOp>(l, stepHere());
  rw.setInsertionPointToStart(&visit.getElseRegion().front());
  rw.create<scf::YieldOp>(l, it);
  return SmallVector<Value>(visit.getResults());
}

SmallVector<Value> FlashTile::buildKeyLoop(RewriterBase &rw, Location loc,
                                           Value qTile,
                                           ArrayRef<KeyTileRange> ranges,
                                           Value lo, Value hi,
                                           ValueRange init) const {
  IndexMath im{rw, loc};
  auto loop = rw.create<scf::ForOp>(
      loc, lo, hi, im.c(1), init,
      [&](OpBuilder &b, Location l, Value kt, ValueRange it) {
        // Inside the loop: re-enter the rewriter at b's point.
        OpBuilder::InsertionGuard guard(rw);
        rw.setInsertionPoint(b.getInsertionBlock(), b.getInsertionPoint());
        rw.create<scf::YieldOp>(l, stepIfVisible(rw, l, qTile, ranges, kt, it));
      });
  return SmallVector<Value>(loop.getResults());
}

} // namespace mhagen::mha
