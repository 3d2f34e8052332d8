// mha-lower-to-amx: plain bf16 attention as AMX tile products. Calls of more
// than decode-tokens queries take one scf.forall over (batch, head, tile of
// 32 queries in two row blocks of 16): Q^T packed once per block by 32-bit
// transposes, S^T = K Q^T with K read in place when the key tile is whole,
// the online softmax with the queries in the lanes (a bit test for
// non-finite scores), P transposed to query rows, V pairs interleaved once
// for both blocks, O += P V accumulated through memory.
// Other calls, and ops with anything else, keep the mha.attention.
// RUN: mha-opt %s --mha-lower-to-amx="decode-tokens=1" --canonicalize --cse | FileCheck %s

// CHECK-LABEL: func.func @gqa_causal
// CHECK-SAME: (%[[Q:.*]]: memref<?x?x4x64xbf16, {{.*}}>, %[[K:.*]]: memref<?x?x2x64xbf16, {{.*}}>, %[[V:.*]]: memref<?x?x2x64xbf16, {{.*}}>, %[[O:.*]]: memref<?x?x4x64xbf16, {{.*}}>)
// CHECK: %[[TQ:.*]] = memref.dim %[[Q]], %c1
// CHECK: %[[PREFILL:.*]] = arith.cmpi sgt, %[[TQ]], %c1
// CHECK: scf.if %[[PREFILL]] {
// CHECK: %[[NQT:.*]] = arith.ceildivsi %{{.*}}, %c32
// CHECK: scf.forall (%[[BI:.*]], %[[HI:.*]], %[[QT:.*]]) in (%{{.*}}, 4, %[[NQT]]) {
// Query head h reads K/V head h / 2.
// CHECK: %[[G:.*]] = arith.divui %[[HI]], %c2
// Q^T in the pair-interleaved layout, one 16x16 32-bit transpose per 32
// channels and row block (dk 64: two each).
// CHECK-COUNT-4: vector.transpose %{{.*}}, [1, 0] : vector<16x16xi32> to vector<16x16xi32>
// The key tiles of 32, carrying per row block (max, sum, rows that saw a
// non-finite score).
// CHECK: scf.for %[[J0:.*]] = %c0 to %{{.*}} step %c32 iter_args({{.*}}) -> (vector<16xf32>, vector<16xf32>, vector<16xi1>, vector<16xf32>, vector<16xf32>, vector<16xi1>) {
// A whole tile is read in place: [32 keys, token stride] from key J0.
// CHECK: scf.if %{{.*}} -> (memref<32x?xbf16, strided<[?, 1], offset: ?>>) {
// CHECK: memref.extract_strided_metadata %[[K]]
// CHECK: memref.reinterpret_cast %{{.*}} to offset: [%{{.*}}], sizes: [32, %[[TS:.*]]], strides: [%[[TS]], 1]
// CHECK: } else {
// CHECK: scf.for
// CHECK: memref.cast %{{.*}} : memref<32x64xbf16> to memref<32x?xbf16, strided<[?, 1], offset: ?>>
// S^T = K Q^T: two 32-channel steps x two halves of 16 keys x two row
// blocks, into four accumulators.
// CHECK-COUNT-8: amx.tile_mulf %{{.*}} : vector<16x32xbf16>, vector<16x32xbf16>, vector<16x16xf32>
// CHECK: amx.tile_store %[[ST:.*]][%c0, %c0, %c0], %{{.*}} : memref<2x32x16xf32>, vector<16x16xf32>
// CHECK: amx.tile_store %[[ST]][%c1, %c0, %c0]
// CHECK: amx.tile_store %[[ST]][%c0, %c16, %c0]
// CHECK: amx.tile_store %[[ST]][%c1, %c16, %c0]
// One vector of 16 queries per key. A tile the block sees whole (inside
// T_kv, its last key at or before the block's first query) takes the form
// with no visibility test: per key the magnitude's bits and the max, one
// non-finite test per tile, exp((s - m) scale) with the subtraction in an
// FMA.
// CHECK: %[[LASTKEY:.*]] = arith.addi %[[J0]], %c31 : index
// CHECK: %[[BEFORE:.*]] = arith.cmpi sle, %[[LASTKEY]], %{{.*}} : index
// CHECK: %[[OPEN:.*]] = arith.andi %{{.*}}, %[[BEFORE]] : i1
// CHECK: scf.if %[[OPEN]] -> (vector<16xf32>, vector<16xf32>, vector<16xi1>) {
// CHECK-NOT: arith.select
// CHECK-COUNT-31: arith.maxui %{{.*}} : vector<16xi32>
// CHECK-NOT: arith.select
// CHECK: arith.cmpi uge, %{{.*}}, %{{.*}} : vector<16xi32>
// CHECK-NOT: arith.select
// CHECK-COUNT-32: math.fma %{{.*}}, %{{.*}}, %{{.*}} : vector<16xf32>
// CHECK-NOT: arith.select
// CHECK: scf.yield
// The other tiles test each (query, key) pair: inside T_kv and causal.
// CHECK: } else {
// CHECK: arith.cmpi sle, %{{.*}}, %{{.*}} : vector<16xi32>
// CHECK: arith.select %{{.*}}, %{{.*}}, %{{.*}} : vector<16xi1>, vector<16xi32>
// CHECK: math.exp %{{.*}} : vector<16xf32>
// CHECK: scf.yield
// P to query rows in bf16.
// CHECK: vector.transpose %{{.*}}, [1, 0] : vector<16x16xf32> to vector<16x16xf32>
// CHECK: arith.truncf %{{.*}} : vector<16x16xf32> to vector<16x16xbf16>
// V with key pairs interleaved per channel.
// CHECK: vector.interleave %{{.*}}, %{{.*}} : vector<16xbf16> -> vector<32xbf16>
// The rescale only when some row's maximum moved, per block.
// CHECK: %[[MOVED:.*]] = vector.reduction <or>, %{{.*}} : vector<16xi1> into i1
// CHECK: scf.if %[[MOVED]] {
// CHECK: vector.reduction <or>
// O += P V, dv 64 = four accumulator tiles per block, each V tile loaded
// once for both blocks' P.
// CHECK: %[[P0:.*]] = amx.tile_load %[[PB:.*]][%c0, %c0, %c0] : memref<2x16x32xbf16> into vector<16x32xbf16>
// CHECK: %[[P1:.*]] = amx.tile_load %[[PB]][%c1, %c0, %c0] : memref<2x16x32xbf16> into vector<16x32xbf16>
// CHECK: %[[V0:.*]] = amx.tile_load %{{.*}}[%c0, %c0, %c0] : memref<4x16x32xbf16> into vector<16x32xbf16>
// CHECK: amx.tile_mulf %[[P0]], %[[V0]], %{{.*}}
// CHECK: amx.tile_mulf %[[P1]], %[[V0]], %{{.*}}
// CHECK: amx.tile_store %[[ACC:.*]][%c0, %c0, %c0], {{.*}} : memref<2x16x64xf32>
// CHECK: amx.tile_store %[[ACC]][%c1, %c0, %c0]
// CHECK: amx.tile_store %[[ACC]][%c1, %c0, %c48]
// A row that saw a non-finite score is NaN; the rows of the tile in bf16.
// CHECK: arith.select %{{.*}}, %cst{{.*}}, %{{.*}} : vector<16xi1>, vector<16xf32>
// CHECK: arith.truncf %{{.*}} : vector<16xf32> to vector<16xbf16>
// CHECK: vector.transfer_write %{{.*}}, %[[O]][%[[BI]], %{{.*}}, %[[HI]], %{{.*}}]
// CHECK: } else {
// CHECK: mha.attention
// CHECK: bufferization.materialize_in_destination %{{.*}} in restrict writable %[[O]]
func.func @gqa_causal(%q: memref<?x?x4x64xbf16, strided<[?, ?, 64, 1], offset: ?>>, %k: memref<?x?x2x64xbf16, strided<[?, ?, 64, 1], offset: ?>>, %v: memref<?x?x2x64xbf16, strided<[?, ?, 64, 1], offset: ?>>, %o: memref<?x?x4x64xbf16, strided<[?, ?, 64, 1], offset: ?>>) {
  %qt = bufferization.to_tensor %q restrict : memref<?x?x4x64xbf16, strided<[?, ?, 64, 1], offset: ?>>
  %kt = bufferization.to_tensor %k restrict : memref<?x?x2x64xbf16, strided<[?, ?, 64, 1], offset: ?>>
  %vt = bufferization.to_tensor %v restrict : memref<?x?x2x64xbf16, strided<[?, ?, 64, 1], offset: ?>>
  %ot = bufferization.to_tensor %o restrict writable : memref<?x?x4x64xbf16, strided<[?, ?, 64, 1], offset: ?>>
  %r = mha.attention ins(%qt, %kt, %vt : tensor<?x?x4x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?x?x2x64xbf16>) outs(%ot : tensor<?x?x4x64xbf16>) {mask = #mha.mask<causal = true, window = 0, padding = false>, num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32} -> tensor<?x?x4x64xbf16>
  bufferization.materialize_in_destination %r in restrict writable %o : (tensor<?x?x4x64xbf16>, memref<?x?x4x64xbf16, strided<[?, ?, 64, 1], offset: ?>>) -> ()
  return
}

// dk 80 takes three 32-channel steps; the last reads channels 64..79 and
// zeros past them (a masked read: no in_bounds). K is always copied, since a
// 64-byte row at channel 64 would reach past the head's channels.
// CHECK-LABEL: func.func @dk80
// CHECK: scf.forall
// CHECK: memref.alloca() {alignment = 64 : i64} : memref<2x3x16x32xbf16>
// CHECK: memref.alloca() {alignment = 64 : i64} : memref<32x96xbf16>
// CHECK: vector.transfer_read %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}, %c64], %{{[a-z0-9_]+}} : memref<?x?x2x80xbf16>, vector<32xbf16>
// CHECK: scf.for
// CHECK-NOT: memref.reinterpret_cast
// CHECK: vector.transfer_read %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}, %c64], %{{[a-z0-9_]+}} : memref<?x?x1x80xbf16>, vector<32xbf16>
// CHECK-NOT: memref.reinterpret_cast
// CHECK-COUNT-12: amx.tile_mulf %{{.*}} : vector<16x32xbf16>, vector<16x32xbf16>, vector<16x16xf32>
func.func @dk80(%q: memref<?x?x2x80xbf16>, %k: memref<?x?x1x80xbf16>, %v: memref<?x?x1x80xbf16>, %o: memref<?x?x2x80xbf16>) {
  %qt = bufferization.to_tensor %q restrict : memref<?x?x2x80xbf16>
  %kt = bufferization.to_tensor %k restrict : memref<?x?x1x80xbf16>
  %vt = bufferization.to_tensor %v restrict : memref<?x?x1x80xbf16>
  %ot = bufferization.to_tensor %o restrict writable : memref<?x?x2x80xbf16>
  %r = mha.attention ins(%qt, %kt, %vt : tensor<?x?x2x80xbf16>, tensor<?x?x1x80xbf16>, tensor<?x?x1x80xbf16>) outs(%ot : tensor<?x?x2x80xbf16>) {mask = #mha.mask<causal = false, window = 0, padding = false>, num_heads = 2 : i64, num_kv_heads = 1 : i64, scale = 0.125 : f32} -> tensor<?x?x2x80xbf16>
  bufferization.materialize_in_destination %r in restrict writable %o : (tensor<?x?x2x80xbf16>, memref<?x?x2x80xbf16>) -> ()
  return
}

// dv 40 is not a whole number of 16-column accumulator tiles: the op stays.
// CHECK-LABEL: func.func @dv40
// CHECK-NOT: amx.
// CHECK: mha.attention
func.func @dv40(%q: memref<?x?x2x64xbf16>, %k: memref<?x?x1x64xbf16>, %v: memref<?x?x1x40xbf16>, %o: memref<?x?x2x40xbf16>) {
  %qt = bufferization.to_tensor %q restrict : memref<?x?x2x64xbf16>
  %kt = bufferization.to_tensor %k restrict : memref<?x?x1x64xbf16>
  %vt = bufferization.to_tensor %v restrict : memref<?x?x1x40xbf16>
  %ot = bufferization.to_tensor %o restrict writable : memref<?x?x2x40xbf16>
  %r = mha.attention ins(%qt, %kt, %vt : tensor<?x?x2x64xbf16>, tensor<?x?x1x64xbf16>, tensor<?x?x1x40xbf16>) outs(%ot : tensor<?x?x2x40xbf16>) {mask = #mha.mask<causal = false, window = 0, padding = false>, num_heads = 2 : i64, num_kv_heads = 1 : i64, scale = 0.125 : f32} -> tensor<?x?x2x40xbf16>
  bufferization.materialize_in_destination %r in restrict writable %o : (tensor<?x?x2x40xbf16>, memref<?x?x2x40xbf16>) -> ()
  return
}

// A score modifier (softcap) is outside the lowering: the op stays.
// CHECK-LABEL: func.func @softcap
// CHECK-NOT: amx.
// CHECK: mha.attention
func.func @softcap(%q: memref<?x?x2x64xbf16>, %k: memref<?x?x1x64xbf16>, %v: memref<?x?x1x64xbf16>, %o: memref<?x?x2x64xbf16>) {
  %qt = bufferization.to_tensor %q restrict : memref<?x?x2x64xbf16>
  %kt = bufferization.to_tensor %k restrict : memref<?x?x1x64xbf16>
  %vt = bufferization.to_tensor %v restrict : memref<?x?x1x64xbf16>
  %ot = bufferization.to_tensor %o restrict writable : memref<?x?x2x64xbf16>
  %r = mha.attention ins(%qt, %kt, %vt : tensor<?x?x2x64xbf16>, tensor<?x?x1x64xbf16>, tensor<?x?x1x64xbf16>) outs(%ot : tensor<?x?x2x64xbf16>) {mask = #mha.mask<causal = true, window = 0, padding = false>, num_heads = 2 : i64, num_kv_heads = 1 : i64, scale = 0.125 : f32, softcap = 50.0 : f32} -> tensor<?x?x2x64xbf16>
  bufferization.materialize_in_destination %r in restrict writable %o : (tensor<?x?x2x64xbf16>, memref<?x?x2x64xbf16>) -> ()
  return
}
