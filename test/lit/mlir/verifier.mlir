// Each rule of the mha.attention verifier, with its diagnostic.
// RUN: mha-opt %s -split-input-file -verify-diagnostics

// Every operand is [batch, tokens, heads, width].
func.func @f(%q: tensor<?x4x64xf32>, %k: tensor<?x?x2x64xf32>, %v: tensor<?x?x2x64xf32>, %o: tensor<?x?x4x64xf32>) -> tensor<?x?x4x64xf32> {
  // expected-error @+1 {{'mha.attention' op query must have rank 4 ([batch, tokens, heads, width]), got rank 3}}
  %r = mha.attention ins(%q, %k, %v : tensor<?x4x64xf32>, tensor<?x?x2x64xf32>, tensor<?x?x2x64xf32>)
         outs(%o : tensor<?x?x4x64xf32>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = false>}
         -> tensor<?x?x4x64xf32>
  return %r : tensor<?x?x4x64xf32>
}

// -----

// The result is the init tensor.
func.func @f(%q: tensor<?x?x4x64xf32>, %k: tensor<?x?x2x64xf32>, %v: tensor<?x?x2x64xf32>, %o: tensor<?x?x4x64xf32>) -> tensor<1x?x4x64xf32> {
  // expected-error @+1 {{result type 'tensor<1x?x4x64xf32>' must equal the init type 'tensor<?x?x4x64xf32>'}}
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x4x64xf32>, tensor<?x?x2x64xf32>, tensor<?x?x2x64xf32>)
         outs(%o : tensor<?x?x4x64xf32>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = false>}
         -> tensor<1x?x4x64xf32>
  return %r : tensor<1x?x4x64xf32>
}

// -----

// Head counts are positive.
func.func @f(%q: tensor<?x?x4x64xf32>, %k: tensor<?x?x2x64xf32>, %v: tensor<?x?x2x64xf32>, %o: tensor<?x?x4x64xf32>) -> tensor<?x?x4x64xf32> {
  // expected-error @+1 {{num_heads and num_kv_heads must be > 0, got 4 and 0}}
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x4x64xf32>, tensor<?x?x2x64xf32>, tensor<?x?x2x64xf32>)
         outs(%o : tensor<?x?x4x64xf32>)
         {num_heads = 4 : i64, num_kv_heads = 0 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = false>}
         -> tensor<?x?x4x64xf32>
  return %r : tensor<?x?x4x64xf32>
}

// -----

// GQA: query heads split evenly over key/value heads.
func.func @f(%q: tensor<?x?x4x64xf32>, %k: tensor<?x?x3x64xf32>, %v: tensor<?x?x3x64xf32>, %o: tensor<?x?x4x64xf32>) -> tensor<?x?x4x64xf32> {
  // expected-error @+1 {{num_heads (4) must be divisible by num_kv_heads (3)}}
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x4x64xf32>, tensor<?x?x3x64xf32>, tensor<?x?x3x64xf32>)
         outs(%o : tensor<?x?x4x64xf32>)
         {num_heads = 4 : i64, num_kv_heads = 3 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = false>}
         -> tensor<?x?x4x64xf32>
  return %r : tensor<?x?x4x64xf32>
}

// -----

// The query's head dimension is num_heads.
func.func @f(%q: tensor<?x?x8x64xf32>, %k: tensor<?x?x2x64xf32>, %v: tensor<?x?x2x64xf32>, %o: tensor<?x?x4x64xf32>) -> tensor<?x?x4x64xf32> {
  // expected-error @+1 {{query and init must have num_heads (4) as static dimension 2}}
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x8x64xf32>, tensor<?x?x2x64xf32>, tensor<?x?x2x64xf32>)
         outs(%o : tensor<?x?x4x64xf32>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = false>}
         -> tensor<?x?x4x64xf32>
  return %r : tensor<?x?x4x64xf32>
}

// -----

