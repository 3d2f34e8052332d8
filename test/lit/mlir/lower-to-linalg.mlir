// mha-lower-to-linalg: the flash form on tensors. One scf.forall task per
// (batch, query head, query tile); in it an scf.for over key tiles carrying
// the running max, running sum and the rescaled accumulator; masks as index
// arithmetic on the tile coordinates; key tiles the mask hides completely are
// outside the loop's bounds.
// RUN: mha-opt %s --mha-lower-to-linalg="query-tile=16 key-tile=32" --canonicalize --cse | FileCheck %s
// RUN: mha-opt %s --mha-lower-to-linalg="query-tile=16 key-tile=32" --canonicalize --cse | FileCheck %s --check-prefix=WIN
// RUN: mha-opt %s --mha-lower-to-linalg="query-tile=16 key-tile=32" --canonicalize --cse | FileCheck %s --check-prefix=SEQ

// CHECK-LABEL: func.func @causal_gqa
// CHECK-SAME: (%[[Q:.*]]: tensor<?x?x8x64xf32>, %[[K:.*]]: tensor<?x?x2x64xf32>, %[[V:.*]]: tensor<?x?x2x64xf32>, %[[O:.*]]: tensor<?x?x8x64xf32>)
// CHECK-DAG: %[[NAN:.*]] = arith.constant 0x7FC00000 : f32
// CHECK-DAG: %[[INF:.*]] = arith.constant 0x7F800000 : f32
// CHECK-DAG: %[[C4:.*]] = arith.constant 4 : index
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK-DAG: %[[C32:.*]] = arith.constant 32 : index
// CHECK-DAG: %[[TQ:.*]] = tensor.dim %[[Q]], %c1
// CHECK-DAG: %[[TKV:.*]] = tensor.dim %[[K]], %c1
// CHECK: %[[NQT:.*]] = arith.ceildivsi %[[TQ]], %[[C16]]
// The KV-cache offset: query i sits at key position i + T_kv - T_q.
// CHECK: %[[OFF:.*]] = arith.subi %[[TKV]], %[[TQ]]
// CHECK: scf.forall (%[[B:.*]], %[[H:.*]], %[[QT:.*]]) in (%{{.*}}, 8, %[[NQT]]) shared_outs
// GQA: query head h reads key/value head h / (8 / 2); no copy of K or V.
// CHECK: %[[Q0:.*]] = arith.muli %[[QT]], %[[C16]]
// CHECK: %[[KVH:.*]] = arith.divui %[[H]], %[[C4]]
// CHECK: tensor.extract_slice %[[Q]][%[[B]], %[[Q0]], %[[H]], 0]
// The scale is folded into the query tile once.
// CHECK: arith.mulf %{{.*}}, %cst
// Causal skip: the last key tile is the one holding the tile's last query
// row, floor((q0 + rows - 1 + offset) / 32); later tiles are never visited.
// CHECK: %[[LAST:.*]] = arith.addi %[[Q0]], %[[ROWS:.*]] : index
// CHECK: %[[L1:.*]] = arith.subi %[[LAST]], %c1
// CHECK: %[[L2:.*]] = arith.addi %[[L1]], %[[OFF]]
// CHECK: %[[NKT:.*]] = arith.ceildivsi %[[TKV]], %[[C32]]
// CHECK: %[[L3:.*]] = arith.floordivsi %[[L2]], %[[C32]]
// CHECK: %[[L4:.*]] = arith.addi %[[L3]], %c1
// CHECK: %[[L5:.*]] = arith.minsi %[[NKT]], %[[L4]]
// CHECK: %[[HI:.*]] = arith.maxsi %[[L5]], %c0
// Online softmax state: accumulator 0, running max -1e30, running sum 0.
// CHECK: scf.for %[[KT:.*]] = %c0 to %[[HI]] step %c1 iter_args(%[[ACC:.*]] = %{{.*}}, %[[M:.*]] = %{{.*}}, %[[L:.*]] = %{{.*}}) -> (tensor<16x64xf32>, tensor<16xf32>, tensor<16xf32>)
// CHECK: %[[K0:.*]] = arith.muli %[[KT]], %[[C32]]
// CHECK: tensor.extract_slice %[[K]][%[[B]], %[[K0]], %[[KVH]], 0]
// CHECK: tensor.extract_slice %[[V]][%[[B]], %[[K0]], %[[KVH]], 0]
// S = Q K^T on the tile, then the mask: key < T_kv and key <= query + offset.
// CHECK: %[[S:.*]] = linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<16x64xf32>, tensor<64x32xf32>) outs(%{{.*}} : tensor<16x32xf32>)
// CHECK: linalg.generic
// CHECK: arith.cmpi slt
// CHECK: arith.cmpi sle
// CHECK: arith.select
// Tile row max, the correction exp(m_old - m_new), the new max ...
// CHECK: arith.maximumf
// CHECK: linalg.generic {{.*}} ins(%[[M]], %{{.*}} : tensor<16xf32>, tensor<16xf32>)
// CHECK: arith.maximumf
// CHECK: arith.subf
// CHECK: math.exp
// CHECK: linalg.generic {{.*}} outs(%[[M]] : tensor<16xf32>)
// ... P = exp(S - m_new) (masked entries exactly 0; a visible score that
// is not finite gives NaN), its row sums,
// CHECK: %[[E:.*]] = math.exp
// CHECK: %[[ABS:.*]] = math.absf %[[SV:.*]] : f32
// CHECK: %[[FIN:.*]] = arith.cmpf one, %[[ABS]], %[[INF]] : f32
// CHECK: %[[P:.*]] = arith.select %[[FIN]], %[[E]], %[[NAN]] : f32
// CHECK: arith.select %{{.*}}, %[[P]], %{{.*}} : f32
// CHECK: arith.addf
// ... l = l * corr + rowsum, acc = acc * corr + P V (in place).
// CHECK: linalg.generic {{.*}} outs(%[[L]] : tensor<16xf32>)
// CHECK: linalg.generic {{.*}} outs(%[[ACC]] : tensor<16x64xf32>)
// CHECK: arith.mulf
// CHECK: %[[PV:.*]] = linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<16x32xf32>, tensor<32x64xf32>)
// CHECK: scf.yield %[[PV]]
// Epilogue: acc / l; rows without any visible key (l = 0) give 0, not
// NaN; a row whose l is NaN (it saw a non-finite score) gives NaN.
// CHECK: %[[POS:.*]] = arith.cmpf ogt, %[[LSUM:.*]], %{{.*}} : f32
// CHECK: arith.divf
// CHECK: %[[R:.*]] = arith.select %[[POS]], %{{.*}}, %{{.*}} : f32
// CHECK: %[[ISNAN:.*]] = arith.cmpf uno, %[[LSUM]], %[[LSUM]] : f32
// CHECK: arith.select %[[ISNAN]], %[[NAN]], %[[R]] : f32
// CHECK: tensor.parallel_insert_slice %{{.*}} into %{{.*}}[%[[B]], %[[Q0]], %[[H]], 0]
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

