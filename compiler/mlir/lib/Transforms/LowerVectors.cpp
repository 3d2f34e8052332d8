//===- LowerVectors.cpp --------------------------------------------------===//
//
// mha-lower-vectors: contractions to outer-product FMAs, masks, transfers
// and strided copies to loops.
#include "RowMaskedTransfers.h"
#include "mhagen/mlir/MhaDialect.h"
#include "mhagen/mlir/MhaPasses.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Vector/Transforms/LoweringPatterns.h"
#include "mlir/Dialect/Vector/Transforms/VectorRewritePatterns.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mhagen::mha {
#define GEN_PASS_DEF_MHALOWERVECTORS
#include "mhagen/mlir/MhaPasses.h.inc"
} // namespace mhagen::mha

using namespace mlir;
using namespace mhagen::mha;

namespace {

struct MhaLowerVectorsPass
    : public mhagen::mha::impl::MhaLowerVectorsBase<MhaLowerVectorsPass> {
  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    // Strided copies (a partial output tile into the caller's tensor)
    // become plain loops; memref.copy would otherwise call memrefCopy from
    // MLIR's C runner library, which kernels must not depend on.
    {
      IRRewriter rewriter(ctx);
      SmallVector<memref::CopyOp> copies;
      getOperation().walk([&](memref::CopyOp c) { copies.push_back(c); });
      for (memref::CopyOp c : copies) {
        rewriter.setInsertionPoint(c);
        auto copy = rewriter.create<linalg::CopyOp>(c.getLoc(), c.getSource(),
                                                    c.getTarget());
        rewriter.eraseOp(c);
        rewriter.setInsertionPoint(copy);
        if (failed(linalg::linalgOpToLoops(rewriter, copy)))
          return signalPassFailure();
        rewriter.eraseOp(copy);
      }
    }
    {
      // Copies of partial tiles of whole rows: row by row, with no i1
      // vectors (RowMaskedTransfers.cpp), before anything unrolls their
      // masks.
      RewritePatternSet rows(ctx);
      vector::populateVectorMaskLoweringPatternsForSideEffectingOps(rows);
      populateRowMaskedTransferPatterns(rows);
      (void)applyPatternsAndFoldGreedily(getOperation(), std::move(rows));
    }
    RewritePatternSet patterns(ctx);
    // Masked transfers (from padded partial tiles) become transfers with a
    // mask operand before anything unrolls them.
    vector::populateVectorMaskLoweringPatternsForSideEffectingOps(patterns);
    vector::VectorTransformsOptions opts;
    opts.setVectorTransformsOptions(
        vector::VectorContractLowering::OuterProduct);
    opts.setVectorTransposeLowering(
        vector::VectorTransposeLowering::Shuffle16x16);
    vector::populateVectorContractLoweringPatterns(patterns, opts);
    vector::populateVectorTransposeLoweringPatterns(patterns, opts);
    vector::populateVectorMultiReductionLoweringPatterns(
        patterns, vector::VectorMultiReductionLowering::InnerReduction);
    vector::populateVectorTransferPermutationMapLoweringPatterns(patterns);
    vector::populateVectorBroadcastLoweringPatterns(patterns);
    vector::populateVectorShapeCastLoweringPatterns(patterns);
    vector::populateVectorMaskOpLoweringPatterns(patterns);
    (void)applyPatternsAndFoldGreedily(getOperation(), std::move(patterns));
  }
};

} // namespace
