//===- Parallelize.cpp ---------------------------------------------------===//
//
// mha-parallelize: the (batch, head, query tile) loop on OpenMP threads,
// handed out one iteration at a time, costliest query tile first.
#include "mhagen/mlir/MhaDialect.h"
#include "mhagen/mlir/MhaPasses.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/OpenMP/OpenMPDialect.h"
#include "mlir/Dialect/SCF/Transforms/Passes.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Pass/PassManager.h"

namespace mhagen::mha {
#define GEN_PASS_DEF_MHAPARALLELIZE
#include "mhagen/mlir/MhaPasses.h.inc"
} // namespace mhagen::mha

using namespace mlir;
using namespace mhagen::mha;

namespace {

// The explicit work split, as the Halide kernels get
// it from the runtime's pool (runtime/src/TaskOrder.cpp). OpenMP's default
// static schedule gives each thread one contiguous range of iterations:
// equal work only when the causal triangles divide evenly (B x h a
// multiple of the threads), and a thread slowed by a neighbour holds the
// whole call up. So the loop is scheduled dynamically, one iteration at a
// time, and its last induction variable -- the query tile of the prefill
// loop, whose causal work grows with it -- runs from the top down: each
// (batch, head) starts with its costliest tile and the loop ends with
// cheap ones. Iterations of a parallel loop are independent, so the
// mirrored order changes no result. Only unit steps, which every loop of
// the pipeline has, are mirrored.
void handOutHeaviestFirst(omp::WsloopOp loop) {
  MLIRContext *ctx = loop.getContext();
  loop.setScheduleValAttr(
      omp::ClauseScheduleKindAttr::get(ctx, omp::ClauseScheduleKind::Dynamic));
  auto nest = dyn_cast<omp::LoopNestOp>(loop.getWrappedLoop());
  if (!nest || nest.getInclusive())
    return;
  const unsigned last = nest.getNumLoops() - 1;
  std::optional<int64_t> step = getConstantIntValue(nest.getStep()[last]);
  if (!step || *step != 1)
    return;
  BlockArgument iv = nest.getIVs()[last];
  OpBuilder b = OpBuilder::atBlockBegin(&nest.getRegion().front());
  Location loc = nest.getLoc();
  // lb + (ub - 1) - iv: the same iterations, in the opposite order.
  Value one = b.create<arith::ConstantIndexOp>(loc, 1);
  Value top = b.create<arith::SubIOp>(loc, nest.getUpperBound()[last], one);
  Value sum = b.create<arith::AddIOp>(loc, nest.getLowerBound()[last], top);
  Value mirrored = b.create<arith::SubIOp>(loc, sum, iv);
  iv.replaceAllUsesExcept(mirrored, mirrored.getDefiningOp());
}

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
    module.walk([](omp::WsloopOp loop) { handOutHeaviestFirst(loop); });
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
