//===- LowerToLinalg.cpp - mha.attention to linalg on tensors -------------===//
//
// The flash form (docs/design.md §1):
//
//   scf.forall (b, head, qt) in (B, h, ceil(Tq / QT)):
//     Q tile [QT x dk] (padded, scaled, f32)
//     acc = 0 [QT x dv], m = lowest [QT], l = 0 [QT]
//       (with sinks: m = sink[head], l = 1: the sink is a key of value 0)
//     scf.for kt in [lo, hi)            -- the key tiles the mask does not
//                                         hide; lo/hi depend on qt and b
//      (scf.if kt in a range)           -- a union of masks: the hull of
//                                         its conjunctions' ranges, and a
//                                         branch around tiles in none
//       K^T tile [dk x KT], V tile [KT x dv] of K/V head g = head/(h/kv)
//       S  = Q K^T; softcap, ALiBi (if the op has them)
//       S  = hidden keys -> lowest          (masks as index arithmetic)
//       m' = max(m, rowmax S);  P = exp(S - m') (0 where hidden)
//       a  = exp(m - m');  l = l a + rowsum P;  acc = acc a + P V;  m = m'
//       (acc is rescaled in place and P V accumulated into it)
//     out tile = l > 0 ? acc / l : 0
//
// All values stay finite ("lowest" is kLowestScore, -1e30), so fast-math
// lowering is safe. The softmax steps are the named helpers of
// OnlineSoftmax.h; this pattern tiles, bounds the key loop by the mask and
// stores the tiles.
#include "OnlineSoftmax.h"

#include "mhagen/mlir/MhaDialect.h"
#include "mhagen/mlir/MhaPasses.h"
#include "mhagen/spec/SoftmaxNumerics.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tensor/Utils/Utils.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mhagen::mha {
#define GEN_PASS_DEF_MHALOWERTOLINALG
#include "mhagen/mlir/MhaPasses.h.inc"
} // namespace mhagen::mha

using namespace mlir;
using namespace mhagen::mha;
using mhagen::kLowestScore;

namespace {

// Small helpers for index arithmetic.
struct IndexMath {
  OpBuilder &b;
  Location loc;
  Value c(int64_t v) { return b.create<arith::ConstantIndexOp>(loc, v); }
  Value add(Value x, Value y) { return b.create<arith::AddIOp>(loc, x, y); }
  Value sub(Value x, Value y) { return b.create<arith::SubIOp>(loc, x, y); }
  Value mul(Value x, Value y) { return b.create<arith::MulIOp>(loc, x, y); }
  Value min(Value x, Value y) { return b.create<arith::MinSIOp>(loc, x, y); }
  Value max(Value x, Value y) { return b.create<arith::MaxSIOp>(loc, x, y); }
  Value floorDiv(Value x, Value y) {
    return b.create<arith::FloorDivSIOp>(loc, x, y);
  }
  Value ceilDiv(Value x, Value y) {
    return b.create<arith::CeilDivSIOp>(loc, x, y);
  }
};

SmallVector<utils::IteratorType> iters(int parallel, int reduction = 0) {
  SmallVector<utils::IteratorType> it(parallel, utils::IteratorType::parallel);
  it.append(reduction, utils::IteratorType::reduction);
  return it;
}

struct LowerAttention : OpRewritePattern<AttentionOp> {
  LowerAttention(MLIRContext *ctx, int64_t qt, int64_t kt)
      : OpRewritePattern(ctx), QT(qt), KT(kt) {}

