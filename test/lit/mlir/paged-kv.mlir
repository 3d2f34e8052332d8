// A paged K/V cache (kv_cache = paged(BLOCK), docs/design.md §5 "Paged
// K/V") in both lowering forms. K and V are a pool of blocks [num_blocks,
// BLOCK, kv, dk]; token t of batch b is slot t % BLOCK of block
// block_table[b, t / BLOCK]. The key tile is the largest divisor of BLOCK
// up to key-tile that is at most 16 or a multiple of 16 (here 16), so each
// K/V tile is one slice of one block: one table load per tile,
// the column and the block index clamped into the table and the pool, the
// rows cut at the sequence's length (later slots may hold NaN) -- no gather.
// RUN: mha-opt %s --mha-lower-to-linalg="query-tile=16 key-tile=32" --canonicalize --cse | FileCheck %s --check-prefix=FLASH
// RUN: mha-opt %s --mha-split-kv-decode="decode-tokens=1 key-tile=32 split-tasks=8 split-min-keys=64" --canonicalize --cse | FileCheck %s --check-prefix=SPLIT
// RUN: mha-opt %s --mha-lower-to-linalg="query-tile=16 key-tile=32" --canonicalize --cse | FileCheck %s --check-prefix=I8

// FLASH-LABEL: func.func @paged_causal
// FLASH-SAME: (%[[Q:.*]]: tensor<?x?x8x64xf32>, %[[K:.*]]: tensor<?x16x2x64xf32>, %[[V:.*]]: tensor<?x16x2x64xf32>, %[[LENS:.*]]: tensor<?xi32>, %[[TABLE:.*]]: tensor<?x?xi32>, %{{.*}}: tensor<?x?x8x64xf32>)
// FLASH-DAG: %[[C16:.*]] = arith.constant 16 : index
// FLASH-DAG: %[[TQ:.*]] = tensor.dim %[[Q]], %c1
// T_kv is the table's capacity: its width times BLOCK.
// FLASH-DAG: %[[W:.*]] = tensor.dim %[[TABLE]], %c1
// FLASH: %[[TKV:.*]] = arith.muli %[[W]], %[[C16]]
// FLASH: scf.forall (%[[B:.*]], %[[H:.*]], %[[QT:.*]]) in
// Positions per sequence: query i sits at i + kv_lens[b] - T_q.
// FLASH: %[[LEN32:.*]] = tensor.extract %[[LENS]][%[[B]]]
// FLASH: %[[LEN:.*]] = arith.index_cast %[[LEN32]]
// FLASH: %[[KVH:.*]] = arith.divui %[[H]], %c4
// FLASH: arith.subi %[[LEN]], %[[TQ]]
// The key tiles stop at the sequence's length.
// FLASH: arith.ceildivsi %[[LEN]], %[[C16]]
// FLASH: scf.for %[[KT:.*]] = %c0 to %{{.*}} step %c1 iter_args({{.*}}) -> (tensor<16x64xf32>, tensor<16xf32>, tensor<16xf32>)
// FLASH: %[[K0:.*]] = arith.muli %[[KT]], %[[C16]]
// The table column k0 / BLOCK, clamped to the table's last column.
// FLASH: %[[WLAST:.*]] = arith.subi %[[W]], %c1
// FLASH: %[[COL0:.*]] = arith.floordivsi %[[K0]], %[[C16]]
// FLASH: %[[COL:.*]] = arith.minsi %[[COL0]], %[[WLAST]]
// FLASH: %[[ENTRY:.*]] = tensor.extract %[[TABLE]][%[[B]], %[[COL]]] : tensor<?x?xi32>
// The block index, clamped into the pool [0, num_blocks).
// FLASH: %[[NB:.*]] = tensor.dim %[[K]], %c0
// FLASH: %[[NBLAST:.*]] = arith.subi %[[NB]], %c1
// FLASH: %[[E:.*]] = arith.index_cast %[[ENTRY]] : i32 to index
// FLASH: %[[E1:.*]] = arith.minsi %[[E]], %[[NBLAST]]
// FLASH: %[[BLK:.*]] = arith.maxsi %[[E1]], %c0
// FLASH: %[[SLOT:.*]] = arith.remsi %[[K0]], %[[C16]]
// Rows: at most the tile, and none past kv_lens[b].
// FLASH: %[[LEFT:.*]] = arith.subi %[[LEN]], %[[K0]]
// FLASH: %[[R0:.*]] = arith.minsi %{{.*}}, %[[LEFT]]
// FLASH: %[[ROWS:.*]] = arith.maxsi %[[R0]], %c0
// FLASH: tensor.extract_slice %[[K]][%[[BLK]], %[[SLOT]], %[[KVH]], 0] [1, %[[ROWS]], 1, 64]
// FLASH: tensor.pad
// FLASH: tensor<?x64xf32> to tensor<16x64xf32>
// FLASH: tensor.extract_slice %[[V]][%[[BLK]], %[[SLOT]], %[[KVH]], 0] [1, %[[ROWS]], 1, 64]
// FLASH: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<16x64xf32>, tensor<64x16xf32>) outs(%{{.*}} : tensor<16x16xf32>)
// FLASH-NOT: tensor.extract %[[TABLE]]
// FLASH: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<16x16xf32>, tensor<16x64xf32>)

