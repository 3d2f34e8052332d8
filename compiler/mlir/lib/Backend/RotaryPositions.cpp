#include "RotaryPositions.h"

#include "mhagen/spec/Rope.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include <vector>

namespace mhagen::mlirbackend {

using namespace mlir;

std::pair<Value, Value> rotaryTable(OpBuilder &b, Location l,
                                    const AttentionSpec &s, int64_t T,
                                    ValueRange tDyn, Value positions) {
  const std::vector<double> inv = ropeInverseFrequencies(s.rope, s.d_k);
  const int64_t half = static_cast<int64_t>(inv.size());
  auto invType = RankedTensorType::get({half}, b.getF64Type());
  Value invFreq = b.create<arith::ConstantOp>(
      l, DenseElementsAttr::get(invType, ArrayRef<double>(inv)));
  auto tableType = RankedTensorType::get({T, half}, b.getF32Type());
  Value cosInit = b.create<tensor::EmptyOp>(l, tableType, tDyn);
  Value sinInit = b.create<tensor::EmptyOp>(l, tableType, tDyn);
  const double gain = ropeAttentionFactor(s.rope);
  AffineMap freqOf =
      AffineMap::get(2, 0, {b.getAffineDimExpr(1)}, b.getContext());
  AffineMap tokenOf =
      AffineMap::get(2, 0, {b.getAffineDimExpr(0)}, b.getContext());
  AffineMap id = b.getMultiDimIdentityMap(2);
  SmallVector<Value> ins = {invFreq};
  SmallVector<AffineMap> maps = {freqOf};
  if (positions) {
    ins.push_back(positions);
    maps.push_back(tokenOf);
  }
  maps.append({id, id});
  auto generic = b.create<linalg::GenericOp>(
      l, TypeRange{tableType, tableType}, ins, ValueRange{cosInit, sinInit},
      maps, SmallVector<utils::IteratorType>(2, utils::IteratorType::parallel),
      [&](OpBuilder &g, Location gl, ValueRange args) {
        // The angle and its cos and sin in f64: at position 10^5 an f32
        // angle is off by ~4e-3 rad; rounding the results to f32 adds 6e-8.
        Value ti;
        if (positions) {
          ti = args[1]; // this token's position (i32)
        } else {
          Value t = g.create<linalg::IndexOp>(gl, 0);
          ti = g.create<arith::IndexCastOp>(gl, g.getI64Type(), t);
        }
        Value pos = g.create<arith::SIToFPOp>(gl, g.getF64Type(), ti);
        Value angle = g.create<arith::MulFOp>(gl, pos, args[0]);
        Value k = g.create<arith::ConstantOp>(gl, g.getF64FloatAttr(gain));
        Value c =
            g.create<arith::MulFOp>(gl, g.create<math::CosOp>(gl, angle), k);
        Value sn =
            g.create<arith::MulFOp>(gl, g.create<math::SinOp>(gl, angle), k);
        g.create<linalg::YieldOp>(
            gl, ValueRange{g.create<arith::TruncFOp>(gl, g.getF32Type(), c),
                           g.create<arith::TruncFOp>(gl, g.getF32Type(), sn)});
      });
  return {generic.getResult(0), generic.getResult(1)};
}

Value rotateHeads(OpBuilder &b, Location l, const AttentionSpec &s, Value heads,
                  std::pair<Value, Value> table, OpFoldResult tSize) {
  auto type = cast<RankedTensorType>(heads.getType());
  const int64_t count = type.getDimSize(2);
  const int64_t half = s.rope.rotated(s.d_k) / 2;
  // The two channels of every pair as strided slices: half pairs j with
  // j + dim/2, interleaved 2j with 2j + 1.
  const bool interleaved = s.rope.pairing == RopePairing::Interleaved;
  const int64_t secondAt = interleaved ? 1 : half, step = interleaved ? 2 : 1;
  auto sliceType = RankedTensorType::get({1, type.getDimSize(1), count, half},
                                         b.getF32Type());
  auto at = [&](int64_t channel) {
    return SmallVector<OpFoldResult>{b.getIndexAttr(0), b.getIndexAttr(0),
                                     b.getIndexAttr(0),
                                     b.getIndexAttr(channel)};
  };
  const SmallVector<OpFoldResult> sizes = {
      b.getIndexAttr(1), tSize, b.getIndexAttr(count), b.getIndexAttr(half)};
  const SmallVector<OpFoldResult> strides = {
      b.getIndexAttr(1), b.getIndexAttr(1), b.getIndexAttr(1),
      b.getIndexAttr(step)};
  Value first = b.create<tensor::ExtractSliceOp>(l, sliceType, heads, at(0),
                                                 sizes, strides);
  Value second = b.create<tensor::ExtractSliceOp>(l, sliceType, heads,
                                                  at(secondAt), sizes, strides);
  AffineMap id = b.getMultiDimIdentityMap(4);
  AffineMap tokenFreq = AffineMap::get(
      4, 0, {b.getAffineDimExpr(1), b.getAffineDimExpr(3)}, b.getContext());
  Value init1 = b.create<tensor::EmptyOp>(l, sizes, b.getF32Type());
  Value init2 = b.create<tensor::EmptyOp>(l, sizes, b.getF32Type());
  auto rotated = b.create<linalg::GenericOp>(
      l, TypeRange{sliceType, sliceType},
      ValueRange{first, second, table.first, table.second},
      ValueRange{init1, init2},
      ArrayRef<AffineMap>{id, id, tokenFreq, tokenFreq, id, id},
      SmallVector<utils::IteratorType>(4, utils::IteratorType::parallel),
      [&](OpBuilder &g, Location gl, ValueRange a) {
        // (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin)
        Value x1 = a[0], x2 = a[1], c = a[2], sn = a[3];
        Value r1 =
            g.create<arith::SubFOp>(gl, g.create<arith::MulFOp>(gl, x1, c),
                                    g.create<arith::MulFOp>(gl, x2, sn));
        Value r2 =
            g.create<arith::AddFOp>(gl, g.create<arith::MulFOp>(gl, x2, c),
                                    g.create<arith::MulFOp>(gl, x1, sn));
        g.create<linalg::YieldOp>(gl, ValueRange{r1, r2});
      });
  Value out = b.create<tensor::InsertSliceOp>(l, rotated.getResult(0), heads,
                                              at(0), sizes, strides);
  return b.create<tensor::InsertSliceOp>(l, rotated.getResult(1), out,
                                         at(secondAt), sizes, strides);
}

} // namespace mhagen::mlirbackend
