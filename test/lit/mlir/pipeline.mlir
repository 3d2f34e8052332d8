// The whole pipeline (mha-to-llvm: the five stages mhagen runs, with the
// default schedule) ends in the LLVM dialect with OpenMP, FMAs on whole
// vectors and no call to libm's exp.
// RUN: mha-opt %s --mha-to-llvm | FileCheck %s

// CHECK: llvm.func @mhagen_get_num_threads() -> i32
// CHECK-LABEL: llvm.func @causal_gqa
// CHECK: %[[N:.*]] = llvm.call @mhagen_get_num_threads() : () -> i32
// CHECK: omp.parallel num_threads(%[[N]] : i32)
// CHECK: omp.wsloop
// Stack scratch per (batch, head, query tile) task, released per task.
// CHECK: llvm.intr.stacksave
// The register blocks: fused multiply-adds on rows of 2 x 16 lanes.
// CHECK: llvm.intr.fmuladd({{.*}}) : (vector<32xf32>, vector<32xf32>, vector<32xf32>) -> vector<32xf32>
// The polynomial exp on a row of 32 probabilities (one key tile).
// CHECK: llvm.intr.fma({{.*}}) : (vector<32xf32>, vector<32xf32>, vector<32xf32>) -> vector<32xf32>
// CHECK: llvm.intr.stackrestore
// CHECK-NOT: math.exp
// CHECK-NOT: llvm.call @expf
// CHECK-NOT: scf.
// CHECK-NOT: vector.contract
func.func @causal_gqa(%q: tensor<?x?x8x64xf32>, %k: tensor<?x?x2x64xf32>,
                      %v: tensor<?x?x2x64xf32>, %init: tensor<?x?x8x64xf32>)
    -> tensor<?x?x8x64xf32> {
  %o = mha.attention ins(%q, %k, %v : tensor<?x?x8x64xf32>,
                         tensor<?x?x2x64xf32>, tensor<?x?x2x64xf32>)
         outs(%init : tensor<?x?x8x64xf32>)
         {num_heads = 8 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = false>}
         -> tensor<?x?x8x64xf32>
  return %o : tensor<?x?x8x64xf32>
}
