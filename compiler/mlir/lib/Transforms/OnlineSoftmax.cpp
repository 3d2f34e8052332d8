//===- OnlineSoftmax.cpp - the online softmax on linalg tiles ------------===//
#include "OnlineSoftmax.h"

#include "mhagen/spec/SoftmaxNumerics.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include <limits>

using namespace mlir;

namespace mhagen::mha {

namespace {

SmallVector<utils::IteratorType> iters(int parallel, int reduction = 0) {
  SmallVector<utils::IteratorType> it(parallel, utils::IteratorType::parallel);
  it.append(reduction, utils::IteratorType::reduction);
  return it;
}

AffineMap id1(OpBuilder &b) { return b.getMultiDimIdentityMap(1); }
AffineMap id2(OpBuilder &b) { return b.getMultiDimIdentityMap(2); }
// (i, j) -> (i): a row vector broadcast along a tile's columns.
AffineMap row2(OpBuilder &b) {
  return AffineMap::get(2, 0, {b.getAffineDimExpr(0)}, b.getContext());
}

Value f32Constant(OpBuilder &b, Location loc, float v) {
  return b.create<arith::ConstantOp>(loc, b.getF32FloatAttr(v));
}

// An elementwise linalg.generic over `outs`' shape.
Value generic(OpBuilder &b, Location loc, Value out, ValueRange ins,
              ArrayRef<AffineMap> maps, int parallel, int reduction,
              function_ref<Value(OpBuilder &, Location, ValueRange)> body) {
  return b
      .create<linalg::GenericOp>(
          loc, out.getType(), ins, ValueRange{out}, maps,
          iters(parallel, reduction),
          [&](OpBuilder &g, Location gl, ValueRange args) {
            g.create<linalg::YieldOp>(gl, body(g, gl, args));
          })
      .getResult(0);
}

// NaN where the row's sum l is NaN (a non-finite visible score), else v.
// A row with l = 0 saw no key: it keeps its 0 even when a hidden key's
// non-finite value reached its accumulators as 0 x NaN.
Value selectNanWhereNan(OpBuilder &g, Location gl, Value l, Value v) {
  Value isNan = g.create<arith::CmpFOp>(gl, arith::CmpFPredicate::UNO, l, l);
  return g.create<arith::SelectOp>(
      gl, isNan, f32Constant(g, gl, std::numeric_limits<float>::quiet_NaN()),
      v);
}

// v where x is finite, NaN where x is an infinity or a NaN.
Value selectNanUnlessFinite(OpBuilder &g, Location gl, Value x, Value v) {
  Value finite = g.create<arith::CmpFOp>(
      gl, arith::CmpFPredicate::ONE, g.create<math::AbsFOp>(gl, x),
      f32Constant(g, gl, std::numeric_limits<float>::infinity()));
  return g.create<arith::SelectOp>(
      gl, finite, v,
      f32Constant(g, gl, std::numeric_limits<float>::quiet_NaN()));
}

} // namespace

Value filledTensor(OpBuilder &b, Location loc, ArrayRef<int64_t> shape,
                   float value) {
  Value empty = b.create<tensor::EmptyOp>(loc, shape, b.getF32Type());
  return b.create<linalg::FillOp>(loc, f32Constant(b, loc, value), empty)
      .getResult(0);
}

Value identityTensor(OpBuilder &b, Location loc, ArrayRef<int64_t> shape,
                     arith::AtomicRMWKind kind) {
  Value empty = b.create<tensor::EmptyOp>(loc, shape, b.getF32Type());
  Value identity = arith::getIdentityValue(kind, b.getF32Type(), b, loc,
                                           /*useOnlyFiniteValue=*/true);
  return b.create<linalg::FillOp>(loc, identity, empty).getResult(0);
}

// The cap would turn an infinite score finite: a non-finite score stays
// non-finite (NaN), so computeProbabilities still sees it.
Value capScores(OpBuilder &b, Location loc, Value s, float cap) {
  return generic(b, loc, s, ValueRange{}, {id2(b)}, 2, 0,
                 [&](OpBuilder &g, Location gl, ValueRange args) -> Value {
                   Value t = g.create<math::TanhOp>(
                       gl, g.create<arith::MulFOp>(
                               gl, args[0], f32Constant(g, gl, 1.0f / cap)));
                   Value capped =
                       g.create<arith::MulFOp>(gl, t, f32Constant(g, gl, cap));
                   return selectNanUnlessFinite(g, gl, args[0], capped);
                 });
}

Value addAlibiBias(OpBuilder &b, Location loc, Value s, Value slope,
                   const ElementFn &distance) {
  return generic(b, loc, s, ValueRange{}, {id2(b)}, 2, 0,
                 [&](OpBuilder &g, Location gl, ValueRange args) -> Value {
                   return g.create<arith::AddFOp>(
                       gl, args[0],
                       g.create<arith::MulFOp>(gl, slope, distance(g, gl)));
                 });
}

Value addAlibiBiasPerRow(OpBuilder &b, Location loc, Value s, Value slopes,
                         const ElementFn &distance) {
  return generic(b, loc, s, ValueRange{slopes}, {row2(b), id2(b)}, 2, 0,
                 [&](OpBuilder &g, Location gl, ValueRange args) -> Value {
                   return g.create<arith::AddFOp>(
                       gl, args[1],
                       g.create<arith::MulFOp>(gl, args[0], distance(g, gl)));
                 });
}

Value maskScores(OpBuilder &b, Location loc, Value s,
                 const VisibleFn &visible) {
  Value lowest = f32Constant(b, loc, kLowestScore);
  return generic(b, loc, s, ValueRange{}, {id2(b)}, 2, 0,
                 [&](OpBuilder &g, Location gl, ValueRange args) -> Value {
                   return g.create<arith::SelectOp>(gl, visible(g, gl), args[0],
                                                    lowest);
                 });
}

Value computeRowwiseReduction(OpBuilder &b, Location loc, Value tile,
                              Value init, arith::AtomicRMWKind kind) {
  return generic(b, loc, init, ValueRange{tile}, {id2(b), row2(b)}, 1, 1,
                 [&](OpBuilder &g, Location gl, ValueRange args) -> Value {
                   return arith::getReductionOp(kind, g, gl, args[0], args[1]);
                 });
}

Value computeRescale(OpBuilder &b, Location loc, Value m, Value tileMax) {
  Value init =
      identityTensor(b, loc, cast<RankedTensorType>(m.getType()).getShape(),
                     arith::AtomicRMWKind::addf);
  return generic(b, loc, init, ValueRange{m, tileMax}, {id1(b), id1(b), id1(b)},
                 1, 0,
                 [&](OpBuilder &g, Location gl, ValueRange args) -> Value {
                   Value mx = g.create<arith::MaximumFOp>(gl, args[0], args[1]);
                   return g.create<math::ExpOp>(
                       gl, g.create<arith::SubFOp>(gl, args[0], mx));
                 });
}

Value updateRunningMax(OpBuilder &b, Location loc, Value tileMax, Value m) {
  return generic(b, loc, m, ValueRange{tileMax}, {id1(b), id1(b)}, 1, 0,
                 [&](OpBuilder &g, Location gl, ValueRange args) -> Value {
                   return g.create<arith::MaximumFOp>(gl, args[0], args[1]);
                 });
}

// A visible score that is not finite (Q or K held an infinity or a NaN)
// gives a NaN probability: the row's sum and accumulators turn NaN, and
// normalizeRows / computeLogSumExp make the row NaN (docs/design.md §1).
// Hidden keys score kLowestScore and never do.
Value computeProbabilities(OpBuilder &b, Location loc, Value mNew, Value s,
                           const VisibleFn &visible) {
  Value zero = f32Constant(b, loc, 0.0f);
  return generic(b, loc, s, ValueRange{mNew}, {row2(b), id2(b)}, 2, 0,
                 [&](OpBuilder &g, Location gl, ValueRange args) -> Value {
                   Value e = g.create<math::ExpOp>(
                       gl, g.create<arith::SubFOp>(gl, args[1], args[0]));
                   return g.create<arith::SelectOp>(
                       gl, visible(g, gl),
                       selectNanUnlessFinite(g, gl, args[1], e), zero);
                 });
}

Value updateRunningSum(OpBuilder &b, Location loc, Value alpha, Value rowSum,
                       Value l) {
  return generic(
      b, loc, l, ValueRange{alpha, rowSum}, {id1(b), id1(b), id1(b)}, 1, 0,
      [&](OpBuilder &g, Location gl, ValueRange args) -> Value {
        return g.create<arith::AddFOp>(
            gl, g.create<arith::MulFOp>(gl, args[2], args[0]), args[1]);
      });
}

Value scaleAccumulator(OpBuilder &b, Location loc, Value alpha, Value acc) {
  return generic(b, loc, acc, ValueRange{alpha}, {row2(b), id2(b)}, 2, 0,
                 [&](OpBuilder &g, Location gl, ValueRange args) -> Value {
                   return g.create<arith::MulFOp>(gl, args[1], args[0]);
                 });
}

Value computeLogSumExp(OpBuilder &b, Location loc, Value m, Value l) {
  Value init =
      identityTensor(b, loc, cast<RankedTensorType>(m.getType()).getShape(),
                     arith::AtomicRMWKind::addf);
  return generic(
      b, loc, init, ValueRange{m, l}, {id1(b), id1(b), id1(b)}, 1, 0,
      [&](OpBuilder &g, Location gl, ValueRange args) -> Value {
        Value zero = f32Constant(g, gl, 0.0f);
        Value seen = g.create<arith::CmpFOp>(gl, arith::CmpFPredicate::OGT,
                                             args[1], zero);
        Value safe = g.create<arith::MaximumFOp>(gl, args[1],
                                                 f32Constant(g, gl, kTinySum));
        Value sum = g.create<arith::AddFOp>(gl, args[0],
                                            g.create<math::LogOp>(gl, safe));
        Type i32 = g.getI32Type();
        Value negInf = g.create<arith::ConstantOp>(
            gl, g.getI32IntegerAttr(static_cast<int32_t>(0xff800000u)));
        Value bits = g.create<arith::SelectOp>(
            gl, seen, g.create<arith::BitcastOp>(gl, i32, sum), negInf);
        Value lse = g.create<arith::BitcastOp>(gl, g.getF32Type(), bits);
        return selectNanWhereNan(g, gl, args[1], lse);
      });
}

Value normalizeRows(OpBuilder &b, Location loc, Value acc, Value l, Value out) {
  return generic(
      b, loc, out, ValueRange{acc, l}, {id2(b), row2(b), id2(b)}, 2, 0,
      [&](OpBuilder &g, Location gl, ValueRange args) -> Value {
        Value zero = f32Constant(g, gl, 0.0f);
        Value pos = g.create<arith::CmpFOp>(gl, arith::CmpFPredicate::OGT,
                                            args[1], zero);
        Value safe = g.create<arith::MaximumFOp>(gl, args[1],
                                                 f32Constant(g, gl, kTinySum));
        Value r = g.create<arith::SelectOp>(
            gl, pos, g.create<arith::DivFOp>(gl, args[0], safe), zero);
        r = selectNanWhereNan(g, gl, args[1], r);
        if (!args[2].getType().isF32())
          r = g.create<arith::TruncFOp>(gl, args[2].getType(), r);
        return r;
      });
}

} // namespace mhagen::mha
