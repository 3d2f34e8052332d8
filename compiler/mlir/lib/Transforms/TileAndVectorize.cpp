//===- TileAndVectorize.cpp ----------------------------------------------===//
//
// mha-tile-and-vectorize: register tiles of the per-tile linalg ops, and
// vectors (on tensors).
#include "mhagen/mlir/MhaDialect.h"
#include "mhagen/mlir/MhaPasses.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/Bufferization/Pipelines/Passes.h"
#include "mlir/Dialect/Bufferization/Transforms/OneShotAnalysis.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/Linalg/Transforms/Hoisting.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Math/Transforms/Approximation.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Dialect/OpenMP/OpenMPDialect.h"
#include "mlir/Dialect/SCF/Transforms/Passes.h"
#include "mlir/Dialect/SCF/Transforms/TileUsingInterface.h"
#include "mlir/Dialect/SCF/Transforms/Transforms.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/Transforms/LoweringPatterns.h"
#include "mlir/Dialect/Vector/Transforms/VectorRewritePatterns.h"
#include "mlir/Interfaces/TilingInterface.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "mlir/Transforms/LoopInvariantCodeMotionUtils.h"
#include "mlir/Transforms/Passes.h"

namespace mhagen::mha {
#define GEN_PASS_DEF_MHATILEANDVECTORIZE
#include "mhagen/mlir/MhaPasses.h.inc"
} // namespace mhagen::mha

using namespace mlir;
using namespace mhagen::mha;

