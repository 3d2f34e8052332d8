// mha-split-kv-decode: the split-KV decode form (FlashDecoding), chosen at
// call time. Calls with T_q <= 1, then T_q <= decode-tokens, get one
// scf.forall over (batch, key chunk) -- each task holds every K/V head and
// walks the heads inside each key tile, its Q tile the GQA group's heads for
// the call's tokens -- writing partial (acc, max, sum) states, then a merge
// scf.forall over (batch, K/V head). Other calls keep the mha.attention.
// RUN: mha-opt %s --mha-split-kv-decode="decode-tokens=2 split-tasks=8 split-min-keys=64" --canonicalize --cse | FileCheck %s
// RUN: mha-opt %s --mha-split-kv-decode="decode-tokens=2 split-tasks=8 split-min-keys=64" --canonicalize --cse | FileCheck %s --check-prefix=SEQ
// RUN: mha-opt %s --mha-split-kv-decode="decode-tokens=0" | FileCheck %s --check-prefix=OFF
// RUN: mha-opt %s --mha-split-kv-decode="decode-tokens=1 split-tasks=8" --canonicalize --cse | FileCheck %s --check-prefix=I8

// CHECK-LABEL: func.func @decode_gqa
// CHECK-SAME: (%[[Q:.*]]: tensor<?x?x8x64xf32>, %[[K:.*]]: tensor<?x?x2x64xf32>, %[[V:.*]]: tensor<?x?x2x64xf32>, %[[O:.*]]: tensor<?x?x8x64xf32>)
// CHECK-DAG: %[[B:.*]] = tensor.dim %[[Q]], %c0
// CHECK-DAG: %[[TQ:.*]] = tensor.dim %[[Q]], %c1
// CHECK-DAG: %[[TKV:.*]] = tensor.dim %[[K]], %c1
// The one-token tier.
// CHECK: %[[ONE:.*]] = arith.cmpi ule, %[[TQ]], %c1
// CHECK: scf.if %[[ONE]]
// Chunks per call: ceil(8 tasks / B), no chunk under 64 keys (2 tiles of
// 32), at most 64.
// CHECK: %[[NKT:.*]] = arith.ceildivsi %[[TKV]], %c32
// CHECK: %[[B1:.*]] = arith.maxsi %[[B]], %c1
// CHECK: %[[WANT:.*]] = arith.ceildivsi %c8, %[[B1]]
// CHECK: %[[BYKEYS:.*]] = arith.floordivsi %[[NKT]], %c2
// CHECK: %[[BK1:.*]] = arith.maxsi %[[BYKEYS]], %c1
// CHECK: %[[BK2:.*]] = arith.minsi %[[BK1]], %c64
// CHECK: %[[N0:.*]] = arith.minsi %[[WANT]], %[[BK2]]
// CHECK: %[[N:.*]] = arith.maxsi %[[N0]], %c1
// Partial states [B, chunks, kv, rows (, dv)].
// CHECK: %[[ACCP:.*]] = tensor.empty(%[[B]], %[[N]]) : tensor<?x?x2x4x64xf32>
// CHECK: %[[MLP:.*]] = tensor.empty(%[[B]], %[[N]]) : tensor<?x?x2x4xf32>
// CHECK: %[[PART:.*]]:3 = scf.forall (%[[BI:.*]], %[[CI:.*]]) in (%[[B]], %[[N]]) shared_outs(%[[PA:.*]] = %[[ACCP]], %[[PM:.*]] = %[[MLP]], %[[PL:.*]] = %[[MLP]])
// Query token t sits at t + T_kv - T_q.
// CHECK: %[[TAIL:.*]] = arith.subi %[[TKV]], %[[TQ]]
// The Q tiles of both K/V heads, read once per task: head g's rows are query
// heads 4g .. 4g+3 of the call's token, padded to one token.
// CHECK: scf.for %[[G:.*]] = %c0 to %c2 step %c1 iter_args(%{{.*}} = %{{.*}}) -> (tensor<2x4x64xf32>)
// CHECK: %[[H0:.*]] = arith.muli %[[G]], %c4
// CHECK: tensor.extract_slice %[[Q]][%[[BI]], 0, %[[H0]], 0] [1, %[[TQ]], 4, 64]
// CHECK: tensor.pad
// CHECK: } : tensor<?x4x64xf32> to tensor<1x4x64xf32>
// CHECK: tensor.collapse_shape %{{.*}} {{\[\[}}0, 1], [2]] : tensor<1x4x64xf32> into tensor<4x64xf32>
// CHECK: arith.mulf %{{.*}}, %cst
// The causal limit of the call's last token, then chunk CI's run of it:
// [min(CI * len, hi), min(lo + len, hi)) with len = ceil(hi / chunks).
// CHECK: %[[LP0:.*]] = arith.subi %[[TQ]], %c1
// CHECK: %[[LP:.*]] = arith.addi %[[LP0]], %[[TAIL]]
// CHECK: arith.floordivsi %[[LP]], %c32
// CHECK: %[[HI0:.*]] = arith.minsi %[[NKT]]
// CHECK: %[[HI:.*]] = arith.maxsi %[[HI0]], %c0
// CHECK: %[[LEN:.*]] = arith.ceildivsi %[[HI]], %[[N]]
// CHECK: %[[CLO0:.*]] = arith.muli %[[CI]], %[[LEN]]
// CHECK: %[[CLO:.*]] = arith.minsi %[[CLO0]], %[[HI]]
// CHECK: %[[CHI0:.*]] = arith.addi %[[CLO]], %[[LEN]]
// CHECK: %[[CHI:.*]] = arith.minsi %[[CHI0]], %[[HI]]
// The chunk's key tiles, and in each every K/V head: its slice of the
// tile's token rows, S = Q K^T on the 4 rows of its group. The tile's
// first key is computed once per tile, above the head loop.
// CHECK: %[[ST:.*]]:3 = scf.for %[[KT:.*]] = %[[CLO]] to %[[CHI]] step %c1 iter_args({{.*}}) -> (tensor<2x4x64xf32>, tensor<2x4xf32>, tensor<2x4xf32>)
// CHECK-NEXT: %[[K0:.*]] = arith.muli %[[KT]], %c32
// CHECK: scf.for %[[HG:.*]] = %c0 to %c2 step %c1 iter_args({{.*}}) -> (tensor<2x4x64xf32>, tensor<2x4xf32>, tensor<2x4xf32>)
// CHECK: tensor.extract_slice %[[K]][%[[BI]], %[[K0]], %[[HG]], 0]
// CHECK: tensor.extract_slice %[[V]][%[[BI]], %[[K0]], %[[HG]], 0]
// CHECK: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<4x64xf32>, tensor<64x32xf32>) outs(%{{.*}} : tensor<4x32xf32>)
// Row r is token r / 4 of the call: the causal test uses its position.
// CHECK: linalg.index 0
// CHECK: arith.floordivsi %{{.*}}, %c4
// CHECK: arith.cmpi sle
// CHECK: math.exp
// CHECK: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<4x32xf32>, tensor<32x64xf32>) outs(%{{.*}} : tensor<4x64xf32>)
// CHECK: tensor.insert_slice %{{.*}} into %{{.*}}[%[[HG]], 0, 0] [1, 4, 64]
// CHECK: scf.forall.in_parallel
// CHECK: tensor.parallel_insert_slice %[[ST]]#0 into %[[PA]][%[[BI]], %[[CI]], 0, 0, 0] [1, 1, 2, 4, 64]
// CHECK: tensor.parallel_insert_slice %[[ST]]#1 into %[[PM]][%[[BI]], %[[CI]], 0, 0] [1, 1, 2, 4]
// CHECK: tensor.parallel_insert_slice %[[ST]]#2 into %[[PL]][%[[BI]], %[[CI]], 0, 0] [1, 1, 2, 4]
// The merge per (batch, K/V head): M = max over chunks ...
// CHECK: scf.forall (%[[MB:.*]], %[[MG:.*]]) in (%[[B]], 2) shared_outs(%[[OUT:.*]] = %[[O]])
// CHECK: %[[MAX:.*]] = scf.for %[[C:.*]] = %c0 to %[[N]] step %c1
// CHECK: tensor.extract_slice %[[PART]]#1[%[[MB]], %[[C]], %[[MG]], 0] [1, 1, 1, 4]
// CHECK: arith.maximumf
// ... then the rescaled sums: L += exp(m_c - M) l_c, O += exp(m_c - M) acc_c.
// CHECK: scf.for %[[C2:.*]] = %c0 to %[[N]] step %c1 iter_args({{.*}}) -> (tensor<4x64xf32>, tensor<4xf32>)
// CHECK: tensor.extract_slice %[[PART]]#0[%[[MB]], %[[C2]], %[[MG]], 0, 0] [1, 1, 1, 4, 64]
// CHECK: math.exp
// CHECK: arith.mulf
// CHECK: arith.addf
// Normalised (a row without keys: 0), rows (token, head) back to the output.
// CHECK: arith.divf
// CHECK: tensor.expand_shape %{{.*}} {{\[\[}}0, 1], [2]] output_shape [1, 4, 64] : tensor<4x64xf32> into tensor<1x4x64xf32>
// CHECK: %[[MH0:.*]] = arith.muli %[[MG]], %c4
// CHECK: tensor.parallel_insert_slice %{{.*}} into %[[OUT]][%[[MB]], 0, %[[MH0]], 0] [1, %[[TQ]], 4, 64]
// The two-token tier: a tile of 2 tokens x 4 heads.
// CHECK: } else {
// CHECK: %[[TWO:.*]] = arith.cmpi ule, %[[TQ]], %c2
// CHECK: scf.if %[[TWO]]
// CHECK: } : tensor<?x4x64xf32> to tensor<2x4x64xf32>
// CHECK: tensor.collapse_shape %{{.*}} : tensor<2x4x64xf32> into tensor<8x64xf32>
// CHECK: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<8x64xf32>, tensor<64x32xf32>) outs(%{{.*}} : tensor<8x32xf32>)
// CHECK: tensor.expand_shape %{{.*}} output_shape [2, 4, 64] : tensor<8x64xf32> into tensor<2x4x64xf32>
// Longer calls: the flash form.
// CHECK: } else {
// CHECK: mha.attention ins(%[[Q]], %[[K]], %[[V]]
// OFF-LABEL: func.func @decode_gqa
// OFF-NOT: scf.forall
// OFF: mha.attention
func.func @decode_gqa(%q: tensor<?x?x8x64xf32>, %k: tensor<?x?x2x64xf32>,
                      %v: tensor<?x?x2x64xf32>, %o: tensor<?x?x8x64xf32>)
    -> tensor<?x?x8x64xf32> {
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x8x64xf32>,
                         tensor<?x?x2x64xf32>, tensor<?x?x2x64xf32>)
         outs(%o : tensor<?x?x8x64xf32>)
         {num_heads = 8 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = false>}
         -> tensor<?x?x8x64xf32>
  return %r : tensor<?x?x8x64xf32>
}