// Key and value carry num_kv_heads heads (no copies per query head).
func.func @f(%q: tensor<?x?x4x64xf32>, %k: tensor<?x?x4x64xf32>, %v: tensor<?x?x2x64xf32>, %o: tensor<?x?x4x64xf32>) -> tensor<?x?x4x64xf32> {
  // expected-error @+1 {{key and value must have num_kv_heads (2) as static dimension 2}}
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x4x64xf32>, tensor<?x?x4x64xf32>, tensor<?x?x2x64xf32>)
         outs(%o : tensor<?x?x4x64xf32>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = false>}
         -> tensor<?x?x4x64xf32>
  return %r : tensor<?x?x4x64xf32>
}

// -----

// Head widths are static (they size the register tiles).
func.func @f(%q: tensor<?x?x4x?xf32>, %k: tensor<?x?x2x64xf32>, %v: tensor<?x?x2x64xf32>, %o: tensor<?x?x4x?xf32>) -> tensor<?x?x4x?xf32> {
  // expected-error @+1 {{query head width (dimension 3) must be static}}
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x4x?xf32>, tensor<?x?x2x64xf32>, tensor<?x?x2x64xf32>)
         outs(%o : tensor<?x?x4x?xf32>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = false>}
         -> tensor<?x?x4x?xf32>
  return %r : tensor<?x?x4x?xf32>
}

// -----

// QK^T contracts d_k: query and key widths agree.
func.func @f(%q: tensor<?x?x4x80xf32>, %k: tensor<?x?x2x64xf32>, %v: tensor<?x?x2x64xf32>, %o: tensor<?x?x4x64xf32>) -> tensor<?x?x4x64xf32> {
  // expected-error @+1 {{query and key head widths differ (80 vs 64)}}
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x4x80xf32>, tensor<?x?x2x64xf32>, tensor<?x?x2x64xf32>)
         outs(%o : tensor<?x?x4x64xf32>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = false>}
         -> tensor<?x?x4x64xf32>
  return %r : tensor<?x?x4x64xf32>
}

// -----

// The output width is d_v, the value's width.
func.func @f(%q: tensor<?x?x4x64xf32>, %k: tensor<?x?x2x64xf32>, %v: tensor<?x?x2x32xf32>, %o: tensor<?x?x4x64xf32>) -> tensor<?x?x4x64xf32> {
  // expected-error @+1 {{value and init head widths differ (32 vs 64)}}
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x4x64xf32>, tensor<?x?x2x64xf32>, tensor<?x?x2x32xf32>)
         outs(%o : tensor<?x?x4x64xf32>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = false>}
         -> tensor<?x?x4x64xf32>
  return %r : tensor<?x?x4x64xf32>
}

// -----

// One batch size.
func.func @f(%q: tensor<2x?x4x64xf32>, %k: tensor<3x?x2x64xf32>, %v: tensor<?x?x2x64xf32>, %o: tensor<?x?x4x64xf32>) -> tensor<?x?x4x64xf32> {
  // expected-error @+1 {{batch sizes (dimension 0) differ}}
  %r = mha.attention ins(%q, %k, %v : tensor<2x?x4x64xf32>, tensor<3x?x2x64xf32>, tensor<?x?x2x64xf32>)
         outs(%o : tensor<?x?x4x64xf32>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = false>}
         -> tensor<?x?x4x64xf32>
  return %r : tensor<?x?x4x64xf32>
}

// -----

// One key per value.
func.func @f(%q: tensor<?x?x4x64xf32>, %k: tensor<?x10x2x64xf32>, %v: tensor<?x11x2x64xf32>, %o: tensor<?x?x4x64xf32>) -> tensor<?x?x4x64xf32> {
  // expected-error @+1 {{key and value token counts differ}}
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x4x64xf32>, tensor<?x10x2x64xf32>, tensor<?x11x2x64xf32>)
         outs(%o : tensor<?x?x4x64xf32>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = false>}
         -> tensor<?x?x4x64xf32>
  return %r : tensor<?x?x4x64xf32>
}

// -----

