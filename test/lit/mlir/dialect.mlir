// The mha dialect round-trips through its textual form, in both the
// generic and the custom assembly, with and without kv_lens.
// RUN: mha-opt %s | FileCheck %s
// RUN: mha-opt %s | mha-opt | FileCheck %s
// RUN: mha-opt %s --mlir-print-op-generic | mha-opt | FileCheck %s

// CHECK-LABEL: func.func @gqa_causal
// CHECK: mha.attention ins(%{{.*}}, %{{.*}}, %{{.*}} : tensor<?x?x32x128xf32>, tensor<?x?x8x128xf32>, tensor<?x?x8x128xf32>) outs(%{{.*}} : tensor<?x?x32x128xf32>)
// CHECK-SAME: mask = #mha.mask<causal = true, window = 0, padding = false>
// CHECK-SAME: num_heads = 32 : i64, num_kv_heads = 8 : i64
// CHECK-SAME: -> tensor<?x?x32x128xf32>
func.func @gqa_causal(%q: tensor<?x?x32x128xf32>, %k: tensor<?x?x8x128xf32>,
                      %v: tensor<?x?x8x128xf32>, %o: tensor<?x?x32x128xf32>)
    -> tensor<?x?x32x128xf32> {
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x32x128xf32>,
                         tensor<?x?x8x128xf32>, tensor<?x?x8x128xf32>)
         outs(%o : tensor<?x?x32x128xf32>)
         {num_heads = 32 : i64, num_kv_heads = 8 : i64,
          scale = 0.0883883461 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = false>}
         -> tensor<?x?x32x128xf32>
  return %r : tensor<?x?x32x128xf32>
}

// Static sizes, bf16, T_q != T_kv, a window and padding lengths.
// CHECK-LABEL: func.func @window_padding_bf16
// CHECK: mha.attention ins({{.*}} : tensor<2x7x4x80xbf16>, tensor<2x19x1x80xbf16>, tensor<2x19x1x64xbf16>) kv_lens(%{{.*}} : tensor<2xi32>) outs(%{{.*}} : tensor<2x7x4x64xbf16>)
// CHECK-SAME: mask = #mha.mask<causal = false, window = 40, padding = true>
// CHECK-SAME: num_kv_heads = 1 : i64
func.func @window_padding_bf16(%q: tensor<2x7x4x80xbf16>,
                               %k: tensor<2x19x1x80xbf16>,
                               %v: tensor<2x19x1x64xbf16>,
                               %lens: tensor<2xi32>,
                               %o: tensor<2x7x4x64xbf16>)
    -> tensor<2x7x4x64xbf16> {
  %r = mha.attention ins(%q, %k, %v : tensor<2x7x4x80xbf16>,
                         tensor<2x19x1x80xbf16>, tensor<2x19x1x64xbf16>)
         kv_lens(%lens : tensor<2xi32>)
         outs(%o : tensor<2x7x4x64xbf16>)
         {num_heads = 4 : i64, num_kv_heads = 1 : i64, scale = 0.1 : f32,
          mask = #mha.mask<causal = false, window = 40, padding = true>}
         -> tensor<2x7x4x64xbf16>
  return %r : tensor<2x7x4x64xbf16>
}

// A mask union (mask_or, the sink term printed only when set) and the
// call's scale (scale_factor).
// CHECK-LABEL: func.func @streaming_runtime_scale
// CHECK: mha.attention ins({{.*}}) scale_factor(%{{.*}} : tensor<1xf32>) outs(%{{.*}} : tensor<?x?x8x64xf32>)
// CHECK-SAME: mask = #mha.mask<causal = false, window = 256, padding = false>
// CHECK-SAME: mask_or = [#mha.mask<causal = true, window = 0, padding = false, sink = 4>]
func.func @streaming_runtime_scale(%q: tensor<?x?x8x64xf32>,
                                   %k: tensor<?x?x2x64xf32>,
                                   %v: tensor<?x?x2x64xf32>,
                                   %s: tensor<1xf32>,
                                   %o: tensor<?x?x8x64xf32>)
    -> tensor<?x?x8x64xf32> {
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x8x64xf32>,
                         tensor<?x?x2x64xf32>, tensor<?x?x2x64xf32>)
         scale_factor(%s : tensor<1xf32>)
         outs(%o : tensor<?x?x8x64xf32>)
         {num_heads = 8 : i64, num_kv_heads = 2 : i64, scale = 1.0 : f32,
          mask = #mha.mask<causal = false, window = 256, padding = false>,
          mask_or = [#mha.mask<causal = true, window = 0, padding = false,
                               sink = 4>]}
         -> tensor<?x?x8x64xf32>
  return %r : tensor<?x?x8x64xf32>
}