// A static T_q of 1 in a ragged batch (per_sequence) with padding, sinks,
// ALiBi and lse: the split form only, no branch and no mha.attention left.
// SEQ-LABEL: func.func @static_decode_sinks
// SEQ-SAME: (%[[Q:.*]]: tensor<?x1x4x64xf32>, %[[K:.*]]: tensor<?x?x2x64xf32>, %[[V:.*]]: tensor<?x?x2x64xf32>, %[[LENS:.*]]: tensor<?xi32>, %[[SINKS:.*]]: tensor<4xf32>, %[[SLOPES:.*]]: tensor<4xf32>, %[[O:.*]]: tensor<?x1x4x64xf32>, %[[LSE:.*]]: tensor<?x1x4xf32>)
// SEQ-NOT: scf.if
// SEQ: scf.forall (%[[BI:.*]], %{{.*}}) in
// The sequence's length: its query sits at kv_lens[b] - 1, and no key at or
// past kv_lens[b] is visited.
// SEQ: %[[L32:.*]] = tensor.extract %[[LENS]][%[[BI]]]
// SEQ: %[[LEN:.*]] = arith.index_cast %[[L32]]
// SEQ: arith.ceildivsi %[[LEN]], %c32
// ALiBi: a slope per row, of the row's head 2g + r.
// SEQ: %[[HA:.*]] = arith.muli %[[HG:.*]], %c2
// SEQ: tensor.extract %[[SLOPES]][%[[HA]]]
// SEQ: %[[HB:.*]] = arith.addi %[[HA]], %c1
// SEQ: tensor.extract %[[SLOPES]][%[[HB]]]
// SEQ: tensor.from_elements {{.*}} : tensor<2xf32>
// The merge: each row's sink logit starts the max and joins the sum as
// exp(sink - M); lse = M + log L.
// SEQ: scf.forall (%{{.*}}, %[[MG:.*]]) in (%{{.*}}, 2) shared_outs(%[[OUT:.*]] = %[[O]], %[[LOUT:.*]] = %[[LSE]])
// SEQ: tensor.extract %[[SINKS]]
// SEQ: tensor.extract %[[SINKS]]
// SEQ: %[[SROW:.*]] = tensor.from_elements
// SEQ: scf.for {{.*}} iter_args(%{{.*}} = %[[SROW]]) -> (tensor<2xf32>)
// SEQ: linalg.generic {{.*}} ins(%[[SROW]], %{{.*}} : tensor<2xf32>, tensor<2xf32>)
// SEQ: arith.subf
// SEQ: math.exp
// SEQ: math.log
// SEQ: tensor.parallel_insert_slice %{{.*}} into %[[OUT]]
// SEQ: tensor.parallel_insert_slice %{{.*}} into %[[LOUT]]
// SEQ-NOT: mha.attention
func.func @static_decode_sinks(%q: tensor<?x1x4x64xf32>,
    %k: tensor<?x?x2x64xf32>, %v: tensor<?x?x2x64xf32>, %lens: tensor<?xi32>,
    %sinks: tensor<4xf32>, %slopes: tensor<4xf32>, %o: tensor<?x1x4x64xf32>,
    %lse: tensor<?x1x4xf32>) -> (tensor<?x1x4x64xf32>, tensor<?x1x4xf32>) {
  %r, %l = mha.attention ins(%q, %k, %v : tensor<?x1x4x64xf32>,
                         tensor<?x?x2x64xf32>, tensor<?x?x2x64xf32>)
         kv_lens(%lens : tensor<?xi32>) sinks(%sinks : tensor<4xf32>)
         slopes(%slopes : tensor<4xf32>)
         outs(%o : tensor<?x1x4x64xf32>) lse(%lse : tensor<?x1x4xf32>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = true>,
          per_sequence}
         -> tensor<?x1x4x64xf32>, tensor<?x1x4xf32>
  return %r, %l : tensor<?x1x4x64xf32>, tensor<?x1x4xf32>
}