// One output row per query.
func.func @f(%q: tensor<?x5x4x64xf32>, %k: tensor<?x?x2x64xf32>, %v: tensor<?x?x2x64xf32>, %o: tensor<?x6x4x64xf32>) -> tensor<?x6x4x64xf32> {
  // expected-error @+1 {{query and init token counts differ}}
  %r = mha.attention ins(%q, %k, %v : tensor<?x5x4x64xf32>, tensor<?x?x2x64xf32>, tensor<?x?x2x64xf32>)
         outs(%o : tensor<?x6x4x64xf32>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = false>}
         -> tensor<?x6x4x64xf32>
  return %r : tensor<?x6x4x64xf32>
}

// -----

// Only the dtypes of the spec language.
func.func @f(%q: tensor<?x?x4x64xf64>, %k: tensor<?x?x2x64xf64>, %v: tensor<?x?x2x64xf64>, %o: tensor<?x?x4x64xf64>) -> tensor<?x?x4x64xf64> {
  // expected-error @+1 {{element type must be f32, bf16 or f16, got 'f64'}}
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x4x64xf64>, tensor<?x?x2x64xf64>, tensor<?x?x2x64xf64>)
         outs(%o : tensor<?x?x4x64xf64>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = false>}
         -> tensor<?x?x4x64xf64>
  return %r : tensor<?x?x4x64xf64>
}

// -----

// K and V share one storage type (which may differ from Q's).
func.func @f(%q: tensor<?x?x4x64xf32>, %k: tensor<?x?x2x64xbf16>, %v: tensor<?x?x2x64xf32>, %o: tensor<?x?x4x64xf32>) -> tensor<?x?x4x64xf32> {
  // expected-error @+1 {{key and value must share one element type}}
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x4x64xf32>, tensor<?x?x2x64xbf16>, tensor<?x?x2x64xf32>)
         outs(%o : tensor<?x?x4x64xf32>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = false>}
         -> tensor<?x?x4x64xf32>
  return %r : tensor<?x?x4x64xf32>
}

// -----

// The output has the query's type.
func.func @f(%q: tensor<?x?x4x64xbf16>, %k: tensor<?x?x2x64xbf16>, %v: tensor<?x?x2x64xbf16>, %o: tensor<?x?x4x64xf32>) -> tensor<?x?x4x64xf32> {
  // expected-error @+1 {{query and init must share one element type}}
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x4x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?x?x2x64xbf16>)
         outs(%o : tensor<?x?x4x64xf32>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = false>}
         -> tensor<?x?x4x64xf32>
  return %r : tensor<?x?x4x64xf32>
}

// -----

// int8 K/V need their row scales.
func.func @f(%q: tensor<?x?x4x64xf32>, %k: tensor<?x?x2x64xi8>, %v: tensor<?x?x2x64xi8>, %o: tensor<?x?x4x64xf32>) -> tensor<?x?x4x64xf32> {
  // expected-error @+1 {{i8 keys and values need kv_scales}}
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x4x64xf32>, tensor<?x?x2x64xi8>, tensor<?x?x2x64xi8>)
         outs(%o : tensor<?x?x4x64xf32>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = false>}
         -> tensor<?x?x4x64xf32>
  return %r : tensor<?x?x4x64xf32>
}

// -----

// One f32 scale per key/value row: [B, Tkv, kv].
func.func @f(%q: tensor<?x?x4x64xf32>, %k: tensor<?x?x2x64xi8>, %v: tensor<?x?x2x64xi8>, %ks: tensor<?x?x4xf32>, %vs: tensor<?x?x4xf32>, %o: tensor<?x?x4x64xf32>) -> tensor<?x?x4x64xf32> {
  // expected-error @+1 {{kv_scales must be tensor<BxTkvx2xf32> (one per key/value row), got 'tensor<?x?x4xf32>'}}
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x4x64xf32>, tensor<?x?x2x64xi8>, tensor<?x?x2x64xi8>)
         kv_scales(%ks, %vs : tensor<?x?x4xf32>, tensor<?x?x4xf32>)
         outs(%o : tensor<?x?x4x64xf32>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = false>}
         -> tensor<?x?x4x64xf32>
  return %r : tensor<?x?x4x64xf32>
}

