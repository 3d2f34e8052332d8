// mha-tile-and-vectorize: every per-tile linalg op becomes loops over
// register blocks of vector ops. The pass options are the schedule the
// autotuner searches (rows x cols*vector-width accumulators per block).
// RUN: mha-opt %s --mha-lower-to-linalg="query-tile=16 key-tile=32" \
// RUN:   --mha-tile-and-vectorize="vector-width=16 rows=4 cols=2" --canonicalize --cse \
// RUN:   | FileCheck %s
// RUN: mha-opt %s --mha-lower-to-linalg="query-tile=16 key-tile=32" \
// RUN:   --mha-tile-and-vectorize="vector-width=16 rows=4 cols=2" \
// RUN:   | FileCheck %s --check-prefix=NOLINALG
// AVX2's 8-lane vectors give 4x16 accumulators (4 x 2 ymm).
// RUN: mha-opt %s --mha-lower-to-linalg="query-tile=16 key-tile=32" \
// RUN:   --mha-tile-and-vectorize="vector-width=8 rows=4 cols=2" --canonicalize --cse \
// RUN:   | FileCheck %s --check-prefix=AVX2
// A key tile of 24 (paged blocks of 48) has no whole-vector divisor:
// S = Q K^T runs in blocks of 8 columns, never a 24-wide vector (LLVM
// assembles those from single-element inserts, ~10x slower).
// RUN: mha-opt %s --mha-lower-to-linalg="query-tile=16 key-tile=24" \
// RUN:   --mha-tile-and-vectorize="vector-width=16 rows=4 cols=2" --canonicalize --cse \
// RUN:   | FileCheck %s --check-prefix=KT24

// No linalg op survives: everything is vectorized.
// NOLINALG-NOT: linalg.

// CHECK-LABEL: func.func @causal_gqa
// CHECK: scf.forall
// The key-tile loop carries the accumulator tile, the running max and the
// running sum (the latter kept in a 16-lane register across iterations).
// CHECK: scf.for %{{.*}} = %c0 to %{{.*}} step %c1 iter_args({{.*}}) -> (tensor<16x64xf32>, tensor<16xf32>, vector<16xf32>)
// K^T for the tile, in 16x16 register transposes.
// CHECK: scf.for %{{.*}} = %c0 to %c64 step %c16
// CHECK-NEXT: scf.for %{{.*}} = %c0 to %c32 step %c16
// CHECK: vector.transpose %{{.*}}, [1, 0] : vector<16x16xf32> to vector<16x16xf32>
// S = Q K^T: 4-row blocks, the dk = 64 reduction innermost, each step an
// outer product of a query column and a K^T row into 4 x 32 accumulators.
// CHECK: scf.for %{{.*}} = %c0 to %c16 step %c4
// CHECK: vector.transfer_read {{.*}} : tensor<16x32xf32>, vector<4x32xf32>
// CHECK-NEXT: scf.for %{{.*}} = %c0 to %c64 step %c1 iter_args(%[[SACC:.*]] = %{{.*}}) -> (vector<4x32xf32>)
// CHECK: vector.contract {{.*}} %[[SACC]] : vector<4x1xf32>, vector<1x32xf32> into vector<4x32xf32>
// Softmax rows on 32-lane vectors: max, exp, sum.
// CHECK: vector.multi_reduction <maximumf>, {{.*}} : vector<1x32xf32> to vector<1xf32>
// CHECK: math.exp %{{.*}} : vector<16xf32>
// CHECK: math.exp %{{.*}} : vector<1x32xf32>
// CHECK: vector.multi_reduction <add>, {{.*}} : vector<1x32xf32> to vector<1xf32>
// acc += P V: 4-row x 32-column blocks, the 32 keys innermost.
// CHECK: scf.for %{{.*}} = %c0 to %c16 step %c4
// CHECK-NEXT: scf.for %{{.*}} = %c0 to %c64 step %c32
// CHECK: scf.for %{{.*}} = %c0 to %c32 step %c1 iter_args(%[[OACC:.*]] = %{{.*}}) -> (vector<4x32xf32>)
// CHECK: vector.contract {{.*}} %[[OACC]] : vector<4x1xf32>, vector<1x32xf32> into vector<4x32xf32>
// CHECK: scf.forall.in_parallel

// AVX2-LABEL: func.func @causal_gqa
// AVX2: vector.transpose %{{.*}} : vector<8x8xf32> to vector<8x8xf32>
// AVX2: vector.contract {{.*}} : vector<4x1xf32>, vector<1x16xf32> into vector<4x16xf32>
// AVX2: vector.contract {{.*}} : vector<4x1xf32>, vector<1x16xf32> into vector<4x16xf32>
// KT24-LABEL: func.func @causal_gqa
// KT24-NOT: x24xf32> into
// KT24: scf.for %{{.*}} = %c0 to %c24 step %c8 iter_args({{.*}}) -> (tensor<16x24xf32>)
// KT24: vector.contract {{.*}} : vector<4x1xf32>, vector<1x8xf32> into vector<4x8xf32>
// KT24-NOT: x24xf32> into
// KT24: vector.contract {{.*}} : vector<4x1xf32>, vector<1x32xf32> into vector<4x32xf32>
// KT24-NOT: x24xf32> into
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

// d_v 80, five vectors but not a power of two: the row-wise ops (the
// accumulator's rescale, the final division by the sum) run in blocks of
// 16 lanes, never as one 80-wide vector (LLVM splits an <80 x float>
// through <5 x i512> extracts, by way of the stack).
// CHECK-LABEL: func.func @dk80
// CHECK-NOT: vector<1x80xf32>
// CHECK-NOT: vector<80x1xf32>
// CHECK: scf.for %{{.*}} = %c0 to %c80 step %c16
// CHECK-NOT: vector<1x80xf32>
// CHECK-NOT: vector<80x1xf32>
// CHECK: arith.divf %{{.*}}, %{{.*}} : vector<1x16xf32>
// CHECK-NOT: vector<1x80xf32>
// CHECK-NOT: vector<80x1xf32>
// CHECK: return
func.func @dk80(%q: tensor<?x?x4x80xf32>, %k: tensor<?x?x2x80xf32>,
                %v: tensor<?x?x2x80xf32>, %init: tensor<?x?x4x80xf32>)
    -> tensor<?x?x4x80xf32> {
  %o = mha.attention ins(%q, %k, %v : tensor<?x?x4x80xf32>,
                         tensor<?x?x2x80xf32>, tensor<?x?x2x80xf32>)
         outs(%init : tensor<?x?x4x80xf32>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.1118 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = false>}
         -> tensor<?x?x4x80xf32>
  return %o : tensor<?x?x4x80xf32>
}
