// mha-polynomial-exp: math.exp becomes the upstream Cephes-style
// polynomial (range reduction by ln 2, a degree-6 polynomial in FMAs, the
// power of two built in the exponent bits), so the softmax is pure vector
// arithmetic instead of a libm call per lane.
// RUN: mha-opt %s --mha-polynomial-exp | FileCheck %s

// CHECK-LABEL: func.func @softmax_exp
// CHECK-NOT: math.exp
// Clamp of the input to the range where the result is finite and normal.
// CHECK: arith.cmpf uge, %arg0, %{{.*}} : vector<16xf32>
// CHECK: arith.select
// n = floor(x log2(e) + 1/2)
// CHECK: math.fma %{{.*}}, %{{.*}}, %{{.*}} : vector<16xf32>
// CHECK: math.floor %{{.*}} : vector<16xf32>
// The polynomial, all FMAs on 16 lanes.
// CHECK-COUNT-7: math.fma %{{.*}} : vector<16xf32>
// 2^n through the exponent field: (n + 127) << 23.
// CHECK: arith.fptosi %{{.*}} : vector<16xf32> to vector<16xi32>
// CHECK: arith.shli
// CHECK: arith.bitcast %{{.*}} : vector<16xi32> to vector<16xf32>
// CHECK: arith.mulf
// Scalars (the softmax's epilogue) take the same route.
// CHECK: math.floor %{{.*}} : f32
// CHECK-NOT: math.exp
// CHECK: return
func.func @softmax_exp(%x: vector<16xf32>, %y: f32) -> (vector<16xf32>, f32) {
  %a = math.exp %x : vector<16xf32>
  %b = math.exp %y : f32
  return %a, %b : vector<16xf32>, f32
}

// The softcap's tanh (score modifiers) takes the same route: a clamp to
// +-7.99881, a rational function in FMAs, no libm call.
// CHECK-LABEL: func.func @softcap_tanh
// CHECK-NOT: math.tanh
// CHECK: arith.constant dense<7.99881172> : vector<16xf32>
// CHECK: math.fma %{{.*}} : vector<16xf32>
// CHECK: arith.divf %{{.*}} : vector<16xf32>
// CHECK-NOT: math.tanh
// CHECK: return
func.func @softcap_tanh(%x: vector<16xf32>) -> vector<16xf32> {
  %t = math.tanh %x : vector<16xf32>
  return %t : vector<16xf32>
}