// -----

// Scales belong to int8 K/V only.
func.func @f(%q: tensor<?x?x4x64xf32>, %k: tensor<?x?x2x64xf16>, %v: tensor<?x?x2x64xf16>, %ks: tensor<?x?x2xf32>, %vs: tensor<?x?x2xf32>, %o: tensor<?x?x4x64xf32>) -> tensor<?x?x4x64xf32> {
  // expected-error @+1 {{kv_scales given but keys and values are not i8}}
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x4x64xf32>, tensor<?x?x2x64xf16>, tensor<?x?x2x64xf16>)
         kv_scales(%ks, %vs : tensor<?x?x2xf32>, tensor<?x?x2xf32>)
         outs(%o : tensor<?x?x4x64xf32>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = false>}
         -> tensor<?x?x4x64xf32>
  return %r : tensor<?x?x4x64xf32>
}

// -----

// The logit scale is positive.
func.func @f(%q: tensor<?x?x4x64xf32>, %k: tensor<?x?x2x64xf32>, %v: tensor<?x?x2x64xf32>, %o: tensor<?x?x4x64xf32>) -> tensor<?x?x4x64xf32> {
  // expected-error @+1 {{scale must be > 0}}
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x4x64xf32>, tensor<?x?x2x64xf32>, tensor<?x?x2x64xf32>)
         outs(%o : tensor<?x?x4x64xf32>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.0 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = false>}
         -> tensor<?x?x4x64xf32>
  return %r : tensor<?x?x4x64xf32>
}

// -----

// A padding mask needs the lengths ...
func.func @f(%q: tensor<?x?x4x64xf32>, %k: tensor<?x?x2x64xf32>, %v: tensor<?x?x2x64xf32>, %o: tensor<?x?x4x64xf32>) -> tensor<?x?x4x64xf32> {
  // expected-error @+1 {{mask has padding but no kv_lens operand}}
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x4x64xf32>, tensor<?x?x2x64xf32>, tensor<?x?x2x64xf32>)
         outs(%o : tensor<?x?x4x64xf32>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = false, window = 0, padding = true>}
         -> tensor<?x?x4x64xf32>
  return %r : tensor<?x?x4x64xf32>
}

// -----

// ... and lengths need a padding mask.
func.func @f(%q: tensor<?x?x4x64xf32>, %k: tensor<?x?x2x64xf32>, %v: tensor<?x?x2x64xf32>, %o: tensor<?x?x4x64xf32>, %l: tensor<?xi32>) -> tensor<?x?x4x64xf32> {
  // expected-error @+1 {{kv_lens given but the mask has no padding}}
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x4x64xf32>, tensor<?x?x2x64xf32>, tensor<?x?x2x64xf32>)
         kv_lens(%l : tensor<?xi32>)
         outs(%o : tensor<?x?x4x64xf32>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = false>}
         -> tensor<?x?x4x64xf32>
  return %r : tensor<?x?x4x64xf32>
}

// -----

// per_sequence positions (a ragged batch) come from kv_lens: every clause
// must also hide the keys past each sequence's length.
func.func @f(%q: tensor<?x?x4x64xf32>, %k: tensor<?x?x2x64xf32>, %v: tensor<?x?x2x64xf32>, %o: tensor<?x?x4x64xf32>, %l: tensor<?xi32>) -> tensor<?x?x4x64xf32> {
  // expected-error @+1 {{per_sequence positions need a padding term in every mask clause}}
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x4x64xf32>, tensor<?x?x2x64xf32>, tensor<?x?x2x64xf32>)
         kv_lens(%l : tensor<?xi32>)
         outs(%o : tensor<?x?x4x64xf32>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = true>,
          mask_or = [#mha.mask<causal = false, window = 0, padding = false, sink = 4>],
          per_sequence}
         -> tensor<?x?x4x64xf32>
  return %r : tensor<?x?x4x64xf32>
}

// -----

