// mha-hoist-stack-buffers: constant-size stack buffers leave the key-tile
// loop (one buffer per thread for all key tiles, so stack use does not grow
// with T_kv), but stay inside the parallel (batch, head, query tile) loop,
// whose iterations run on different threads. Dynamic-size allocas stay.
// RUN: mha-opt %s --mha-hoist-stack-buffers | FileCheck %s

// CHECK-LABEL: func.func @key_tiles
// CHECK: scf.forall
// CHECK-NEXT: %[[ACC:.*]] = memref.alloca() : memref<16x64xf32>
// CHECK-NEXT: %[[S:.*]] = memref.alloca() : memref<16x32xf32>
// CHECK-NEXT: scf.for
// CHECK-NOT: memref.alloca()
// CHECK: scf.for
// CHECK: memref.alloca(%{{.*}}) : memref<?xf32>
func.func @key_tiles(%out: memref<?x16x64xf32>, %n: index, %tiles: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %f0 = arith.constant 0.0 : f32
  scf.forall (%b) in (%n) {
    scf.for %t = %c0 to %tiles step %c1 {
      %acc = memref.alloca() : memref<16x64xf32>
      scf.for %u = %c0 to %tiles step %c1 {
        %s = memref.alloca() : memref<16x32xf32>
        memref.store %f0, %s[%c0, %c0] : memref<16x32xf32>
        %dyn = memref.alloca(%u) : memref<?xf32>
        memref.store %f0, %dyn[%c0] : memref<?xf32>
      }
      memref.store %f0, %acc[%c0, %c0] : memref<16x64xf32>
    }
  }
  return
}

// The whole function is one sequential loop nest: buffers go to its top.
// CHECK-LABEL: func.func @sequential
// CHECK: memref.alloca() : memref<8xf32>
// CHECK-NEXT: scf.for
// CHECK-NOT: memref.alloca
// CHECK: return
func.func @sequential(%n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %f0 = arith.constant 0.0 : f32
  scf.for %i = %c0 to %n step %c1 {
    %buf = memref.alloca() : memref<8xf32>
    memref.store %f0, %buf[%c0] : memref<8xf32>
  }
  return
}