// The split-KV decode form reads the same blocks: per (batch, chunk) task,
// per key tile, per K/V head.
// SPLIT-LABEL: func.func @paged_causal
// SPLIT-SAME: %[[K:[^:]*]]: tensor<?x16x2x64xf32>, %[[V:[^:]*]]: tensor<?x16x2x64xf32>, %{{.*}}: tensor<?xi32>, %[[TABLE:[^:]*]]: tensor<?x?xi32>
// SPLIT: %[[W:.*]] = tensor.dim %[[TABLE]], %c1
// SPLIT: %[[TKV:.*]] = arith.muli %[[W]], %c16
// SPLIT: scf.if
// The chunk count from the table's key tiles of 16.
// SPLIT: arith.ceildivsi %[[TKV]], %c16
// SPLIT: scf.forall (%[[B:.*]], %{{.*}}) in
// The tile's table entry, block and slot are looked up once per tile,
// above the loop over the K/V heads.
// SPLIT: scf.for %[[KT:.*]] = {{.*}} iter_args({{.*}}) -> (tensor<2x4x64xf32>, tensor<2x4xf32>, tensor<2x4xf32>)
// SPLIT-NEXT: %[[K0:.*]] = arith.muli %[[KT]], %c16
// SPLIT: tensor.extract %[[TABLE]][%[[B]], %{{.*}}] : tensor<?x?xi32>
// SPLIT: %[[SLOT:.*]] = arith.remsi %[[K0]], %c16
// SPLIT: scf.for %[[G:.*]] = %c0 to %c2
// SPLIT-NOT: tensor.extract %[[TABLE]]
// SPLIT: tensor.extract_slice %[[K]][%[[BLK:.*]], %[[SLOT]], %[[G]], 0] [1, %[[ROWS:.*]], 1, 64]
// SPLIT: tensor.extract_slice %[[V]][%[[BLK]], %[[SLOT]], %[[G]], 0] [1, %[[ROWS]], 1, 64]
// Longer calls keep the op, with its table, for the flash form.
// SPLIT: mha.attention {{.*}} block_table(%[[TABLE]] : tensor<?x?xi32>)
func.func @paged_causal(%q: tensor<?x?x8x64xf32>, %k: tensor<?x16x2x64xf32>,
                        %v: tensor<?x16x2x64xf32>, %lens: tensor<?xi32>,
                        %table: tensor<?x?xi32>, %o: tensor<?x?x8x64xf32>)
    -> tensor<?x?x8x64xf32> {
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x8x64xf32>, tensor<?x16x2x64xf32>, tensor<?x16x2x64xf32>)
         kv_lens(%lens : tensor<?xi32>)
         block_table(%table : tensor<?x?xi32>)
         outs(%o : tensor<?x?x8x64xf32>)
         {num_heads = 8 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = true>, per_sequence}
         -> tensor<?x?x8x64xf32>
  return %r : tensor<?x?x8x64xf32>
}

// int8 blocks of 48 (not a power of two) under key-tile 32: tiles of 16,
// three to a block (24 divides 48 too, but a tile above 16 that is not a
// multiple of 16 runs ~10x slower); the scales come from the same block
// and slot as the rows.
// I8-LABEL: func.func @paged_i8
// I8-SAME: %[[K:[^:]*]]: tensor<?x48x1x64xi8>, %[[V:[^:]*]]: tensor<?x48x1x64xi8>, %{{.*}}: tensor<?xi32>, %[[KS:[^:]*]]: tensor<?x48x1xf32>, %[[VS:[^:]*]]: tensor<?x48x1xf32>, %[[TABLE:[^:]*]]: tensor<?x?xi32>
// I8: %[[W:.*]] = tensor.dim %[[TABLE]], %c1
// I8: arith.muli %[[W]], %c48
// I8: scf.for %[[KT:.*]] = %c0 to %{{.*}} iter_args({{.*}}) -> (tensor<16x64xf32>, tensor<16xf32>, tensor<16xf32>)
// I8: %[[K0:.*]] = arith.muli %[[KT]], %c16
// I8: arith.floordivsi %[[K0]], %c48
// I8: tensor.extract %[[TABLE]]
// I8: %[[SLOT:.*]] = arith.remsi %[[K0]], %c48
// I8: tensor.extract_slice %[[K]][%[[BLK:.*]], %[[SLOT]], %[[G:.*]], 0] [1, %[[ROWS:.*]], 1, 64] {{.*}} to tensor<?x64xi8>
// I8: tensor.extract_slice %[[KS]][%[[BLK]], %[[SLOT]], %[[G]]] [1, %[[ROWS]], 1] {{.*}} to tensor<?xf32>
// I8: arith.sitofp
// I8: tensor.extract_slice %[[V]][%[[BLK]], %[[SLOT]], %[[G]], 0] [1, %[[ROWS]], 1, 64]
// I8: tensor.extract_slice %[[VS]][%[[BLK]], %[[SLOT]], %[[G]]] [1, %[[ROWS]], 1]
func.func @paged_i8(%q: tensor<?x?x4x64xf32>, %k: tensor<?x48x1x64xi8>,
                    %v: tensor<?x48x1x64xi8>, %lens: tensor<?xi32>,
                    %ks: tensor<?x48x1xf32>, %vs: tensor<?x48x1xf32>,
                    %table: tensor<?x?xi32>, %o: tensor<?x?x4x64xf32>)
    -> tensor<?x?x4x64xf32> {
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x4x64xf32>, tensor<?x48x1x64xi8>, tensor<?x48x1x64xi8>)
         kv_lens(%lens : tensor<?xi32>)
         kv_scales(%ks, %vs : tensor<?x48x1xf32>, tensor<?x48x1xf32>)
         block_table(%table : tensor<?x?xi32>)
         outs(%o : tensor<?x?x4x64xf32>)
         {num_heads = 4 : i64, num_kv_heads = 1 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = false, window = 0, padding = true>, per_sequence}
         -> tensor<?x?x4x64xf32>
  return %r : tensor<?x?x4x64xf32>
}