  LogicalResult matchAndRewrite(AttentionOp op,
                                PatternRewriter &rw) const override {
    Location loc = op.getLoc();
    IndexMath im{rw, loc};
    auto qType = cast<RankedTensorType>(op.getQuery().getType());
    auto kType = cast<RankedTensorType>(op.getKey().getType());
    auto vType = cast<RankedTensorType>(op.getValue().getType());
    const int64_t h = op.getNumHeads(), kv = op.getNumKvHeads();
    const int64_t group = h / kv;
    const int64_t dk = qType.getDimSize(3), dv = vType.getDimSize(3);
    Type et = qType.getElementType();
    Type f32 = rw.getF32Type();
    const SmallVector<MaskAttr> clauses = op.maskClauses();
    auto isCausal = [](MaskAttr m) {
      return m.getCausal() || m.getWindow() > 0;
    };
    const float scale = op.getScale().convertToFloat();
    std::optional<float> softcap;
    if (std::optional<APFloat> c = op.getSoftcap())
      softcap = c->convertToFloat();

    Value q = op.getQuery(), k = op.getKey(), v = op.getValue();
    Value lens = op.getKvLens();
    Value B = rw.create<tensor::DimOp>(loc, q, 0);
    Value Tq = rw.create<tensor::DimOp>(loc, q, 1);
    Value Tkv = rw.create<tensor::DimOp>(loc, k, 1);
    Value numQT = im.ceilDiv(Tq, im.c(QT));
    Value numKT = im.ceilDiv(Tkv, im.c(KT));
    Value tailOffset = im.sub(Tkv, Tq); // query i sits at i + Tkv - Tq

    // Shared outputs: the result, and with lse the log-sum-exp.
    SmallVector<Value> shared = {op.getInit()};
    if (Value lseInit = op.getLseInit())
      shared.push_back(lseInit);
    auto forall = rw.create<scf::ForallOp>(
        loc,
        ArrayRef<OpFoldResult>{rw.getIndexAttr(0), rw.getIndexAttr(0),
                               rw.getIndexAttr(0)},
        ArrayRef<OpFoldResult>{B, rw.getIndexAttr(h), numQT},
        ArrayRef<OpFoldResult>{rw.getIndexAttr(1), rw.getIndexAttr(1),
                               rw.getIndexAttr(1)},
        shared, std::nullopt);
    Block *body = forall.getBody();
    rw.setInsertionPointToStart(body);
    Value bIv = body->getArgument(0), hIv = body->getArgument(1),
          qtIv = body->getArgument(2), out = body->getArgument(3);
    Value lseOut = op.getLseInit() ? body->getArgument(4) : Value();
    Value gIv = rw.create<arith::DivUIOp>(loc, hIv, im.c(group));
    Value q0 = im.mul(qtIv, im.c(QT));
    Value qRows = im.min(im.c(QT), im.sub(Tq, q0));
    Value kvLen;
    if (lens) {
      Value l32 = rw.create<tensor::ExtractOp>(loc, lens, ValueRange{bIv});
      kvLen = rw.create<arith::IndexCastOp>(loc, rw.getIndexType(), l32);
    }
    // per_sequence (a ragged batch): query i sits at i + kv_lens[b] - Tq,
    // its own sequence's last positions.
    Value offset = op.getPerSequence() ? im.sub(kvLen, Tq) : tailOffset;

    // A [rows x width] slice of a [B, T, heads, width] tensor at token t0,
    // padded to `full` rows with zeros.
    auto tile = [&](Value src, Value t0, Value rows, Value head,
                    int64_t full) -> Value {
      auto st = cast<RankedTensorType>(src.getType());
      int64_t width = st.getDimSize(3);
      SmallVector<OpFoldResult> offs = {bIv, t0, head, rw.getIndexAttr(0)};
      SmallVector<OpFoldResult> sizes = {
          rw.getIndexAttr(1), rows, rw.getIndexAttr(1), rw.getIndexAttr(width)};
      SmallVector<OpFoldResult> strides(4, rw.getIndexAttr(1));
      auto sliceType = RankedTensorType::get({ShapedType::kDynamic, width},
                                             st.getElementType());
      Value slice = rw.create<tensor::ExtractSliceOp>(loc, sliceType, src, offs,
                                                      sizes, strides);
      auto padType = RankedTensorType::get({full, width}, st.getElementType());
      Value zero = rw.create<arith::ConstantOp>(
          loc, rw.getZeroAttr(st.getElementType()));
      return tensor::createPadHighOp(padType, slice, zero, /*nofold=*/false,
                                     loc, rw);
    };
    // f32 copy of a tile, optionally transposed and scaled.
    auto toF32 = [&](Value t, bool transpose, Value mul) -> Value {
      auto tt = cast<RankedTensorType>(t.getType());
      int64_t r = tt.getDimSize(0), c = tt.getDimSize(1);
      SmallVector<int64_t> shape =
          transpose ? SmallVector<int64_t>{c, r} : SmallVector<int64_t>{r, c};
      Value empty = rw.create<tensor::EmptyOp>(loc, shape, f32);
      AffineMap id = rw.getMultiDimIdentityMap(2);
      AffineMap tr = AffineMap::getPermutationMap(ArrayRef<unsigned>{1, 0},
                                                  rw.getContext());
      return rw
          .create<linalg::GenericOp>(
              loc, empty.getType(), ValueRange{t}, ValueRange{empty},
              ArrayRef<AffineMap>{transpose ? tr : id, id}, iters(2),
              [&](OpBuilder &b, Location l, ValueRange args) {
                Value x = args[0];
                if (!x.getType().isF32())
                  x = b.create<arith::ExtFOp>(l, b.getF32Type(), x);
                if (mul)
                  x = b.create<arith::MulFOp>(l, x, mul);
                b.create<linalg::YieldOp>(l, x);
              })
          .getResult(0);
    };
    auto filled = [&](ArrayRef<int64_t> shape, float value) -> Value {
      return filledTensor(rw, loc, shape, value);
    };
    auto zeros = [&](ArrayRef<int64_t> shape) -> Value {
      return identityTensor(rw, loc, shape, arith::AtomicRMWKind::addf);
    };

    // The query tile, scaled once: by the attribute, times the call's
    // scale_factor[0] when given (scale = runtime).
    Value scaleValue;
    if (scale != 1.0f)
      scaleValue = rw.create<arith::ConstantOp>(loc, rw.getF32FloatAttr(scale));
    if (Value factor = op.getScaleFactor()) {
      Value f = rw.create<tensor::ExtractOp>(loc, factor, ValueRange{im.c(0)});
      scaleValue =
          scaleValue ? rw.create<arith::MulFOp>(loc, scaleValue, f).getResult()
                     : f;
    }
    Value qTile = toF32(tile(q, q0, qRows, hIv, QT), false, scaleValue);

    // The key tiles each conjunction of the mask leaves, [lo, hi), by the
    // rule of docs/design.md §2 "Tile skipping" (clauseKeyTiles): a tile
    // outside all of them is hidden from every row of this query tile.
    Value firstPos = im.add(q0, offset);
    Value lastPos = im.add(im.sub(im.add(q0, qRows), im.c(1)), offset);
    struct TileRange {
      Value lo, hi;
    };
    SmallVector<TileRange> ranges;
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
    // The loop runs over the hull of the ranges; with more than one, a
    // tile in none of them (the gap between a window and the sink keys)
    // is skipped by a branch around the whole step.
    Value lo = ranges[0].lo, hi = ranges[0].hi;
    for (const TileRange &r : ArrayRef(ranges).drop_front()) {
      lo = im.min(lo, r.lo);
      hi = im.max(hi, r.hi);
    }

    // Score modifiers of this head (docs/design.md §2): its ALiBi slope,
    // and its learned sink, which starts the state as a key of value 0
    // that every row sees (m = sink, l = 1) -- a row with no visible key
    // then still outputs 0.
    Value slope;
    if (Value slopes = op.getSlopes())
      slope = rw.create<tensor::ExtractOp>(loc, slopes, ValueRange{hIv});
    Value acc0 = zeros({QT, dv});
    Value m0, l0;
    if (Value sinks = op.getSinks()) {
      Value sink = rw.create<tensor::ExtractOp>(loc, sinks, ValueRange{hIv});
      Value empty = rw.create<tensor::EmptyOp>(loc, ArrayRef<int64_t>{QT}, f32);
      m0 = rw.create<linalg::FillOp>(loc, sink, empty).getResult(0);
      l0 = filled({QT}, 1.0f);
    } else {
      m0 = filled({QT}, kLowestScore);
      l0 = zeros({QT});
    }

    // One step of the online softmax over key tile kt, at the rewriter's
    // insertion point: returns (acc', m', l').
    auto step = [&](Location l, Value kt, Value acc, Value m,
                    Value lsum) -> SmallVector<Value> {
      IndexMath bm{rw, l};
      Value k0 = bm.mul(kt, bm.c(KT));
      Value kRows = bm.min(bm.c(KT), bm.sub(Tkv, k0));
      Value kT =
          toF32(tile(k, k0, kRows, gIv, KT), /*transpose=*/true, Value());
      Value vTile = toF32(tile(v, k0, kRows, gIv, KT), false, Value());

      // visible(i, j) for row i, key j of this tile.
      auto visible = [&](OpBuilder &g, Location gl) -> Value {
        Value i = g.create<linalg::IndexOp>(gl, 0);
        Value j = g.create<linalg::IndexOp>(gl, 1);
        IndexMath gm{g, gl};
        Value key = gm.add(k0, j);
        Value pos = gm.add(gm.add(q0, i), offset);
        auto both = [&](Value a, Value c) {
          return g.create<arith::AndIOp>(gl, a, c).getResult();
        };
        auto cmp = [&](arith::CmpIPredicate p, Value a, Value c) {
          return g.create<arith::CmpIOp>(gl, p, a, c).getResult();
        };
        // Some conjunction of the mask shows the key.
        Value any;
        for (MaskAttr mc : clauses) {
          Value vis = cmp(arith::CmpIPredicate::slt, key, Tkv);
          if (isCausal(mc))
            vis = both(vis, cmp(arith::CmpIPredicate::sle, key, pos));
          if (mc.getWindow() > 0)
            vis = both(vis, cmp(arith::CmpIPredicate::sgt, key,
                                gm.sub(pos, gm.c(mc.getWindow()))));
          if (mc.getPadding())
            vis = both(vis, cmp(arith::CmpIPredicate::slt, key, kvLen));
          if (mc.getSink() > 0)
            vis = both(vis,
                       cmp(arith::CmpIPredicate::slt, key, gm.c(mc.getSink())));
          any = any ? g.create<arith::OrIOp>(gl, any, vis).getResult() : vis;
        }
        return any;
      };
      // S = Q K^T, then the mask.
      Value s = rw.create<linalg::MatmulOp>(
                      l, TypeRange{RankedTensorType::get({QT, KT}, f32)},
                      ValueRange{qTile, kT}, ValueRange{zeros({QT, KT})})
                    .getResult(0);
      // The score modifiers, then the mask.
      if (softcap)
        s = capScores(rw, l, s, *softcap);
      if (slope) {
        // s += slope * (key - pos(i)): the ALiBi distance.
        auto distance = [&](OpBuilder &g, Location gl) -> Value {
          IndexMath gm{g, gl};
          Value key = gm.add(k0, g.create<linalg::IndexOp>(gl, 1));
          Value pos =
              gm.add(gm.add(q0, g.create<linalg::IndexOp>(gl, 0)), offset);
          Value d = g.create<arith::IndexCastOp>(gl, g.getI32Type(),
                                                 gm.sub(key, pos));
          return g.create<arith::SIToFPOp>(gl, g.getF32Type(), d);
        };
        s = addAlibiBias(rw, l, s, slope, distance);
      }
      Value sm = maskScores(rw, l, s, visible);
      // The online softmax step (OnlineSoftmax.h).
      Value tm = computeRowwiseReduction(rw, l, sm, filled({QT}, kLowestScore),
                                         arith::AtomicRMWKind::maximumf);
      // alpha before m is updated in place; m' written into the carried
      // tensor, so the loop yields the value it was given and
      // bufferization keeps one running-max buffer.
      Value alpha = computeRescale(rw, l, m, tm);
      Value mNew = updateRunningMax(rw, l, tm, m);
      Value p = computeProbabilities(rw, l, mNew, sm, visible);
      Value rowSum = computeRowwiseReduction(rw, l, p, zeros({QT}),
                                             arith::AtomicRMWKind::addf);
      Value lNew = updateRunningSum(rw, l, alpha, rowSum, lsum);
      // acc' = acc a + P V: rescale in place, then accumulate the
      // matmul into it (no separate P V buffer).
      Value accScaled = scaleAccumulator(rw, l, alpha, acc);
      Value accNew = rw.create<linalg::MatmulOp>(l, TypeRange{acc.getType()},
                                                 ValueRange{p, vTile},
                                                 ValueRange{accScaled})
                         .getResult(0);
      return {accNew, mNew, lNew};
    };
    auto loop = rw.create<scf::ForOp>(
        loc, lo, hi, im.c(1), ValueRange{acc0, m0, l0},
        [&](OpBuilder &b, Location l, Value kt, ValueRange it) {
          // Inside the loop: re-enter the rewriter at b's point.
          OpBuilder::InsertionGuard guard(rw);
          rw.setInsertionPoint(b.getInsertionBlock(), b.getInsertionPoint());
          if (ranges.size() == 1) {
            rw.create<scf::YieldOp>(l, step(l, kt, it[0], it[1], it[2]));
            return;
          }
          // A union: visit the tile only if some conjunction's range holds
          // it; otherwise the state passes through unchanged.
          Value inRange;
          for (const TileRange &r : ranges) {
            Value in = rw.create<arith::AndIOp>(
                l,
                rw.create<arith::CmpIOp>(l, arith::CmpIPredicate::sge, kt,
                                         r.lo),
                rw.create<arith::CmpIOp>(l, arith::CmpIPredicate::slt, kt,
                                         r.hi));
            inRange = inRange
                          ? rw.create<arith::OrIOp>(l, inRange, in).getResult()
                          : in;
          }
          auto visit = rw.create<scf::IfOp>(l, TypeRange(it), inRange,
                                            /*withElseRegion=*/true);
          rw.setInsertionPointToStart(&visit.getThenRegion().front());
          rw.create<scf::YieldOp>(l, step(l, kt, it[0], it[1], it[2]));
          rw.setInsertionPointToStart(&visit.getElseRegion().front());
          rw.create<scf::YieldOp>(l, it);
          rw.setInsertionPointAfter(visit);
          rw.create<scf::YieldOp>(l, visit.getResults());
        });

    // Normalise (a row that saw no key has l = 0 and outputs zeros), back
    // to the element type, and store the valid rows.
    Value accF = loop.getResult(0), lF = loop.getResult(2);
    Value outTile =
        rw.create<tensor::EmptyOp>(loc, ArrayRef<int64_t>{QT, dv}, et);
    Value normalized = normalizeRows(rw, loc, accF, lF, outTile);
    auto rowsType = RankedTensorType::get({ShapedType::kDynamic, dv}, et);
    Value valid = rw.create<tensor::ExtractSliceOp>(
        loc, rowsType, normalized,
        ArrayRef<OpFoldResult>{rw.getIndexAttr(0), rw.getIndexAttr(0)},
        ArrayRef<OpFoldResult>{qRows, rw.getIndexAttr(dv)},
        ArrayRef<OpFoldResult>{rw.getIndexAttr(1), rw.getIndexAttr(1)});
    // lse = m + log(l) of the valid rows.
    Value lseRows;
    if (lseOut) {
      Value lseTile = computeLogSumExp(rw, loc, loop.getResult(1), lF);
      lseRows = rw.create<tensor::ExtractSliceOp>(
          loc, RankedTensorType::get({ShapedType::kDynamic}, f32), lseTile,
          ArrayRef<OpFoldResult>{rw.getIndexAttr(0)},
          ArrayRef<OpFoldResult>{qRows},
          ArrayRef<OpFoldResult>{rw.getIndexAttr(1)});
    }
    auto term = cast<scf::InParallelOp>(body->getTerminator());
    rw.setInsertionPointToStart(term.getBody());
    if (lseOut)
      rw.create<tensor::ParallelInsertSliceOp>(
          loc, lseRows, lseOut, ArrayRef<OpFoldResult>{bIv, q0, hIv},
          ArrayRef<OpFoldResult>{rw.getIndexAttr(1), qRows, rw.getIndexAttr(1)},
          ArrayRef<OpFoldResult>(
              SmallVector<OpFoldResult>(3, rw.getIndexAttr(1))));
    rw.create<tensor::ParallelInsertSliceOp>(
        loc, valid, out,
        ArrayRef<OpFoldResult>{bIv, q0, hIv, rw.getIndexAttr(0)},
        ArrayRef<OpFoldResult>{rw.getIndexAttr(1), qRows, rw.getIndexAttr(1),
                               rw.getIndexAttr(dv)},
        ArrayRef<OpFoldResult>(
            SmallVector<OpFoldResult>(4, rw.getIndexAttr(1))));
    rw.replaceOp(op, forall.getResults());
    (void)kType;
    return success();
  }

  int64_t QT, KT;
};

struct MhaLowerToLinalgPass
    : public mhagen::mha::impl::MhaLowerToLinalgBase<MhaLowerToLinalgPass> {
  using MhaLowerToLinalgBase::MhaLowerToLinalgBase;
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<LowerAttention>(&getContext(), queryTile, keyTile);
    if (failed(
            applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
