//===- RowMaskedTransfers.cpp - partial tiles of whole rows ---------------===//
//
// A padded partial tile (the last key tile's K/V rows, a partial query
// tile's Q rows) is read by a transfer masked by vector.create_mask %rows,
// N1, ..., Nk: only its leading dimension is cut. Left to the generic
// lowering, the mask is unrolled into one i1 vector per row (select(i <
// rows, all, none)) and LLVM legalizes each row's <N1 x i1> bit by bit where
// N1 is not a power of two: at d_k 80, ~55,000 k-register shifts per kernel,
// a 4x longer code generation (Early MachineLICM compares them pairwise) and
// mask arithmetic on every key tile. Such a read is the source of a tile
// copy (K, V or Q rows into a stack buffer); here the copy becomes one
// scf.if per row: row i copied by unmasked transfers when i < rows, the
// padding row written otherwise, so no i1 vector is left. (Not a read whose
// rows are yielded by scf.if: tile-sized values through branches are spilled
// wholesale, 5x the code.)
#include "RowMaskedTransfers.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;

namespace mhagen::mha {
namespace {

/// The row count of a mask that cuts only the leading dimension of `vt`
/// (vector.create_mask %rows, N1, ..., Nk with N1..Nk its sizes), or null.
Value leadingRowCount(Value mask, VectorType vt) {
  if (!mask || vt.getRank() < 2 || vt.isScalable())
    return {};
  auto create = mask.getDefiningOp<vector::CreateMaskOp>();
  if (!create)
    return {};
  for (int64_t d = 1; d < vt.getRank(); ++d) {
    std::optional<int64_t> n = getConstantIntValue(create.getOperand(d));
    if (!n || *n < vt.getDimSize(d))
      return {};
  }
  return create.getOperand(0);
}

/// The row count of a read on a memref with a minor identity map (the
/// vector's dimensions are the memref's innermost ones, in order) and a
/// row mask (leadingRowCount), or null.
Value rowMaskOf(vector::TransferReadOp op) {
  if (!isa<MemRefType>(op.getShapedType()) ||
      !op.getPermutationMap().isMinorIdentity())
    return {};
  return leadingRowCount(op.getMask(), op.getVectorType());
}

/// The indices of row `i`: the leading vector dimension's index + i.
SmallVector<Value> rowIndices(OpBuilder &b, Location loc, ValueRange indices,
                              int64_t rank, Value i) {
  SmallVector<Value> idx(indices.begin(), indices.end());
  Value &lead = idx[idx.size() - rank];
  lead = b.create<arith::AddIOp>(loc, lead, i);
  return idx;
}

/// The in_bounds of one row: those of the dimensions after the first.
ArrayAttr rowInBounds(OpBuilder &b, ArrayAttr inBounds) {
  if (!inBounds)
    return {};
  return b.getArrayAttr(inBounds.getValue().drop_front());
}

/// The map of one row: the memref's innermost rank - 1 dimensions.
AffineMapAttr rowMap(OpBuilder &b, VectorTransferOpInterface op) {
  return AffineMapAttr::get(AffineMap::getMinorIdentityMap(
      op.getShapedType().getRank(), op.getVectorType().getRank() - 1,
      b.getContext()));
}

/// Nothing between `from` and `to` (same block) writes memory.
bool noWritesBetween(Operation *from, Operation *to) {
  for (Operation *op = from->getNextNode(); op && op != to;
       op = op->getNextNode()) {
    auto effects = dyn_cast<MemoryEffectOpInterface>(op);
    if (!effects || effects.hasEffect<MemoryEffects::Write>())
      return false;
  }
  return true;
}

/// A row-masked read whose only use is an unmasked, in-bounds write of the
/// whole tile into a buffer (a padded tile copy): one scf.if per row, that
/// copies row i when i < rows and writes the padding row otherwise.
struct RowMaskedTileCopy : OpRewritePattern<vector::TransferWriteOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(vector::TransferWriteOp write,
                                PatternRewriter &rewriter) const override {
    auto read = write.getVector().getDefiningOp<vector::TransferReadOp>();
    if (!read || !read->hasOneUse() || write.getMask() ||
        read->getBlock() != write->getBlock() ||
        !isa<MemRefType>(write.getShapedType()) ||
        !write.getPermutationMap().isMinorIdentity() ||
        !llvm::all_of(write.getInBoundsValues(), [](bool b) { return b; }) ||
        !noWritesBetween(read, write))
      return failure();
    Value rows = rowMaskOf(read);
    if (!rows)
      return failure();
    Location loc = write.getLoc();
    VectorType vt = read.getVectorType();
    auto rowType =
        VectorType::get(vt.getShape().drop_front(), vt.getElementType());
    Value pad =
        rewriter.create<vector::SplatOp>(loc, rowType, read.getPadding());
    for (int64_t i = 0; i < vt.getDimSize(0); ++i) {
      Value iv = rewriter.create<arith::ConstantIndexOp>(loc, i);
      Value valid = rewriter.create<arith::CmpIOp>(
          loc, arith::CmpIPredicate::slt, iv, rows);
      auto store = [&](OpBuilder &b, Location l, Value row) {
        b.create<vector::TransferWriteOp>(
            l, row, write.getSource(),
            rowIndices(b, l, write.getIndices(), vt.getRank(), iv),
            rowMap(b, write), /*mask=*/Value(),
            rowInBounds(b, write.getInBoundsAttr()));
        b.create<scf::YieldOp>(l);
      };
      rewriter.create<scf::IfOp>(
          loc, valid,
          [&](OpBuilder &b, Location l) {
            Value row = b.create<vector::TransferReadOp>(
                l, rowType, read.getSource(),
                rowIndices(b, l, read.getIndices(), vt.getRank(), iv),
                rowMap(b, read), read.getPadding(), /*mask=*/Value(),
                rowInBounds(b, read.getInBoundsAttr()));
            store(b, l, row);
          },
          [&](OpBuilder &b, Location l) { store(b, l, pad); });
    }
    rewriter.eraseOp(write);
    rewriter.eraseOp(read);
    return success();
  }
};

} // namespace

void populateRowMaskedTransferPatterns(RewritePatternSet &patterns) {
  patterns.add<RowMaskedTileCopy>(patterns.getContext());
}

} // namespace mhagen::mha