// Lengths are i32, one per batch.
func.func @f(%q: tensor<?x?x4x64xf32>, %k: tensor<?x?x2x64xf32>, %v: tensor<?x?x2x64xf32>, %o: tensor<?x?x4x64xf32>, %l: tensor<?xi64>) -> tensor<?x?x4x64xf32> {
  // expected-error @+1 {{kv_lens must be a rank-1 tensor of i32, got 'tensor<?xi64>'}}
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x4x64xf32>, tensor<?x?x2x64xf32>, tensor<?x?x2x64xf32>)
         kv_lens(%l : tensor<?xi64>)
         outs(%o : tensor<?x?x4x64xf32>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = false, window = 0, padding = true>}
         -> tensor<?x?x4x64xf32>
  return %r : tensor<?x?x4x64xf32>
}

// -----

// Lengths are i32, one per batch (count).
func.func @f(%q: tensor<2x?x4x64xf32>, %k: tensor<2x?x2x64xf32>, %v: tensor<2x?x2x64xf32>, %o: tensor<2x?x4x64xf32>, %l: tensor<3xi32>) -> tensor<2x?x4x64xf32> {
  // expected-error @+1 {{kv_lens needs one length per batch}}
  %r = mha.attention ins(%q, %k, %v : tensor<2x?x4x64xf32>, tensor<2x?x2x64xf32>, tensor<2x?x2x64xf32>)
         kv_lens(%l : tensor<3xi32>)
         outs(%o : tensor<2x?x4x64xf32>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = false, window = 0, padding = true>}
         -> tensor<2x?x4x64xf32>
  return %r : tensor<2x?x4x64xf32>
}

// -----

// The mask attribute: a window counts keys, 0 meaning none.
func.func @f(%q: tensor<?x?x4x64xf32>, %k: tensor<?x?x2x64xf32>, %v: tensor<?x?x2x64xf32>, %o: tensor<?x?x4x64xf32>) -> tensor<?x?x4x64xf32> {
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x4x64xf32>, tensor<?x?x2x64xf32>, tensor<?x?x2x64xf32>)
         outs(%o : tensor<?x?x4x64xf32>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          // expected-error @+1 {{mask window must be >= 0 (0: no window), got -3}}
          mask = #mha.mask<causal = true, window = -3, padding = false>}
         -> tensor<?x?x4x64xf32>
  return %r : tensor<?x?x4x64xf32>
}

// -----
func.func @sinks_per_kv_head(%q: tensor<?x?x8x64xf32>, %k: tensor<?x?x2x64xf32>,
                             %v: tensor<?x?x2x64xf32>, %sinks: tensor<2xf32>,
                             %o: tensor<?x?x8x64xf32>) -> tensor<?x?x8x64xf32> {
  // expected-error @+1 {{sinks must be a tensor<8xf32> (one per query head), got 'tensor<2xf32>'}}
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x8x64xf32>,
                         tensor<?x?x2x64xf32>, tensor<?x?x2x64xf32>)
         sinks(%sinks : tensor<2xf32>)
         outs(%o : tensor<?x?x8x64xf32>)
         {num_heads = 8 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = false, window = 0, padding = false>}
         -> tensor<?x?x8x64xf32>
  return %r : tensor<?x?x8x64xf32>
}

// -----

func.func @negative_cap(%q: tensor<?x?x8x64xf32>, %k: tensor<?x?x2x64xf32>,
                        %v: tensor<?x?x2x64xf32>, %o: tensor<?x?x8x64xf32>)
    -> tensor<?x?x8x64xf32> {
  // expected-error @+1 {{softcap must be a finite number > 0}}
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x8x64xf32>,
                         tensor<?x?x2x64xf32>, tensor<?x?x2x64xf32>)
         outs(%o : tensor<?x?x8x64xf32>)
         {num_heads = 8 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = false, window = 0, padding = false>,
          softcap = -1.0 : f32}
         -> tensor<?x?x8x64xf32>
  return %r : tensor<?x?x8x64xf32>
}

// -----