// An int8 K/V cache (kv_dtype = i8): each K/V tile of a head is read as
// int8 with its rows' scales [B, Tkv, kv] and widened once to f32, K^T as
// sitofp(k[j, c]) * k_scales[j] transposed, V as sitofp(v[j, c]) *
// v_scales[j]; the flash form keeps the scales too.
// I8-DAG: #[[TR:.*]] = affine_map<(d0, d1) -> (d1, d0)>
// I8-DAG: #[[COL:.*]] = affine_map<(d0, d1) -> (d1)>
// I8-DAG: #[[ROW:.*]] = affine_map<(d0, d1) -> (d0)>
// I8-DAG: #[[ID:.*]] = affine_map<(d0, d1) -> (d0, d1)>
// SEQ-LABEL: func.func @int8_cache
// I8-LABEL: func.func @int8_cache
// I8-SAME: (%{{.*}}: tensor<?x?x4x64xf32>, %[[K:.*]]: tensor<?x?x2x64xi8>, %[[V:.*]]: tensor<?x?x2x64xi8>, %[[KS:.*]]: tensor<?x?x2xf32>, %[[VS:.*]]: tensor<?x?x2xf32>, %{{.*}}: tensor<?x?x4x64xf32>)
// I8: %[[K0:.*]] = arith.muli %{{.*}}, %c32
// I8: scf.for %[[HG:.*]] = %c0 to %c2 step %c1 iter_args({{.*}}) -> (tensor<2x2x64xf32>, tensor<2x2xf32>, tensor<2x2xf32>)
// I8: tensor.extract_slice %[[K]][%[[B:.*]], %[[K0]], %[[HG]], 0] {{.*}} : tensor<?x?x2x64xi8> to tensor<?x64xi8>
// I8: tensor.extract_slice %[[KS]][%[[B]], %[[K0]], %[[HG]]] [1, %{{.*}}, 1] [1, 1, 1] : tensor<?x?x2xf32> to tensor<?xf32>
// I8: linalg.generic {indexing_maps = [#[[TR]], #[[COL]], #[[ID]]], {{.*}} ins(%{{.*}}, %{{.*}} : tensor<32x64xi8>, tensor<32xf32>) outs(%{{.*}} : tensor<64x32xf32>)
// I8: arith.sitofp %{{.*}} : i8 to f32
// I8: arith.mulf
// I8: tensor.extract_slice %[[V]][%[[B]], %[[K0]], %[[HG]], 0]
// I8: tensor.extract_slice %[[VS]][%[[B]], %[[K0]], %[[HG]]]
// I8: linalg.generic {indexing_maps = [#[[ID]], #[[ROW]], #[[ID]]], {{.*}} ins(%{{.*}}, %{{.*}} : tensor<32x64xi8>, tensor<32xf32>) outs(%{{.*}} : tensor<32x64xf32>)
// I8: arith.sitofp %{{.*}} : i8 to f32
// I8: arith.mulf
// I8: mha.attention {{.*}} kv_scales(%[[KS]], %[[VS]] : tensor<?x?x2xf32>, tensor<?x?x2xf32>)
func.func @int8_cache(%q: tensor<?x?x4x64xf32>, %k: tensor<?x?x2x64xi8>,
                      %v: tensor<?x?x2x64xi8>, %ks: tensor<?x?x2xf32>,
                      %vs: tensor<?x?x2xf32>, %o: tensor<?x?x4x64xf32>)
    -> tensor<?x?x4x64xf32> {
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x4x64xf32>,
                         tensor<?x?x2x64xi8>, tensor<?x?x2x64xi8>)
         kv_scales(%ks, %vs : tensor<?x?x2xf32>, tensor<?x?x2xf32>)
         outs(%o : tensor<?x?x4x64xf32>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = false>}
         -> tensor<?x?x4x64xf32>
  return %r : tensor<?x?x4x64xf32>
}
