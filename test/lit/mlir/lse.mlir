// The log-sum-exp output in mha-lower-to-linalg (docs/design.md §1,
// "Logsumexp"): the scf.forall shares the lse tensor beside the result;
// after the key-tile scan each task takes lse = m + log(l) of its rows
// once (the -inf of a row that saw no key selected as bits, in integers)
// and inserts the valid rows at [b, q0, head], strided by the heads.
// RUN: mha-opt %s --mha-lower-to-linalg="query-tile=16 key-tile=32" --canonicalize --cse | FileCheck %s

// CHECK-LABEL: func.func @with_lse
// CHECK-SAME: %[[LI:[a-z0-9]+]]: tensor<?x?x8xf32>) -> (tensor<?x?x8x64xf32>, tensor<?x?x8xf32>)
// CHECK-DAG: %[[NEGINF:.*]] = arith.constant -8388608 : i32
// CHECK: %[[R:.*]]:2 = scf.forall (%[[B:.*]], %[[H:.*]], %[[QT:.*]]) in ({{.*}}) shared_outs(%[[O:.*]] = %{{.*}}, %[[L:.*]] = %[[LI]])
// CHECK: %[[Q0:.*]] = arith.muli %[[QT]], %c16
// CHECK: %[[SCAN:.*]]:3 = scf.for
// CHECK: linalg.generic {{.*}} ins(%[[SCAN]]#1, %[[SCAN]]#2 : tensor<16xf32>, tensor<16xf32>)
// CHECK: %[[LOG:.*]] = math.log
// CHECK: %[[SUM:.*]] = arith.addf %{{.*}}, %[[LOG]] : f32
// CHECK: %[[BITS:.*]] = arith.bitcast %[[SUM]] : f32 to i32
// CHECK: %[[SEL:.*]] = arith.select %{{.*}}, %[[BITS]], %[[NEGINF]] : i32
// CHECK: arith.bitcast %[[SEL]] : i32 to f32
// CHECK: scf.forall.in_parallel
// CHECK-DAG: tensor.parallel_insert_slice %{{.*}} into %[[L]][%[[B]], %[[Q0]], %[[H]]] [1, %{{.*}}, 1] [1, 1, 1] : tensor<?xf32> into tensor<?x?x8xf32>
// CHECK-DAG: tensor.parallel_insert_slice %{{.*}} into %[[O]]
// CHECK: return %[[R]]#0, %[[R]]#1
func.func @with_lse(%q: tensor<?x?x8x64xf32>, %k: tensor<?x?x2x64xf32>,
                    %v: tensor<?x?x2x64xf32>, %o: tensor<?x?x8x64xf32>,
                    %lse: tensor<?x?x8xf32>)
    -> (tensor<?x?x8x64xf32>, tensor<?x?x8xf32>) {
  %r:2 = mha.attention ins(%q, %k, %v : tensor<?x?x8x64xf32>,
                           tensor<?x?x2x64xf32>, tensor<?x?x2x64xf32>)
           outs(%o : tensor<?x?x8x64xf32>) lse(%lse : tensor<?x?x8xf32>)
           {num_heads = 8 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
            mask = #mha.mask<causal = true, window = 0, padding = false>}
           -> tensor<?x?x8x64xf32>, tensor<?x?x8xf32>
  return %r#0, %r#1 : tensor<?x?x8x64xf32>, tensor<?x?x8xf32>
}