namespace {

constexpr llvm::StringLiteral kVectorSizes = "mha.vector_sizes";
// Marks the zero-padded copies of GEMM slices: they stay copy loops (LLVM
// vectorizes those) instead of becoming one vector per slice, whose full
// unrolling made instruction selection take seconds per kernel.
constexpr llvm::StringLiteral kCopyLoop = "mha.copy_loop";

// Register-block tile sizes of one linalg op: matmuls get rows x
// (cols x vector width) blocks, k by 1 (outer-product FMAs); everything else
// one row at a time (every dimension but the last by 1), vectorized along
// its last dimension.
SmallVector<int64_t> registerTileSizes(linalg::LinalgOp op, int64_t rows,
                                       int64_t blockCols, int64_t vectorWidth) {
  if (isa<linalg::MatmulOp>(op.getOperation())) {
    // Blocks that divide the (static) tile exactly, so that no register
    // tile needs masks: the largest divisor of M up to `rows`, and of N up
    // to `blockCols` in whole vectors; else a divisor of N that is a
    // multiple of 8 up to one vector (a half vector on AVX-512). Not 24:
    // LLVM assembles a <24 x float> operand from single-element inserts,
    // and key tiles of 24 (paged blocks of 48) ran ~10x slower than tiles
    // of 16 (B1 T_q 64 T_kv 4096 causal, 2 threads, Sapphire Rapids
    // class: 240 ms; 31 ms in blocks of 8, 23.4 ms at key tile 16).
    SmallVector<int64_t> ranges = op.getStaticLoopRanges();
    auto divisor = [](int64_t n, int64_t limit, int64_t multiple) {
      if (ShapedType::isDynamic(n))
        return limit;
      for (int64_t d = std::min(n, limit); d >= 1; --d)
        if (n % d == 0 && d % multiple == 0)
          return d;
      return int64_t(0);
    };
    int64_t m = divisor(ranges[0], rows, 1);
    int64_t n = divisor(ranges[1], blockCols, vectorWidth);
    if (n == 0)
      n = divisor(ranges[1], vectorWidth, 8);
    if (n == 0)
      n = divisor(ranges[1], blockCols, 1);
    return {m, n, 1};
  }
  // A transposing copy (K^T): square vector blocks, which lower to register
  // transposes (16x16 shuffles) instead of column gathers.
  // (int8 K/V: a second input, the row scales, broadcast along d_k.)
  if (op.getNumLoops() == 2 && op.getNumDpsInputs() >= 1 &&
      !op.getMatchingIndexingMap(op.getDpsInputOperand(0)).isIdentity() &&
      op.getMatchingIndexingMap(op.getDpsInputOperand(0)).isPermutation())
    return {vectorWidth, vectorWidth};
  SmallVector<int64_t> sizes(op.getNumLoops(), 0);
  for (unsigned i = 0; i + 1 < op.getNumLoops(); ++i)
    sizes[i] = 1;
  // A parallel last dimension of whole vectors but not a power of two
  // (d_v 80, 96) goes in blocks of the most vectors that are a power of
  // two and divide it: LLVM splits an <80 x float> operand into registers
  // through <5 x i512> extracts, which go through the stack (the decode
  // step's accumulator rescale at d_k 80 was ~1,100 vinsertps per key
  // tile).
  const int64_t last = op.getStaticLoopRanges().back();
  if (!ShapedType::isDynamic(last) && !llvm::isPowerOf2_64(last) &&
      last % vectorWidth == 0 &&
      linalg::isParallelIterator(op.getIteratorTypesArray().back())) {
    int64_t block = vectorWidth;
    while (last % (2 * block) == 0)
      block *= 2;
    sizes.back() = block;
  }
  return sizes;
}

// Parallel block sizes of a dynamic-shape op (op = layer: rows = B*T):
// gemm-rows x gemm-cols blocks for matmuls; for others gemm-rows along the
// last dynamic dimension and single entries of the dynamic ones before it.
SmallVector<int64_t> parallelTileSizes(linalg::LinalgOp op, int64_t gemmRows,
                                       int64_t gemmCols) {
  if (isa<linalg::MatmulOp>(op.getOperation()))
    return {gemmRows, gemmCols, 0};
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  SmallVector<int64_t> sizes(ranges.size(), 0);
  int lastDynamic = -1;
  for (unsigned i = 0; i < ranges.size(); ++i)
    if (ShapedType::isDynamic(ranges[i]))
      lastDynamic = i;
  for (int i = 0; i < lastDynamic; ++i)
    sizes[i] = ShapedType::isDynamic(ranges[i]) ? 1 : 0;
  if (lastDynamic >= 0)
    sizes[lastDynamic] = gemmRows;
  return sizes;
}

FailureOr<scf::SCFTilingResult> tile(IRRewriter &rewriter, Operation *op,
                                     ArrayRef<int64_t> sizes, bool forall) {
  scf::SCFTilingOptions options;
  options.setTileSizes(getAsIndexOpFoldResult(op->getContext(), sizes));
  if (forall)
    options.setLoopType(scf::SCFTilingOptions::LoopType::ForallOp);
  rewriter.setInsertionPoint(op);
  FailureOr<scf::SCFTilingResult> tiled =
      scf::tileUsingSCF(rewriter, cast<TilingInterface>(op), options);
  if (succeeded(tiled))
    rewriter.replaceOp(op, tiled->replacements);
  return tiled;
}

struct MhaTileAndVectorizePass
    : public mhagen::mha::impl::MhaTileAndVectorizeBase<
          MhaTileAndVectorizePass> {
  using MhaTileAndVectorizeBase::MhaTileAndVectorizeBase;

  // Replaces `block` by a copy on zero-padded operands of static size in
  // the dimensions `dims`. The pads stay copy loops (kCopyLoop).
  LogicalResult padToStatic(IRRewriter &rewriter, linalg::LinalgOp &block,
                            ArrayRef<int64_t> dims) {
    linalg::LinalgPaddingOptions padding;
    padding.setPaddingDimensions(dims);
    SmallVector<Attribute> zeros;
    for (OpOperand &operand : block->getOpOperands())
      zeros.push_back(
          rewriter.getZeroAttr(getElementTypeOrSelf(operand.get().getType())));
    padding.setPaddingValues(zeros);
    padding.setCopyBackOp(linalg::LinalgPaddingOptions::CopyBackOp::None);
    linalg::LinalgOp padded;
    SmallVector<Value> replacements;
    SmallVector<tensor::PadOp> padOps;
    rewriter.setInsertionPoint(block);
    if (failed(linalg::rewriteAsPaddedOp(rewriter, block, padding, padded,
                                         replacements, padOps)))
      return block.emitError("mha-tile-and-vectorize: padding failed");
    rewriter.replaceOp(block, replacements);
    for (tensor::PadOp pad : padOps)
      pad->setAttr(kCopyLoop, rewriter.getUnitAttr());
    block = padded;
    return success();
  }

  // Copies the weight slice (the B operand, depth x cols) of a projection
  // block into a contiguous panel, once per depth slice of a task, when
  // the panel fits the stack: read in place, each depth step's row sits a
  // whole weight row (4-16 KiB) after the last, so the slice's rows share a
  // few L1 sets and every register block re-reads them from the L2. Null
  // when the slice is not static or the panel would not fit.
  linalg::LinalgOp packWeights(IRRewriter &rewriter, linalg::LinalgOp block) {
    Value weights = block.getDpsInputOperand(1)->get();
    auto type = dyn_cast<RankedTensorType>(weights.getType());
    // A padded block (or a slice of one) is a copy already.
    Value source = weights;
    if (auto slice = source.getDefiningOp<tensor::ExtractSliceOp>())
      source = slice.getSource();
    if (source.getDefiningOp<tensor::PadOp>())
      return nullptr;
    if (!type || !type.hasStaticShape() ||
        type.getNumElements() * type.getElementTypeBitWidth() / 8 >
            mhagen::mha::kStackBufferBytes)
      return nullptr;
    rewriter.setInsertionPoint(block);
    Location loc = block.getLoc();
    Value panel = rewriter.create<tensor::EmptyOp>(loc, type.getShape(),
                                                   type.getElementType());
    auto copy = rewriter.create<linalg::CopyOp>(loc, weights, panel);
    rewriter.modifyOpInPlace(
        block, [&] { block.getDpsInputOperand(1)->set(copy.getResult(0)); });
    return cast<linalg::LinalgOp>(copy.getOperation());
  }

  // Tiles `op` to register blocks; matmul loops whose trip does not divide
  // are peeled so that the main part has static (unmasked) tiles and only
  // the remainder is masked. Marks the tiled ops with their vector sizes.
  LogicalResult tileToRegisters(IRRewriter &rewriter, linalg::LinalgOp op) {
    const int64_t blockCols = cols * vectorWidth;
    SmallVector<int64_t> sizes =
        registerTileSizes(op, rows, blockCols, vectorWidth);
    SmallVector<int64_t> vectorSizes;
    SmallVector<int64_t> ranges = op.getStaticLoopRanges();
    for (unsigned i = 0; i < sizes.size(); ++i)
      vectorSizes.push_back(sizes[i] ? sizes[i] : ranges[i]);
    if (llvm::any_of(vectorSizes, ShapedType::isDynamic))
      return op.emitError("mha-tile-and-vectorize: the innermost dimension "
                          "must be static");
    if (llvm::all_of(sizes, [](int64_t s) { return s == 0; })) {
      op->setAttr(kVectorSizes, rewriter.getDenseI64ArrayAttr(vectorSizes));
      return success();
    }
    FailureOr<scf::SCFTilingResult> tiled = tile(rewriter, op, sizes, false);
    if (failed(tiled))
      return op.emitError("mha-tile-and-vectorize: tiling failed");
    for (Operation *t : tiled->tiledOps)
      t->setAttr(kVectorSizes, rewriter.getDenseI64ArrayAttr(vectorSizes));
    if (!isa<linalg::MatmulOp>(op.getOperation()))
      return success();
    // loops = [rows, cols, k]: peel cols, then rows.
    for (int l : {1, 0}) {
      if (l >= (int)tiled->loops.size())
        continue;
      auto loop = dyn_cast<scf::ForOp>(tiled->loops[l].getOperation());
      if (!loop)
        continue;
      scf::ForOp partial;
      (void)scf::peelForLoopAndSimplifyBounds(rewriter, loop, partial);
    }
    return success();
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();
    IRRewriter rewriter(ctx);
    // 1. Dynamic-shape ops (op = layer's projections, bias and conversion
    //    ops over B*T rows): parallel blocks, then matmuls by depth slices.
    SmallVector<linalg::LinalgOp> dynamicOps, staticOps;
    module.walk([&](linalg::LinalgOp op) {
      if (op.hasDynamicShape())
        dynamicOps.push_back(op);
      else if (!isa<linalg::FillOp>(op.getOperation()))
        staticOps.push_back(op);
    });
    for (linalg::LinalgOp op : dynamicOps) {
      FailureOr<scf::SCFTilingResult> blocks =
          tile(rewriter, op, parallelTileSizes(op, gemmRows, gemmCols), true);
      if (failed(blocks) || blocks->tiledOps.size() != 1) {
        op.emitError("mha-tile-and-vectorize: parallel tiling failed");
        return signalPassFailure();
      }
      auto block = cast<linalg::LinalgOp>(blocks->tiledOps.front());
      if (isa<linalg::MatmulOp>(block.getOperation())) {
        // The last block of rows (and columns) is partial: pad every block
        // to the full static size so that register tiles never need masks
        // (zeros add nothing to the products). Then depth slices, the last
        // one padded too when gemm-depth does not divide the depth, each
        // with its weights packed.
        if (block.hasDynamicShape() &&
            failed(padToStatic(rewriter, block, {0, 1})))
          return signalPassFailure();
        FailureOr<scf::SCFTilingResult> slices =
            tile(rewriter, block, {0, 0, gemmDepth}, false);
        if (failed(slices) || slices->tiledOps.size() != 1) {
          op.emitError("mha-tile-and-vectorize: depth tiling failed");
          return signalPassFailure();
        }
        block = cast<linalg::LinalgOp>(slices->tiledOps.front());
        if (block.hasDynamicShape() &&
            failed(padToStatic(rewriter, block, {2})))
          return signalPassFailure();
        if (linalg::LinalgOp pack = packWeights(rewriter, block))
          staticOps.push_back(pack);
      }
      staticOps.push_back(block);
    }
    // 2. Register blocks (the flash loop body and the blocks above).
    for (linalg::LinalgOp op : staticOps)
      if (failed(tileToRegisters(rewriter, op)))
        return signalPassFailure();
    {
      // Fold the peeled bounds into static tile shapes.
      RewritePatternSet patterns(ctx);
      for (RegisteredOperationName name : ctx->getRegisteredOperations())
        name.getCanonicalizationPatterns(patterns, ctx);
      (void)applyPatternsAndFoldGreedily(module, std::move(patterns));
    }
    // 3. Vectorize every linalg op and pad (fills included): static shapes
    //    as they are, dynamic ones (remainder tiles) with masks of the
    //    register block's size.
    SmallVector<Operation *> toVectorize;
    module.walk([&](Operation *op) {
      if (isa<linalg::LinalgOp>(op) || isa<tensor::PadOp>(op))
        toVectorize.push_back(op);
    });
    for (Operation *op : toVectorize) {
      rewriter.setInsertionPoint(op);
      SmallVector<int64_t> vectorSizes;
      if (auto pad = dyn_cast<tensor::PadOp>(op)) {
        // A pad of a dynamically sized slice becomes a masked read: the
        // vector shape is the padded (static) tile.
        if (!pad.getResultType().hasStaticShape() || pad->hasAttr(kCopyLoop))
          continue;
        // AVX2 has no masked 8- or 16-bit loads: LLVM would scalarize every
        // row of a masked int8 or bf16/f16 read into a branch per element
        // (minutes of instruction selection, slow code). Copy those tiles by
        // loops.
        if (!masked16 &&
            pad.getResultType().getElementType().getIntOrFloatBitWidth() < 32)
          continue;
        vectorSizes = llvm::to_vector(pad.getResultType().getShape());
      } else if (cast<linalg::LinalgOp>(op).hasDynamicShape()) {
        auto sizes = op->getAttrOfType<DenseI64ArrayAttr>(kVectorSizes);
        if (!sizes) {
          op->emitError("mha-tile-and-vectorize: dynamic shape without a "
                        "register tiling");
          return signalPassFailure();
        }
        vectorSizes = llvm::to_vector(sizes.asArrayRef());
      }
      if (failed(linalg::vectorize(rewriter, op, vectorSizes))) {
        op->emitError("mha-tile-and-vectorize: vectorization failed");
        return signalPassFailure();
      }
    }
    // 4. Masked transfers become transfers with a mask operand (later
    //    folds must not see vector.mask regions), then accumulators stay in
    //    registers across the reduction loops: hoist loop-invariant
    //    transfer pairs on loop-carried tensors.
    {
      RewritePatternSet patterns(ctx);
      vector::populateVectorMaskLoweringPatternsForSideEffectingOps(patterns);
      (void)applyPatternsAndFoldGreedily(module, std::move(patterns));
    }
    {
      // Broadcasting/transposing reads become plain reads plus
      // vector.broadcast/transpose, which the contraction then absorbs
      // into its indexing maps (so it lowers to outer-product FMAs).
      RewritePatternSet patterns(ctx);
      vector::populateVectorTransferPermutationMapLoweringPatterns(patterns);
      vector::populateVectorReductionToContractPatterns(patterns);
      vector::populateSinkVectorBroadcastPatterns(patterns);
      vector::TransferReadOp::getCanonicalizationPatterns(patterns, ctx);
      vector::TransferWriteOp::getCanonicalizationPatterns(patterns, ctx);
      tensor::populateFoldTensorSubsetIntoVectorTransferPatterns(patterns);
      (void)applyPatternsAndFoldGreedily(module, std::move(patterns));
    }
    module.walk([&](LoopLikeOpInterface loop) {
      (void)hoistLoopInvariantSubsets(rewriter, loop);
    });
  }
};

} // namespace