// A window of 40 keys and padding lengths bound the key loop from both
// sides: from below by the first key the tile's first row still sees,
// floor((q0 + offset - 40 + 1) / 32), and from above by ceil(kv_len / 32).
// WIN-LABEL: func.func @window_padding
// WIN-SAME: %[[LENS:[a-z0-9]+]]: tensor<?xi32>
// WIN: scf.forall (%[[B:.*]], %{{.*}}, %{{.*}}) in
// WIN: %[[LEN:.*]] = tensor.extract %[[LENS]][%[[B]]] : tensor<?xi32>
// WIN: %[[N:.*]] = arith.index_cast %[[LEN]] : i32 to index
// The first row's position, q0 + offset.
// WIN: %[[Q0OFF:.*]] = arith.addi %{{.*}}, %{{.*}} : index
// WIN: %[[BYLEN:.*]] = arith.ceildivsi %[[N]], %c32
// WIN: %[[HI:.*]] = arith.minsi %{{.*}}, %[[BYLEN]]
// WIN: %[[FIRST:.*]] = arith.addi %[[Q0OFF]], %c-39
// WIN: %[[LO0:.*]] = arith.floordivsi %[[FIRST]], %c32
// WIN: %[[LO:.*]] = arith.maxsi %[[LO0]], %c0
// WIN: %[[HI2:.*]] = arith.maxsi %[[HI]], %[[LO]]
// WIN: scf.for %{{.*}} = %[[LO]] to %[[HI2]] step %c1
func.func @window_padding(%q: tensor<?x?x8x64xf32>, %k: tensor<?x?x2x64xf32>,
                          %v: tensor<?x?x2x64xf32>,
                          %init: tensor<?x?x8x64xf32>, %lens: tensor<?xi32>)
    -> tensor<?x?x8x64xf32> {
  %o = mha.attention ins(%q, %k, %v : tensor<?x?x8x64xf32>,
                         tensor<?x?x2x64xf32>, tensor<?x?x2x64xf32>)
         kv_lens(%lens : tensor<?xi32>)
         outs(%init : tensor<?x?x8x64xf32>)
         {num_heads = 8 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 40, padding = true>}
         -> tensor<?x?x8x64xf32>
  return %o : tensor<?x?x8x64xf32>
}

// per_sequence (a ragged batch): each batch's queries are its last
// positions, so the offset is kv_lens[b] - T_q, computed in the task from
// its own length, and the causal limit of the key loop follows it.
// SEQ-LABEL: func.func @per_sequence
// SEQ-SAME: %[[LENS:[a-z0-9]+]]: tensor<?xi32>
// SEQ-DAG: %[[TQ:.*]] = tensor.dim %{{.*}}, %c1
// SEQ: scf.forall (%[[B:.*]], %{{.*}}, %{{.*}}) in
// SEQ: %[[LEN:.*]] = tensor.extract %[[LENS]][%[[B]]] : tensor<?xi32>
// SEQ: %[[N:.*]] = arith.index_cast %[[LEN]] : i32 to index
// SEQ: %[[OFF:.*]] = arith.subi %[[N]], %[[TQ]] : index
// SEQ: %[[L1:.*]] = arith.addi %{{.*}}, %[[OFF]] : index
// SEQ: arith.floordivsi %[[L1]], %c32
// SEQ: scf.for
// SEQ: linalg.generic
// SEQ: arith.addi %{{.*}}, %[[OFF]] : index
// SEQ: arith.cmpi sle
func.func @per_sequence(%q: tensor<?x?x8x64xf32>, %k: tensor<?x?x2x64xf32>,
                        %v: tensor<?x?x2x64xf32>,
                        %init: tensor<?x?x8x64xf32>, %lens: tensor<?xi32>)
    -> tensor<?x?x8x64xf32> {
  %o = mha.attention ins(%q, %k, %v : tensor<?x?x8x64xf32>,
                         tensor<?x?x2x64xf32>, tensor<?x?x2x64xf32>)
         kv_lens(%lens : tensor<?xi32>)
         outs(%init : tensor<?x?x8x64xf32>)
         {num_heads = 8 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = true>,
          per_sequence}
         -> tensor<?x?x8x64xf32>
  return %o : tensor<?x?x8x64xf32>
}