func.func @lse_per_kv_head(%q: tensor<?x?x8x64xf32>, %k: tensor<?x?x2x64xf32>,
                           %v: tensor<?x?x2x64xf32>, %o: tensor<?x?x8x64xf32>,
                           %lse: tensor<?x?x2xf32>)
    -> (tensor<?x?x8x64xf32>, tensor<?x?x2xf32>) {
  // expected-error @+1 {{lse_init must be a tensor<BxTqx8xf32> (one per query row and head), got 'tensor<?x?x2xf32>'}}
  %r:2 = mha.attention ins(%q, %k, %v : tensor<?x?x8x64xf32>,
                           tensor<?x?x2x64xf32>, tensor<?x?x2x64xf32>)
           outs(%o : tensor<?x?x8x64xf32>) lse(%lse : tensor<?x?x2xf32>)
           {num_heads = 8 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
            mask = #mha.mask<causal = false, window = 0, padding = false>}
           -> tensor<?x?x8x64xf32>, tensor<?x?x2xf32>
  return %r#0, %r#1 : tensor<?x?x8x64xf32>, tensor<?x?x2xf32>
}

// -----

// A padding term in any alternative of the mask needs kv_lens.
func.func @f(%q: tensor<?x?x4x64xf32>, %k: tensor<?x?x2x64xf32>, %v: tensor<?x?x2x64xf32>, %o: tensor<?x?x4x64xf32>) -> tensor<?x?x4x64xf32> {
  // expected-error @+1 {{mask has padding but no kv_lens operand}}
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x4x64xf32>, tensor<?x?x2x64xf32>, tensor<?x?x2x64xf32>)
         outs(%o : tensor<?x?x4x64xf32>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = false>,
          mask_or = [#mha.mask<causal = false, window = 0, padding = true, sink = 4>]}
         -> tensor<?x?x4x64xf32>
  return %r : tensor<?x?x4x64xf32>
}

// -----

// The call's scale is one f32.
func.func @f(%q: tensor<?x?x4x64xf32>, %k: tensor<?x?x2x64xf32>, %v: tensor<?x?x2x64xf32>, %s: tensor<2xf32>, %o: tensor<?x?x4x64xf32>) -> tensor<?x?x4x64xf32> {
  // expected-error @+1 {{scale_factor must be a tensor<1xf32>, got 'tensor<2xf32>'}}
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x4x64xf32>, tensor<?x?x2x64xf32>, tensor<?x?x2x64xf32>)
         scale_factor(%s : tensor<2xf32>)
         outs(%o : tensor<?x?x4x64xf32>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 1.0 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = false>}
         -> tensor<?x?x4x64xf32>
  return %r : tensor<?x?x4x64xf32>
}

// -----

// A sink term keeps the first N > 0 keys.
func.func @f(%q: tensor<?x?x4x64xf32>, %k: tensor<?x?x2x64xf32>, %v: tensor<?x?x2x64xf32>, %o: tensor<?x?x4x64xf32>) -> tensor<?x?x4x64xf32> {
  // expected-error @+4 {{mask sink must be >= 0 (0: no sink term), got -2}}
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x4x64xf32>, tensor<?x?x2x64xf32>, tensor<?x?x2x64xf32>)
         outs(%o : tensor<?x?x4x64xf32>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = false, sink = -2>}
         -> tensor<?x?x4x64xf32>
  return %r : tensor<?x?x4x64xf32>
}

// -----

// A block table is [batch, blocks per sequence] of i32.
func.func @f(%q: tensor<?x?x4x64xf32>, %k: tensor<?x16x2x64xf32>, %v: tensor<?x16x2x64xf32>, %lens: tensor<?xi32>, %t: tensor<?x?xi64>, %o: tensor<?x?x4x64xf32>) -> tensor<?x?x4x64xf32> {
  // expected-error @+1 {{block_table must be a rank-2 tensor of i32 ([batch, blocks per sequence]), got 'tensor<?x?xi64>'}}
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x4x64xf32>, tensor<?x16x2x64xf32>, tensor<?x16x2x64xf32>)
         kv_lens(%lens : tensor<?xi32>)
         block_table(%t : tensor<?x?xi64>)
         outs(%o : tensor<?x?x4x64xf32>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = true>, per_sequence}
         -> tensor<?x?x4x64xf32>
  return %r : tensor<?x?x4x64xf32>
}

