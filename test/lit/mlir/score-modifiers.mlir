// Score modifiers in mha-lower-to-linalg (docs/design.md §2): per key tile,
// S = Q K^T, then softcap (math.tanh of S / C, times C), then ALiBi
// (+ this head's slope times key - pos), and only then the mask; a learned
// sink starts the running max at this head's sink and the running sum at 1
// (a key of value 0 every row sees). mha-polynomial-exp then expands the
// tanh into vector arithmetic like the exp.
// RUN: mha-opt %s --mha-lower-to-linalg="query-tile=16 key-tile=32" --canonicalize --cse | FileCheck %s

// CHECK-LABEL: func.func @modifiers
// CHECK-SAME: %[[SINKS:[a-z0-9]+]]: tensor<8xf32>, %[[SLOPES:[a-z0-9]+]]: tensor<8xf32>
// CHECK-DAG: %[[NEG:.*]] = arith.constant -1.000000e+30 : f32
// CHECK-DAG: %[[CAP:.*]] = arith.constant 5.000000e+01 : f32
// CHECK-DAG: %[[INV:.*]] = arith.constant 2.000000e-02 : f32
// CHECK-DAG: %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// CHECK: scf.forall (%[[B:.*]], %[[H:.*]], %[[QT:.*]]) in
// CHECK: %[[SLOPE:.*]] = tensor.extract %[[SLOPES]][%[[H]]] : tensor<8xf32>
// CHECK: %[[SINK:.*]] = tensor.extract %[[SINKS]][%[[H]]] : tensor<8xf32>
// CHECK: %[[M0:.*]] = linalg.fill ins(%[[SINK]] : f32) outs(%{{.*}} : tensor<16xf32>)
// CHECK: %[[L0:.*]] = linalg.fill ins(%[[ONE]] : f32) outs(%{{.*}} : tensor<16xf32>)
// CHECK: scf.for {{.*}} iter_args(%{{.*}} = %{{.*}}, %{{.*}} = %[[M0]], %{{.*}} = %[[L0]])
// CHECK: %[[S:.*]] = linalg.matmul
// CHECK: %[[CAPPED:.*]] = linalg.generic {{.*}} outs(%[[S]] : tensor<16x32xf32>)
// CHECK: %[[X:.*]] = arith.mulf %{{.*}}, %[[INV]] : f32
// CHECK: %[[T:.*]] = math.tanh %[[X]] : f32
// CHECK: arith.mulf %[[T]], %[[CAP]] : f32
// CHECK: %[[BIASED:.*]] = linalg.generic {{.*}} outs(%[[CAPPED]] : tensor<16x32xf32>)
// CHECK: %[[DIST:.*]] = arith.sitofp %{{.*}} : i32 to f32
// CHECK: %[[BIAS:.*]] = arith.mulf %[[SLOPE]], %[[DIST]] : f32
// CHECK: arith.addf %{{.*}}, %[[BIAS]] : f32
// CHECK: linalg.generic {{.*}} outs(%[[BIASED]] : tensor<16x32xf32>)
// CHECK: arith.cmpi sle
// CHECK: arith.select %{{.*}}, %{{.*}}, %[[NEG]] : f32
func.func @modifiers(%q: tensor<?x?x8x64xf32>, %k: tensor<?x?x2x64xf32>,
                     %v: tensor<?x?x2x64xf32>, %sinks: tensor<8xf32>,
                     %slopes: tensor<8xf32>, %o: tensor<?x?x8x64xf32>)
    -> tensor<?x?x8x64xf32> {
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x8x64xf32>,
                         tensor<?x?x2x64xf32>, tensor<?x?x2x64xf32>)
         sinks(%sinks : tensor<8xf32>) slopes(%slopes : tensor<8xf32>)
         outs(%o : tensor<?x?x8x64xf32>)
         {num_heads = 8 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = false>,
          softcap = 50.0 : f32}
         -> tensor<?x?x8x64xf32>
  return %r : tensor<?x?x8x64xf32>
}
