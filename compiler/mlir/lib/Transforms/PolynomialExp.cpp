//===- PolynomialExp.cpp -------------------------------------------------===//
//
// mha-polynomial-exp: math.exp and friends as polynomial approximations.
#include "mhagen/mlir/MhaDialect.h"
#include "mhagen/mlir/MhaPasses.h"

#include "mlir/Dialect/Math/Transforms/Approximation.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mhagen::mha {
#define GEN_PASS_DEF_MHAPOLYNOMIALEXP
#include "mhagen/mlir/MhaPasses.h.inc"
} // namespace mhagen::mha

using namespace mlir;
using namespace mhagen::mha;

namespace {

struct MhaPolynomialExpPass
    : public mhagen::mha::impl::MhaPolynomialExpBase<MhaPolynomialExpPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    MathPolynomialApproximationOptions opts;
    opts.enableAvx2 = false;
    populateMathPolynomialApproximationPatterns(patterns, opts);
    if (failed(
            applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
