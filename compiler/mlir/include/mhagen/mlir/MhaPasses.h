// mhagen's MLIR passes and the whole pipeline from mha to LLVM.
#ifndef MHAGEN_MLIR_MHAPASSES_H
#define MHAGEN_MLIR_MHAPASSES_H

#include "mlir/Dialect/AMX/AMXDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/OpenMP/OpenMPDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace mhagen::mha {

#define GEN_PASS_DECL
#include "mhagen/mlir/MhaPasses.h.inc"

#define GEN_PASS_REGISTRATION
#include "mhagen/mlir/MhaPasses.h.inc"

/// Buffers of a constant size below this many bytes live on the stack
/// (promote-buffers-to-stack); the passes size their scratch to fit.
inline constexpr unsigned kStackBufferBytes = 1u << 16;

/// The key tile the lowering walks a paged cache of `block`-token blocks
/// with for the option `keyTile`: the largest divisor of `block` that is
/// at most `keyTile` and at most 16 or a multiple of 16, so that a key
/// tile is one slice of one block (docs/design.md §5 "Paged K/V"). 32 ->
/// 16 for blocks of 16 or 48, 7 for blocks of 7, 10 for blocks of 100.
/// (Those run S = Q K^T in whole vectors. Blocks of 48 at tile 24 take
/// half vectors: 31 ms against 23.4 ms at 16, B1 T_q 64 T_kv 4096 h32
/// kv8 dk128 causal, 2 threads, Sapphire Rapids class; 240
/// ms before mha-tile-and-vectorize stopped building 24-wide vectors.)
int64_t pagedKeyTile(int64_t keyTile, int64_t block);

/// Options of the whole pipeline (the backend's schedule parameters).
struct PipelineOptions {
  int64_t queryTile = 32, keyTile = 32;
  int64_t vectorWidth = 16, rows = 4, cols = 2;
  int64_t gemmRows = 128, gemmCols = 128, gemmDepth = 128;
  /// The split-KV decode form (mha-split-kv-decode): calls with T_q <=
  /// decodeTokens (0: none), chunked towards splitTasks parallel tasks.
  int64_t decodeTokens = 0, splitTasks = 8, splitMinKeys = 256;
  /// Keys per tile of the split-KV form (0: keyTile).
  int64_t decodeKeyTile = 0;
  /// The target loads and stores 16-bit elements under a mask (AVX-512BW).
  bool masked16 = true;
  bool parallel = true;
  /// The target has AMX-BF16: plain bf16 attention runs on tile products
  /// (mha-lower-to-amx).
  bool amx = false;
};

/// One named stage of the pipeline (linalg, vector, buffers, omp, llvm);
/// `build` adds its passes.
struct PipelineStage {
  std::string name;
  std::function<void(mlir::OpPassManager &)> build;
};

/// The stages of mha -> linalg -> vectors -> buffers -> OpenMP -> LLVM
/// dialect, in order (the backend prints the IR after each on request).
std::vector<PipelineStage> mhaPipelineStages(const PipelineOptions &options);

/// All stages in one pass manager.
void buildMhaToLLVMPipeline(mlir::OpPassManager &pm,
                            const PipelineOptions &options);

/// Registers the passes and the `mha-to-llvm` pipeline with the global
/// registry (for mha-opt).
void registerMhaPassesAndPipeline();

} // namespace mhagen::mha

#endif
