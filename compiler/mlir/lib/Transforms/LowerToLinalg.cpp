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
//                                       (a paged cache: one slice of one
//                                        block through its table)
//       S  = Q K^T; softcap, ALiBi (if the op has them)
//       S  = hidden keys -> lowest          (masks as index arithmetic)
//       m' = max(m, rowmax S);  P = exp(S - m') (0 where hidden)
//       a  = exp(m - m');  l = l a + rowsum P;  acc = acc a + P V;  m = m'
//       (acc is rescaled in place and P V accumulated into it)
//     out tile = l > 0 ? acc / l : 0
//
// All values stay finite ("lowest" is kLowestScore, -1e30), so fast-math
// lowering is safe. The key loop and its softmax steps are FlashTile's
// (FlashTile.h, shared with mha-split-kv-decode); this pattern tiles the
// queries, bounds the key loop by the mask and stores the tiles.
#include "FlashTile.h"
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

struct LowerAttention : OpRewritePattern<AttentionOp> {
  LowerAttention(MLIRContext *ctx, int64_t qt, int64_t kt)
      : OpRewritePattern(ctx), QT(qt), KT(kt) {}

  LogicalResult matchAndRewrite(AttentionOp op,
                                PatternRewriter &rw) const override {
    Location loc = op.getLoc();
    IndexMath im{rw, loc};
    auto qType = cast<RankedTensorType>(op.getQuery().getType());
    auto vType = cast<RankedTensorType>(op.getValue().getType());
    const int64_t h = op.getNumHeads(), kv = op.getNumKvHeads();
    const int64_t group = h / kv;
    const int64_t dv = vType.getDimSize(3);
    Type et = qType.getElementType();
    Type f32 = rw.getF32Type();

    Value q = op.getQuery();
    Value B = rw.create<tensor::DimOp>(loc, q, 0);
    Value Tq = rw.create<tensor::DimOp>(loc, q, 1);
    Value Tkv = keyLengthOf(rw, loc, op);
    Value numQT = im.ceilDiv(Tq, im.c(QT));
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
    Value q0 = im.mul(qtIv, im.c(QT));
    Value qRows = im.min(im.c(QT), im.sub(Tq, q0));

    // A paged cache's key tile divides its block (FlashTile.h).
    FlashTile ft =
        FlashTile::forOp(rw, loc, op, bIv, Tkv, QT, keyTileFor(op, KT));
    ft.kvHead = rw.create<arith::DivUIOp>(loc, hIv, im.c(group));
    // per_sequence (a ragged batch): query i sits at i + kv_lens[b] - Tq,
    // its own sequence's last positions.
    Value offset = op.getPerSequence() ? im.sub(ft.kvLen, Tq) : tailOffset;
    ft.position = [q0, offset](OpBuilder &g, Location gl, Value row) {
      IndexMath gm{g, gl};
      return gm.add(gm.add(q0, row), offset);
    };

    // The query tile, scaled once (by the attribute, times the call's
    // scale_factor[0] with scale = runtime).
    Value scaleValue = queryScaleOf(rw, loc, op);
    Value qTile =
        tileToF32(rw, loc, loadHeadRows(rw, loc, q, bIv, q0, qRows, hIv, QT),
                  false, scaleValue);

    // The key tiles each conjunction of the mask leaves, and their hull
    // (with more than one, the loop branches around tiles in none).
    Value firstPos = im.add(q0, offset);
    Value lastPos = im.add(im.sub(im.add(q0, qRows), im.c(1)), offset);
    SmallVector<KeyTileRange> ranges =
        ft.keyTileRanges(rw, loc, firstPos, lastPos);
    KeyTileRange hull = hullOf(im, ranges);

    // Score modifiers of this head (docs/design.md §2): its ALiBi slope,
    // and its learned sink, which starts the state as a key of value 0
    // that every row sees (m = sink, l = 1) -- a row with no visible key
    // then still outputs 0.
    if (Value slopes = op.getSlopes())
      ft.slope = rw.create<tensor::ExtractOp>(loc, slopes, ValueRange{hIv});
    Value acc0 = identityTensor(rw, loc, {QT, dv}, arith::AtomicRMWKind::addf);
    Value m0, l0;
    if (Value sinks = op.getSinks()) {
      Value sink = rw.create<tensor::ExtractOp>(loc, sinks, ValueRange{hIv});
      Value empty = rw.create<tensor::EmptyOp>(loc, ArrayRef<int64_t>{QT}, f32);
      m0 = rw.create<linalg::FillOp>(loc, sink, empty).getResult(0);
      l0 = filledTensor(rw, loc, {QT}, 1.0f);
    } else {
      m0 = filledTensor(rw, loc, {QT}, kLowestScore);
      l0 = identityTensor(rw, loc, {QT}, arith::AtomicRMWKind::addf);
    }
    SmallVector<Value> state = ft.buildKeyLoop(rw, loc, qTile, ranges, hull.lo,
                                               hull.hi, {acc0, m0, l0});

    // Normalise (a row that saw no key has l = 0 and outputs zeros), back
    // to the element type, and store the valid rows.
    Value accF = state[0], lF = state[2];
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
      Value lseTile = computeLogSumExp(rw, loc, state[1], lF);
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
