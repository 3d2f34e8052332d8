// A union of masks in mha-lower-to-linalg, causal & (window(256) | sink(4))
// as `mask` (window(256)) or `mask_or` (causal & sink(4)): the key-tile loop
// runs over the hull of the two conjunctions' tile ranges, and an scf.if
// visits a tile only inside one of them -- K/V tiles, scores and the state
// update all sit in its then-branch, the else-branch passes the state on.
// Per element, the key is visible under one conjunction or the other. The
// call's scale (scale_factor, scale = runtime) multiplies the query tile.
// RUN: mha-opt %s --mha-lower-to-linalg="query-tile=16 key-tile=32" --canonicalize --cse | FileCheck %s

// CHECK-LABEL: func.func @streaming
// CHECK-SAME: %[[K:[a-z0-9]+]]: tensor<?x?x2x64xf32>, %{{[a-z0-9]+}}: tensor<?x?x2x64xf32>, %[[SCALE:[a-z0-9]+]]: tensor<1xf32>
// CHECK: scf.forall
// CHECK: %[[S:.*]] = tensor.extract %[[SCALE]][%c0] : tensor<1xf32>
// CHECK: arith.mulf %in, %[[S]] : f32
// The window's first tile: max(floor((first position - 255) / 32), 0).
// CHECK: %[[W0:.*]] = arith.addi %{{.*}}, %c-255 : index
// CHECK: %[[W1:.*]] = arith.floordivsi %[[W0]], %c32 : index
// CHECK: %[[WLO:.*]] = arith.maxsi %[[W1]], %c0 : index
// The sink's tiles end at min(causal limit, ceil(4 / 32) = 1).
// CHECK: %[[SHI0:.*]] = arith.minsi %{{.*}}, %c1 : index
// CHECK: %[[SHI:.*]] = arith.maxsi %[[SHI0]], %c0 : index
// CHECK: scf.for %[[KT:.*]] = %{{.*}} to %{{.*}} step %c1 iter_args(%[[ACC:.*]] = %{{.*}}, %[[M:.*]] = %{{.*}}, %[[L:.*]] = %{{.*}})
// CHECK: %[[INW:.*]] = arith.cmpi sge, %[[KT]], %[[WLO]] : index
// CHECK: %[[W:.*]] = arith.andi %[[INW]], %{{.*}} : i1
// CHECK: %[[INS:.*]] = arith.cmpi slt, %[[KT]], %[[SHI]] : index
// CHECK: %[[IN:.*]] = arith.ori %[[W]], %{{.*}} : i1
// CHECK: %[[STEP:.*]]:3 = scf.if %[[IN]] -> (tensor<16x64xf32>, tensor<16xf32>, tensor<16xf32>) {
// CHECK: tensor.extract_slice %[[K]]
// CHECK: linalg.matmul
// The element predicate: (causal & window) | (causal & key < 4).
// CHECK: %[[CAUSAL:.*]] = arith.andi
// CHECK: %[[WIN:.*]] = arith.andi %[[CAUSAL]], %{{.*}} : i1
// CHECK: %[[SNK0:.*]] = arith.cmpi slt, %{{.*}}, %c4 : index
// CHECK: %[[SNK:.*]] = arith.andi %[[CAUSAL]], %[[SNK0]] : i1
// CHECK: arith.ori %[[WIN]], %[[SNK]] : i1
// CHECK: } else {
// CHECK-NEXT: scf.yield %[[ACC]], %[[M]], %[[L]]
// CHECK: scf.yield %[[STEP]]#0, %[[STEP]]#1, %[[STEP]]#2
func.func @streaming(%q: tensor<?x?x8x64xf32>, %k: tensor<?x?x2x64xf32>,
                     %v: tensor<?x?x2x64xf32>, %scale: tensor<1xf32>,
                     %o: tensor<?x?x8x64xf32>) -> tensor<?x?x8x64xf32> {
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x8x64xf32>,
                         tensor<?x?x2x64xf32>, tensor<?x?x2x64xf32>)
         scale_factor(%scale : tensor<1xf32>)
         outs(%o : tensor<?x?x8x64xf32>)
         {num_heads = 8 : i64, num_kv_heads = 2 : i64, scale = 1.0 : f32,
          mask = #mha.mask<causal = false, window = 256, padding = false>,
          mask_or = [#mha.mask<causal = true, window = 0, padding = false,
                               sink = 4>]}
         -> tensor<?x?x8x64xf32>
  return %r : tensor<?x?x8x64xf32>
}
