// mha-parallelize: the (batch, head, query tile) scf.forall becomes one
// OpenMP worksharing loop over all its iterations, with the thread count
// the caller set through the runtime (mhagen_set_num_threads) read at each
// call; per-iteration stack buffers are released per iteration. The loop
// is handed out one iteration at a time (schedule dynamic) and the query
// tile runs from the last down: the body indexes with tiles - 1 - t, so
// each (batch, head) starts with its costliest causal tile.
// RUN: mha-opt %s --mha-parallelize | FileCheck %s

// CHECK: func.func private @mhagen_get_num_threads() -> i32
// CHECK-LABEL: func.func @tiles
// CHECK-NOT: scf.forall
// CHECK: %[[N:.*]] = call @mhagen_get_num_threads() : () -> i32
// CHECK-NEXT: omp.parallel num_threads(%[[N]] : i32) {
// CHECK-NEXT: omp.wsloop schedule(dynamic) {
// CHECK-NEXT: omp.loop_nest (%[[B:.*]], %[[H:.*]], %[[T:.*]]) : index = (%c0{{.*}}, %c0{{.*}}, %[[LB:c0[_0-9]*]]) to (%arg1, %c8, %arg2) step (%c1{{.*}}, %c1{{.*}}, %c1{{.*}}) {
// CHECK-NEXT: %[[ONE:.*]] = arith.constant 1 : index
// CHECK-NEXT: %[[TOP:.*]] = arith.subi %arg2, %[[ONE]] : index
// CHECK-NEXT: %[[SUM:.*]] = arith.addi %[[LB]], %[[TOP]] : index
// CHECK-NEXT: %[[MIRROR:.*]] = arith.subi %[[SUM]], %[[T]] : index
// CHECK-NEXT: memref.alloca_scope {
// CHECK: memref.subview %arg0[%[[B]], %[[MIRROR]], %[[H]], 0]
// CHECK: memref.alloca() : memref<16x64xf32>
// CHECK: omp.yield
// CHECK: omp.terminator
// CHECK: omp.terminator
func.func @tiles(%out: memref<?x?x8x64xf32>, %batch: index, %tiles: index) {
  %c2 = arith.constant 2.0 : f32
  scf.forall (%b, %h, %t) in (%batch, 8, %tiles) {
    %o = memref.subview %out[%b, %t, %h, 0] [1, 16, 1, 64] [1, 1, 1, 1]
        : memref<?x?x8x64xf32> to memref<16x64xf32, strided<[512, 1], offset: ?>>
    %tmp = memref.alloca() : memref<16x64xf32>
    linalg.fill ins(%c2 : f32) outs(%tmp : memref<16x64xf32>)
    linalg.copy ins(%tmp : memref<16x64xf32>)
                outs(%o : memref<16x64xf32, strided<[512, 1], offset: ?>>)
  }
  return
}
