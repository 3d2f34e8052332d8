//===- Parallelize.cpp ---------------------------------------------------===//
//
// mha-parallelize: the (batch, head, query tile) loop on OpenMP threads.
#include "mhagen/mlir/MhaDialect.h"
#include "mhagen/mlir/MhaPasses.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/OpenMP/OpenMPDialect.h"
#include "mlir/Dialect/SCF/Transforms/Passes.h"
#include "mlir/Pass/PassManager.h"

namespace mhagen::mha {
#define GEN_PASS_DEF_MHAPARALLELIZE
#include "mhagen/mlir/MhaPasses.h.inc"
} // namespace mhagen::mha

using namespace mlir;
using namespace mhagen::mha;

namespace {

// scf.forall over (batch, head, query tile) -> scf.parallel -> an OpenMP
// parallel loop. OpenMP rather than mhagen's own pool because MLIR lowers
// it upstream (omp dialect -> __kmpc_* calls, outlining done by LLVM's
// OpenMPIRBuilder) and libomp is a Debian package. Each parallel region
// asks the runtime for its thread count (mhagen_get_num_threads), so
// mhagen_set_num_threads governs MLIR and Halide kernels alike.
struct MhaParallelizePass
    : public mhagen::mha::impl::MhaParallelizeBase<MhaParallelizePass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    OpPassManager pm(ModuleOp::getOperationName());
    pm.addNestedPass<func::FuncOp>(createForallToParallelLoopPass());
    pm.addPass(createConvertSCFToOpenMPPass());
    if (failed(runPipeline(pm, module)))
      return signalPassFailure();
    SmallVector<omp::ParallelOp> regions;
    module.walk([&](omp::ParallelOp p) { regions.push_back(p); });
    if (regions.empty())
      return;
    OpBuilder b(module.getBodyRegion());
    auto i32 = b.getI32Type();
    const char *name = "mhagen_get_num_threads";
    auto decl = module.lookupSymbol<func::FuncOp>(name);
    if (!decl) {
      b.setInsertionPointToStart(module.getBody());
      decl = b.create<func::FuncOp>(module.getLoc(), name,
                                    b.getFunctionType({}, {i32}));
      decl.setPrivate();
    }
    for (omp::ParallelOp p : regions) {
      b.setInsertionPoint(p);
      Value n = b.create<func::CallOp>(p.getLoc(), decl).getResult(0);
      p.getNumThreadsVarMutable().assign(n);
    }
  }
};

} // namespace
