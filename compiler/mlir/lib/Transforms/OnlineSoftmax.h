//===- OnlineSoftmax.h - the online softmax on linalg tiles -----*- C++ -*-===//
//
// The steps of one key tile of the flash form (docs/design.md §1), as named
// helpers on linalg-on-tensors tiles (after IREE's LinalgExt
// decomposition: computeRowwiseReduction, scaleAccumulator, ...). Rows are
// query rows [QT], tiles are [QT x KT] scores or [QT x dv] accumulators.
// The finite stand-ins come from mhagen/spec/SoftmaxNumerics.h; the other
// initial values are the reductions' identities (arith::getIdentityValue).
#ifndef MHAGEN_MLIR_TRANSFORMS_ONLINESOFTMAX_H
#define MHAGEN_MLIR_TRANSFORMS_ONLINESOFTMAX_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Builders.h"

#include <functional>

namespace mhagen::mha {

/// Builds the i1 "key j is visible from row i" predicate inside a linalg
/// body (from linalg.index 0 and 1).
using VisibleFn = std::function<mlir::Value(mlir::OpBuilder &, mlir::Location)>;

/// A [shape] f32 tensor filled with `value`.
mlir::Value filledTensor(mlir::OpBuilder &b, mlir::Location loc,
                         llvm::ArrayRef<int64_t> shape, float value);
/// A [shape] f32 tensor filled with the identity of `kind`.
mlir::Value identityTensor(mlir::OpBuilder &b, mlir::Location loc,
                           llvm::ArrayRef<int64_t> shape,
                           mlir::arith::AtomicRMWKind kind);

/// A linalg body builder of one f32 per (row i, key j) of a tile.
using ElementFn = std::function<mlir::Value(mlir::OpBuilder &, mlir::Location)>;

/// softcap: s = cap * tanh(s / cap), in place of S (math.tanh, which
/// mha-polynomial-exp expands).
mlir::Value capScores(mlir::OpBuilder &b, mlir::Location loc, mlir::Value s,
                      float cap);
/// ALiBi: s += slope * distance(i, j), in place of S (`slope` an f32
/// scalar: this head's).
mlir::Value addAlibiBias(mlir::OpBuilder &b, mlir::Location loc, mlir::Value s,
                         mlir::Value slope, const ElementFn &distance);
/// ALiBi with a slope per row: s += slopes[i] * distance(i, j) (`slopes` a
/// [QT] f32 tensor: the decode tile holds several heads).
mlir::Value addAlibiBiasPerRow(mlir::OpBuilder &b, mlir::Location loc,
                               mlir::Value s, mlir::Value slopes,
                               const ElementFn &distance);
/// Scores of hidden keys -> kLowestScore.
mlir::Value maskScores(mlir::OpBuilder &b, mlir::Location loc, mlir::Value s,
                       const VisibleFn &visible);
/// Row-wise reduction of a [QT x KT] tile into `init` [QT]: max or sum.
mlir::Value computeRowwiseReduction(mlir::OpBuilder &b, mlir::Location loc,
                                    mlir::Value tile, mlir::Value init,
                                    mlir::arith::AtomicRMWKind kind);
/// alpha = exp(m - max(m, tileMax)): how much the old state shrinks.
mlir::Value computeRescale(mlir::OpBuilder &b, mlir::Location loc,
                           mlir::Value m, mlir::Value tileMax);
/// m' = max(m, tileMax), written into m's tensor (one running-max buffer).
mlir::Value updateRunningMax(mlir::OpBuilder &b, mlir::Location loc,
                             mlir::Value tileMax, mlir::Value m);
/// P = exp(S - m') where visible, 0 elsewhere (in place of S).
mlir::Value computeProbabilities(mlir::OpBuilder &b, mlir::Location loc,
                                 mlir::Value mNew, mlir::Value s,
                                 const VisibleFn &visible);
/// l' = l * alpha + rowsum(P), written into l's tensor.
mlir::Value updateRunningSum(mlir::OpBuilder &b, mlir::Location loc,
                             mlir::Value alpha, mlir::Value rowSum,
                             mlir::Value l);
/// acc * alpha, row by row, in place (P V is then accumulated into it).
mlir::Value scaleAccumulator(mlir::OpBuilder &b, mlir::Location loc,
                             mlir::Value alpha, mlir::Value acc);
/// out = l > 0 ? acc / max(l, kTinySum) : 0, converted to out's element
/// type (a row that saw no key outputs zeros).
mlir::Value normalizeRows(mlir::OpBuilder &b, mlir::Location loc,
                          mlir::Value acc, mlir::Value l, mlir::Value out);

/// lse = m + log(l) per row [QT], -inf where l = 0 (a row that saw no
/// key). The -inf is selected as its bit pattern, in integers.
mlir::Value computeLogSumExp(mlir::OpBuilder &b, mlir::Location loc,
                             mlir::Value m, mlir::Value l);

} // namespace mhagen::mha

#endif