// -----

// A paged pool's block size is static.
func.func @f(%q: tensor<?x?x4x64xf32>, %k: tensor<?x?x2x64xf32>, %v: tensor<?x?x2x64xf32>, %lens: tensor<?xi32>, %t: tensor<?x?xi32>, %o: tensor<?x?x4x64xf32>) -> tensor<?x?x4x64xf32> {
  // expected-error @+1 {{a paged key/value pool needs a static block size > 0 (dimension 1)}}
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x4x64xf32>, tensor<?x?x2x64xf32>, tensor<?x?x2x64xf32>)
         kv_lens(%lens : tensor<?xi32>)
         block_table(%t : tensor<?x?xi32>)
         outs(%o : tensor<?x?x4x64xf32>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = true>, per_sequence}
         -> tensor<?x?x4x64xf32>
  return %r : tensor<?x?x4x64xf32>
}

// -----

// Key and value come from pools of one block count.
func.func @f(%q: tensor<?x?x4x64xf32>, %k: tensor<100x16x2x64xf32>, %v: tensor<90x16x2x64xf32>, %lens: tensor<?xi32>, %t: tensor<?x?xi32>, %o: tensor<?x?x4x64xf32>) -> tensor<?x?x4x64xf32> {
  // expected-error @+1 {{key and value block counts differ}}
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x4x64xf32>, tensor<100x16x2x64xf32>, tensor<90x16x2x64xf32>)
         kv_lens(%lens : tensor<?xi32>)
         block_table(%t : tensor<?x?xi32>)
         outs(%o : tensor<?x?x4x64xf32>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = true>, per_sequence}
         -> tensor<?x?x4x64xf32>
  return %r : tensor<?x?x4x64xf32>
}

// -----

// A paged sequence's queries are its last positions.
func.func @f(%q: tensor<?x?x4x64xf32>, %k: tensor<?x16x2x64xf32>, %v: tensor<?x16x2x64xf32>, %lens: tensor<?xi32>, %t: tensor<?x?xi32>, %o: tensor<?x?x4x64xf32>) -> tensor<?x?x4x64xf32> {
  // expected-error @+1 {{block_table needs per_sequence (a paged sequence's queries are its last positions)}}
  %r = mha.attention ins(%q, %k, %v : tensor<?x?x4x64xf32>, tensor<?x16x2x64xf32>, tensor<?x16x2x64xf32>)
         kv_lens(%lens : tensor<?xi32>)
         block_table(%t : tensor<?x?xi32>)
         outs(%o : tensor<?x?x4x64xf32>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = true>}
         -> tensor<?x?x4x64xf32>
  return %r : tensor<?x?x4x64xf32>
}

// -----

// One table row per batch.
func.func @f(%q: tensor<2x?x4x64xf32>, %k: tensor<?x16x2x64xf32>, %v: tensor<?x16x2x64xf32>, %lens: tensor<?xi32>, %t: tensor<3x?xi32>, %o: tensor<?x?x4x64xf32>) -> tensor<?x?x4x64xf32> {
  // expected-error @+1 {{block_table needs one row per batch}}
  %r = mha.attention ins(%q, %k, %v : tensor<2x?x4x64xf32>, tensor<?x16x2x64xf32>, tensor<?x16x2x64xf32>)
         kv_lens(%lens : tensor<?xi32>)
         block_table(%t : tensor<3x?xi32>)
         outs(%o : tensor<?x?x4x64xf32>)
         {num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.125 : f32,
          mask = #mha.mask<causal = true, window = 0, padding = true>, per_sequence}
         -> tensor<?x?x4x64xf32>
  return %r : tensor<?x?x4x64xf32>
}
