//===- HoistStackBuffers.cpp - constant-size allocas out of loops ---------===//
//
// mha-hoist-stack-buffers: see its description in MhaPasses.td. Runs in the
// `buffers` stage, after promote-buffers-to-stack, so that scratch does not
// grow with the number of key tiles (T_kv).
#include "mhagen/mlir/MhaPasses.h"

#include "mlir/IR/OpDefinition.h"

namespace mhagen::mha {
#define GEN_PASS_DEF_MHAHOISTSTACKBUFFERS
#include "mhagen/mlir/MhaPasses.h.inc"
} // namespace mhagen::mha

using namespace mlir;

namespace {

/// A loop whose iterations run one after another on one thread: a buffer
/// allocated in its body may be shared by all of them.
bool isSequentialLoop(Operation *op) {
  return isa<scf::ForOp, scf::WhileOp>(op);
}

/// Ops whose region must keep its own buffers: parallel iterations, OpenMP
/// regions (one copy per thread), and explicit allocation scopes.
bool isBarrier(Operation *op) {
  return isa<scf::ForallOp, scf::ParallelOp>(op) ||
         op->getName().getDialectNamespace() == "omp" ||
         op->hasTrait<OpTrait::AutomaticAllocationScope>();
}

struct MhaHoistStackBuffersPass
    : public mhagen::mha::impl::MhaHoistStackBuffersBase<
          MhaHoistStackBuffersPass> {
  void runOnOperation() override {
    SmallVector<memref::AllocaOp> allocas;
    getOperation().walk([&](memref::AllocaOp a) {
      if (a.getType().hasStaticShape() && a.getOperands().empty())
        allocas.push_back(a);
    });
    for (memref::AllocaOp a : allocas) {
      // scf.for is itself an allocation scope in MLIR's semantics (its
      // allocas die with each iteration), but the lowering to LLVM does not
      // free them per iteration; so sequential loops are walked through,
      // and only the other scopes stop the walk.
      Operation *outermostLoop = nullptr;
      for (Operation *p = a->getParentOp(); p; p = p->getParentOp()) {
        if (isSequentialLoop(p))
          outermostLoop = p;
        else if (isBarrier(p))
          break;
      }
      if (outermostLoop)
        a->moveBefore(outermostLoop);
    }
  }
};

} // namespace
