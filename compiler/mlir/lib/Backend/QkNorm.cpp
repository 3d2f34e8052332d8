#include "QkNorm.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

namespace mhagen::mlirbackend {

using namespace mlir;

Value normalizeHeads(OpBuilder &b, Location l, const AttentionSpec &s,
                     Value heads, Value weight, ValueRange tDyn) {
  auto type = cast<RankedTensorType>(heads.getType());
  const int64_t T = type.getDimSize(1), count = type.getDimSize(2);
  const bool perHead = s.qk_norm.scope == QkNormScope::Head;
  const int64_t width = s.qk_norm.groupWidth(count, s.d_k);
  MLIRContext *ctx = b.getContext();
  auto dim = [&](unsigned i) { return b.getAffineDimExpr(i); };
  AffineMap id = b.getMultiDimIdentityMap(4);
  // The sum of squares of each head, [1, T, count].
  auto sumType = RankedTensorType::get({1, T, count}, b.getF32Type());
  AffineMap headOf = AffineMap::get(4, 0, {dim(0), dim(1), dim(2)}, ctx);
  // Sums over the fourth dimension.
  const SmallVector<utils::IteratorType> reduceLast = {
      utils::IteratorType::parallel, utils::IteratorType::parallel,
      utils::IteratorType::parallel, utils::IteratorType::reduction};
  Value zero = b.create<arith::ConstantOp>(l, b.getF32FloatAttr(0.0f));
  auto zeros = [&]() {
    return b
        .create<linalg::FillOp>(
            l, zero, b.create<tensor::EmptyOp>(l, sumType, tDyn).getResult())
        .getResult(0);
  };
  auto sumInto = [&](OpBuilder &g, Location gl, ValueRange a, Value term) {
    g.create<linalg::YieldOp>(
        gl, ValueRange{g.create<arith::AddFOp>(gl, a[1], term)});
  };
  Value squares =
      b.create<linalg::GenericOp>(
           l, TypeRange{sumType}, ValueRange{heads}, ValueRange{zeros()},
           ArrayRef<AffineMap>{id, headOf}, reduceLast,
           [&](OpBuilder &g, Location gl, ValueRange a) {
             sumInto(g, gl, a, g.create<arith::MulFOp>(gl, a[0], a[0]));
           })
          .getResult(0);
  if (!perHead) {
    // The token's total, kept once per head: the innermost dimension stays
    // static for the vectorizer.
    AffineMap otherHead = AffineMap::get(4, 0, {dim(0), dim(1), dim(3)}, ctx);
    squares =
        b.create<linalg::GenericOp>(
             l, TypeRange{sumType}, ValueRange{squares}, ValueRange{zeros()},
             ArrayRef<AffineMap>{otherHead, headOf}, reduceLast,
             [&](OpBuilder &g, Location gl, ValueRange a) {
               sumInto(g, gl, a, a[0]);
             })
            .getResult(0);
  }
  // The projection's weights [count*dk] as [count, dk], read per channel.
  AffineMap weightOf = AffineMap::get(4, 0, {dim(3)}, ctx);
  if (!perHead) {
    auto wType = cast<RankedTensorType>(weight.getType());
    weight = b.create<tensor::ExpandShapeOp>(
        l, RankedTensorType::get({count, s.d_k}, wType.getElementType()),
        weight, ArrayRef<ReassociationIndices>{{0, 1}});
    weightOf = AffineMap::get(4, 0, {dim(2), dim(3)}, ctx);
  }
  Value init = b.create<tensor::EmptyOp>(l, type, tDyn);
  return b
      .create<linalg::GenericOp>(
          l, TypeRange{type}, ValueRange{heads, squares, weight},
          ValueRange{init}, ArrayRef<AffineMap>{id, headOf, weightOf, id},
          SmallVector<utils::IteratorType>(4, utils::IteratorType::parallel),
          [&](OpBuilder &g, Location gl, ValueRange a) {
            // x / sqrt(mean square + eps) * w, in f32 as transformers'
            // RMSNorm computes it.
            Value w = a[2];
            if (!w.getType().isF32())
              w = g.create<arith::ExtFOp>(gl, g.getF32Type(), w);
            Value mean = g.create<arith::MulFOp>(
                gl, a[1],
                g.create<arith::ConstantOp>(
                    gl, g.getF32FloatAttr(1.0f / static_cast<float>(width))));
            Value eps = g.create<arith::ConstantOp>(
                gl, g.getF32FloatAttr(static_cast<float>(s.qk_norm.eps)));
            Value root = g.create<math::SqrtOp>(
                gl, g.create<arith::AddFOp>(gl, mean, eps));
            Value normed = g.create<arith::DivFOp>(gl, a[0], root);
            g.create<linalg::YieldOp>(
                gl, ValueRange{g.create<arith::MulFOp>(gl, normed, w)});
          })
      .getResult(0);
}

} // namespace mhagen::mlirbackend
