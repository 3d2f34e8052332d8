//===- Pipeline.cpp - the pass pipeline, stage by stage -------------------===//
//
// The stages of MhaPasses.h: mha -> linalg (flash form) -> register tiles
// and vectors -> buffers -> threads -> LLVM. Each pass lives in its own
// file under Transforms/.
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

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

namespace mhagen::mha {

std::vector<PipelineStage> mhaPipelineStages(const PipelineOptions &o) {
  std::vector<PipelineStage> stages;
  // 1. mha -> linalg on tensors: the split-KV decode form for calls with
  //    few query tokens, the flash form for the rest.
  stages.push_back({"linalg", [o](OpPassManager &pm) {
                      if (o.amx) {
                        MhaLowerToAmxOptions amx;
                        amx.decodeTokens = o.decodeTokens;
                        pm.addPass(createMhaLowerToAmx(amx));
                      }
                      if (o.decodeTokens > 0) {
                        MhaSplitKvDecodeOptions split;
                        split.decodeTokens = o.decodeTokens;
                        split.keyTile =
                            o.decodeKeyTile > 0 ? o.decodeKeyTile : o.keyTile;
                        split.splitTasks = o.splitTasks;
                        split.splitMinKeys = o.splitMinKeys;
                        pm.addPass(createMhaSplitKvDecode(split));
                      }
                      MhaLowerToLinalgOptions lower;
                      lower.queryTile = o.queryTile;
                      lower.keyTile = o.keyTile;
                      pm.addPass(createMhaLowerToLinalg(lower));
                      pm.addPass(createCanonicalizerPass());
                      pm.addPass(createCSEPass());
                    }});
  // 2. Register tiles and vectors (still on tensors).
  stages.push_back({"vector", [o](OpPassManager &pm) {
                      MhaTileAndVectorizeOptions tv;
                      tv.vectorWidth = o.vectorWidth;
                      tv.rows = o.rows;
                      tv.cols = o.cols;
                      tv.gemmRows = o.gemmRows;
                      tv.gemmCols = o.gemmCols;
                      tv.gemmDepth = o.gemmDepth;
                      tv.masked16 = o.masked16;
                      pm.addPass(createMhaTileAndVectorize(tv));
                      pm.addPass(createCanonicalizerPass());
                      pm.addPass(createCSEPass());
                    }});
  // 3. Buffers: one-shot bufferization (the function takes memrefs, so no
  //    function-boundary rewriting), small constant-size buffers on the
  //    stack, the rest freed by ownership-based deallocation.
  stages.push_back({"buffers", [](OpPassManager &pm) {
                      bufferization::OneShotBufferizationOptions bo;
                      // Functions on tensors (hand-written tests) get
                      // identity-layout memref arguments.
                      bo.bufferizeFunctionBoundaries = true;
                      bo.setFunctionBoundaryTypeConversion(
                          bufferization::LayoutMapOption::IdentityLayoutMap);
                      pm.addPass(bufferization::createOneShotBufferizePass(bo));
                      pm.addPass(createCanonicalizerPass());
                      pm.addNestedPass<func::FuncOp>(
                          bufferization::createPromoteBuffersToStackPass(
                              mha::kStackBufferBytes, 4));
                      // Stack buffers out of the key-tile loop: scratch must
                      // not grow with T_kv.
                      pm.addNestedPass<func::FuncOp>(
                          createMhaHoistStackBuffers());
                      bufferization::BufferDeallocationPipelineOptions dopts;
                      bufferization::buildBufferDeallocationPipeline(pm, dopts);
                      pm.addPass(createCanonicalizerPass());
                    }});
  // 4. Threads.
  stages.push_back({"omp", [o](OpPassManager &pm) {
                      if (o.parallel)
                        pm.addPass(createMhaParallelize());
                    }});
  // 5. Vectors to FMAs, polynomial exp, everything to the LLVM dialect.
  stages.push_back({"llvm", [o](OpPassManager &pm) {
                      pm.addPass(createMhaLowerVectors());
                      // What is left of linalg (the padded GEMM copies).
                      pm.addPass(createConvertLinalgToLoopsPass());
                      pm.addPass(createConvertVectorToSCFPass(
                          VectorTransferToSCFOptions().enableFullUnroll(true)));
                      pm.addPass(createLowerAffinePass());
                      pm.addPass(memref::createExpandStridedMetadataPass());
                      pm.addPass(createLowerAffinePass());
                      pm.addPass(createMhaPolynomialExp());
                      arith::ArithExpandOpsPassOptions expand;
                      expand.includeBf16 = true; // bf16 <-> f32 by integer ops
                      pm.addPass(arith::createArithExpandOpsPass(expand));
                      ConvertVectorToLLVMPassOptions vo;
                      vo.reassociateFPReductions = true;
                      vo.amx = o.amx;
                      pm.addPass(createConvertVectorToLLVMPass(vo));
                      // memref before scf->cf: the OpenMP region's
                      // memref.alloca_scope (stack buffers freed per parallel
                      // iteration) must still hold a single block when it is
                      // lowered to stacksave/stackrestore.
                      pm.addPass(createFinalizeMemRefToLLVMConversionPass());
                      pm.addPass(createConvertSCFToCFPass());
                      pm.addPass(createConvertMathToLLVMPass());
                      pm.addPass(createArithToLLVMConversionPass());
                      pm.addPass(createConvertIndexToLLVMPass());
                      pm.addPass(createConvertOpenMPToLLVMPass());
                      pm.addPass(createConvertControlFlowToLLVMPass());
                      pm.addPass(createConvertFuncToLLVMPass());
                      pm.addPass(createReconcileUnrealizedCastsPass());
                      pm.addPass(createCanonicalizerPass());
                    }});
  return stages;
}

void buildMhaToLLVMPipeline(OpPassManager &pm, const PipelineOptions &o) {
  for (const PipelineStage &stage : mhaPipelineStages(o))
    stage.build(pm);
}

void registerMhaPassesAndPipeline() {
  registerMhaPasses();
  PassPipelineRegistration<>(
      "mha-to-llvm", "mha dialect to the LLVM dialect with default options",
      [](OpPassManager &pm) { buildMhaToLLVMPipeline(pm, PipelineOptions{}); });
}

} // namespace mhagen::mha
