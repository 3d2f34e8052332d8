// mha-lower-vectors, on its own input (what the `omp` stage leaves: vector
// register blocks on memrefs): contractions become outer-product FMAs
// (one broadcast row value times one vector of the other operand per
// accumulator row), row reductions inner reductions, vector.mask'ed
// transfers transfers with a mask operand, and a strided memref.copy plain
// loops (no call into MLIR's runner library).
// RUN: mha-opt %s --mha-lower-vectors | FileCheck %s

#lhs = affine_map<(i, j, k) -> (i, k)>
#rhs = affine_map<(i, j, k) -> (k, j)>
#acc = affine_map<(i, j, k) -> (i, j)>

// A 4 x 16 register block, k = 1: four broadcast-FMAs on 16 lanes.
// CHECK-LABEL: func.func @register_block
// CHECK-NOT: vector.contract
// CHECK-COUNT-4: vector.fma %{{.*}}, %{{.*}}, %{{.*}} : vector<16xf32>
// CHECK-NOT: vector.fma
// CHECK: return
func.func @register_block(%a: vector<4x1xf32>, %b: vector<1x16xf32>,
                          %c: vector<4x16xf32>) -> vector<4x16xf32> {
  %r = vector.contract {indexing_maps = [#lhs, #rhs, #acc],
                        iterator_types = ["parallel", "parallel", "reduction"],
                        kind = #vector.kind<add>}
       %a, %b, %c : vector<4x1xf32>, vector<1x16xf32> into vector<4x16xf32>
  return %r : vector<4x16xf32>
}

// The running max of 4 rows: one horizontal max per row.
// CHECK-LABEL: func.func @row_max
// CHECK-NOT: vector.multi_reduction
// CHECK-COUNT-4: vector.reduction <maximumf>, %{{.*}}, %{{.*}} : vector<16xf32> into f32
func.func @row_max(%s: vector<4x16xf32>, %init: vector<4xf32>) -> vector<4xf32> {
  %r = vector.multi_reduction <maximumf>, %s, %init [1]
       : vector<4x16xf32> to vector<4xf32>
  return %r : vector<4xf32>
}

// A partial key tile: the mask becomes the transfer's mask operand.
// CHECK-LABEL: func.func @partial_tile
// CHECK-NOT: vector.mask
// CHECK: %[[M:.*]] = vector.create_mask %{{.*}} : vector<16xi1>
// CHECK: vector.transfer_read %{{.*}}, %{{.*}}, %[[M]] {in_bounds = [true]} : memref<?x16xf32>, vector<16xf32>
func.func @partial_tile(%m: memref<?x16xf32>, %i: index, %n: index) -> vector<16xf32> {
  %pad = arith.constant 0.0 : f32
  %c0 = arith.constant 0 : index
  %mask = vector.create_mask %n : vector<16xi1>
  %v = vector.mask %mask {
    vector.transfer_read %m[%i, %c0], %pad {in_bounds = [true]}
      : memref<?x16xf32>, vector<16xf32>
  } : vector<16xi1> -> vector<16xf32>
  return %v : vector<16xf32>
}

// An output tile into the caller's strided tensor: loops, no memref.copy.
// CHECK-LABEL: func.func @strided_store
// CHECK-NOT: memref.copy
// CHECK: scf.for
// CHECK: scf.for
// CHECK: %[[X:.*]] = memref.load %{{.*}} : memref<8x16xf32>
// CHECK: memref.store %[[X]], %{{.*}} : memref<8x16xf32, strided<[?, 1], offset: ?>>
func.func @strided_store(%src: memref<8x16xf32>,
                         %dst: memref<8x16xf32, strided<[?, 1], offset: ?>>) {
  memref.copy %src, %dst
    : memref<8x16xf32> to memref<8x16xf32, strided<[?, 1], offset: ?>>
  return
}

// A partial key tile of whole rows (d_k 80) copied into its stack buffer:
// one scf.if per row, copying row i by unmasked 80-wide transfers when
// i < n and writing the padding row otherwise -- no i1 vector, whose
// <80 x i1> rows LLVM would build bit by bit.
// CHECK-LABEL: func.func @partial_rows_copy
// CHECK-NOT: create_mask
// CHECK: %[[PAD:.*]] = arith.constant dense<0.000000e+00> : vector<80xf32>
// CHECK: %[[V0:.*]] = arith.cmpi sgt, %[[N:.*]], %c0 : index
// CHECK: scf.if %[[V0]] {
// CHECK:   %[[ROW:.*]] = vector.transfer_read %{{.*}}[%c0, %c0], %{{.*}} {in_bounds = [true]} : memref<?x80xf32>, vector<80xf32>
// CHECK:   vector.transfer_write %[[ROW]], %{{.*}}[%c0, %c0] {in_bounds = [true]} : vector<80xf32>, memref<4x80xf32>
// CHECK: } else {
// CHECK:   vector.transfer_write %[[PAD]], %{{.*}}[%c0, %c0] {in_bounds = [true]} : vector<80xf32>, memref<4x80xf32>
// CHECK: arith.cmpi sgt, %[[N]], %c1 : index
// CHECK: vector.transfer_read %{{.*}}[%c1, %c0]
// CHECK-COUNT-2: scf.if
// CHECK-NOT: scf.if
// CHECK-NOT: xi1>
// CHECK: return
func.func @partial_rows_copy(%src: memref<?x80xf32>, %dst: memref<4x80xf32>,
                             %n: index) {
  %pad = arith.constant 0.0 : f32
  %c0 = arith.constant 0 : index
  %c80 = arith.constant 80 : index
  %m = vector.create_mask %n, %c80 : vector<4x80xi1>
  %v = vector.transfer_read %src[%c0, %c0], %pad, %m {in_bounds = [true, true]}
       : memref<?x80xf32>, vector<4x80xf32>
  vector.transfer_write %v, %dst[%c0, %c0] {in_bounds = [true, true]}
       : vector<4x80xf32>, memref<4x80xf32>
  return
}

// A mask that cuts the inner dimension is not a row mask: it stays.
// CHECK-LABEL: func.func @partial_columns_copy
// CHECK-NOT: scf.if
// CHECK: vector.create_mask
// CHECK: return
func.func @partial_columns_copy(%src: memref<4x?xf32>, %dst: memref<4x16xf32>,
                                %n: index) {
  %pad = arith.constant 0.0 : f32
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %m = vector.create_mask %c4, %n : vector<4x16xi1>
  %v = vector.transfer_read %src[%c0, %c0], %pad, %m {in_bounds = [true, true]}
       : memref<4x?xf32>, vector<4x16xf32>
  vector.transfer_write %v, %dst[%c0, %c0] {in_bounds = [true, true]}
       : vector<4x16xf32>, memref<4x16xf32>
  return
}
