// mha-tile-and-vectorize on a projection of op = layer (M = B*T rows, a
// dynamic shape): a parallel scf.forall of gemm-rows x gemm-cols blocks,
// depth slices of gemm-depth, and each slice's weights copied once into a
// contiguous panel that the register blocks read; a weight row read in
// place sits a whole weight row (here 1 KiB) after the last.
// RUN: mha-opt %s --mha-tile-and-vectorize="vector-width=16 rows=4 cols=2 gemm-rows=32 gemm-cols=128 gemm-depth=128" \
// RUN:   --canonicalize --cse | FileCheck %s
// A panel of 128 x 256 f32 (128 KiB) does not fit a stack buffer: the
// register blocks read the weights in place.
// RUN: mha-opt %s --mha-tile-and-vectorize="vector-width=16 rows=4 cols=2 gemm-rows=32 gemm-cols=256 gemm-depth=128" \
// RUN:   --canonicalize --cse | FileCheck %s --check-prefix=INPLACE

// CHECK-LABEL: func.func @projection
// CHECK-SAME: (%{{.*}}: tensor<?x512xf32>, %[[W:.*]]: tensor<512x256xf32>
// CHECK: scf.forall (%{{.*}}, %{{.*}}) = (0, 0) to (%{{.*}}, 256) step (32, 128)
// CHECK: scf.for %[[K:.*]] = %c0 to %c512 step %c128
// CHECK: %[[SLICE:.*]] = tensor.extract_slice %{{.*}}[%[[K]], 0] [128, 128] [1, 1] : tensor<512x128xf32> to tensor<128x128xf32>
// CHECK: %[[EMPTY:.*]] = tensor.empty() : tensor<128x128xf32>
// CHECK: %[[PANEL:.*]] = scf.for %{{.*}} = %c0 to %c128 step %c1 iter_args(%{{.*}} = %[[EMPTY]]) -> (tensor<128x128xf32>)
// CHECK: tensor.extract_slice %[[SLICE]]
// CHECK: tensor.insert_slice
// Register blocks of 4 rows x 32 columns, one depth step at a time.
// CHECK: scf.for %{{.*}} = %c0 to %c32 step %c4
// CHECK: scf.for %{{.*}} = %c0 to %c128 step %c32
// CHECK: scf.for %{{.*}} = %c0 to %c128 step %c1 iter_args(%{{.*}}) -> (vector<4x32xf32>)
// CHECK-NOT: %[[W]]{{\[}}
// CHECK: vector.transfer_read %[[PANEL]][%{{.*}}, %{{.*}}], %{{.*}} {in_bounds = [true, true]} : tensor<128x128xf32>, vector<1x32xf32>
// CHECK: vector.contract

// INPLACE-LABEL: func.func @projection
// INPLACE-SAME: (%{{.*}}: tensor<?x512xf32>, %[[W:.*]]: tensor<512x256xf32>
// INPLACE-NOT: tensor.empty
// INPLACE: scf.for %{{.*}} = %c0 to %c128 step %c1 iter_args(%{{.*}}) -> (vector<4x32xf32>)
// INPLACE: vector.transfer_read %[[W]][%{{.*}}, %{{.*}}], %{{.*}} {in_bounds = [true, true]} : tensor<512x256xf32>, vector<1x32xf32>
func.func @projection(%x: tensor<?x512xf32>, %w: tensor<512x256xf32>, %init: tensor<?x256xf32>) -> tensor<?x256xf32> {
  %r = linalg.matmul ins(%x, %w : tensor<?x512xf32>, tensor<512x256xf32>) outs(%init : tensor<?x256xf32>) -> tensor<?x256xf32>
  return %r : tensor<?x256xf32>
}
