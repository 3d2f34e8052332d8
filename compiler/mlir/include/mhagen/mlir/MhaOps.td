//===- MhaOps.td - mha dialect operations ---------------------------------===//
#ifndef MHA_OPS
#define MHA_OPS

include "mhagen/mlir/MhaDialect.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Mha_AttentionOp : Mha_Op<"attention", [Pure, AttrSizedOperandSegments]> {
  let summary = "Scaled dot-product attention with GQA and masks";
  let description = [{
    `result = softmax(mask(Q K^T * scale)) V` per query head, with query
    head i reading key/value head i / (num_heads / num_kv_heads).
    Layouts (the mhagen ABI): query [B, Tq, h, dk], key [B, Tkv, kv, dk],
    value [B, Tkv, kv, dv], init and result [B, Tq, h, dv]. A row with no
    visible key is zero. `kv_lens` (tensor of i32, one per batch) is
    present exactly when some mask has padding. With `mask_or` the keys
    visible are those of `mask` or of any of `mask_or` (a union of
    conjunctions; key tiles hidden by all of them are skipped).

    With `scale_factor` (tensor<1xf32>, the call's scale = runtime) the
    scores are s = scale * scale_factor[0] * q.k.

    Score modifiers (docs/design.md §2), applied to s = scale * q.k before
    the mask: `softcap` C (s = C tanh(s / C)), then ALiBi when `slopes`
    (tensor<h x f32>) is given (s += slopes[head] * (j - pos(i))). `sinks`
    (tensor<h x f32>): a logit per head that joins every row's softmax
    denominator as a key of value 0.

    K and V may be stored narrower than Q (a K/V cache's `kv_dtype`, docs/
    design.md §5): f32, bf16, f16, or i8 with `kv_scales(%k_scales,
    %v_scales : tensor<?x?xkvxf32>, ...)`, one f32 scale per (batch,
    token, K/V head): K[b, t, g, :] = k_scales[b, t, g] * the int8 row.
    Every tile is widened to f32 once, as for bf16/f16.

    With `block_table` (a paged cache, `kv_cache = paged(BLOCK)`, docs/
    design.md §5 "Paged K/V") key and value are a pool of blocks
    [num_blocks, BLOCK, kv, dk] (BLOCK static; int8 scales [num_blocks,
    BLOCK, kv]) and token t of batch b is slot t % BLOCK of block
    block_table[b, t / BLOCK] (tensor<B x W x i32>); T_kv = W * BLOCK.
    It needs `per_sequence` and `kv_lens`. Key tiles divide BLOCK (the
    lowering takes pagedKeyTile(key tile, BLOCK), MhaPasses.h), so a tile
    is one slice of one block; table and block indices are clamped and
    rows past kv_lens[b] are read as zeros (slots never written may hold
    NaN).

    With `per_sequence` (a ragged batch, docs/design.md §5) each batch's
    queries are its last positions: query i of batch b sits at i +
    kv_lens[b] - Tq (bottom-right per sequence) instead of i + Tkv - Tq;
    it needs `kv_lens` and a padding term in every mask clause.

    With `lse(%lse_init : tensor<?x?xhxf32>)` the op has a second result,
    each row's log-sum-exp [B, Tq, h]: m + log(l) of its online softmax
    (its sink included), -inf for a row that sees no key.

    ```mlir
    %o = mha.attention ins(%q, %k, %v : tensor<?x?x32x128xf32>,
                           tensor<?x?x8x128xf32>, tensor<?x?x8x128xf32>)
           outs(%init : tensor<?x?x32x128xf32>)
           {num_heads = 32 : i64, num_kv_heads = 8 : i64,
            scale = 0.0883883461 : f32,
            mask = #mha.mask<causal = true, window = 0, padding = false>}
           -> tensor<?x?x32x128xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$query, AnyRankedTensor:$key,
                       AnyRankedTensor:$value,
                       Optional<AnyRankedTensor>:$kv_lens,
                       Optional<AnyRankedTensor>:$sinks,
                       Optional<AnyRankedTensor>:$slopes,
                       Optional<AnyRankedTensor>:$scale_factor,
                       Optional<AnyRankedTensor>:$k_scales,
                       Optional<AnyRankedTensor>:$v_scales,
                       Optional<AnyRankedTensor>:$block_table,
                       AnyRankedTensor:$init,
                       Optional<AnyRankedTensor>:$lse_init,
                       I64Attr:$num_heads, I64Attr:$num_kv_heads,
                       F32Attr:$scale, Mha_MaskAttr:$mask,
                       OptionalAttr<TypedArrayAttrBase<Mha_MaskAttr,
                           "alternative masks">>:$mask_or,
                       OptionalAttr<F32Attr>:$softcap,
                       UnitAttr:$per_sequence);
  let results = (outs AnyRankedTensor:$result,
                     Optional<AnyRankedTensor>:$lse);
  let assemblyFormat = [{
    `ins` `(` $query `,` $key `,` $value `:` type($query) `,` type($key) `,`
    type($value) `)` (`kv_lens` `(` $kv_lens^ `:` type($kv_lens) `)`)?
    (`sinks` `(` $sinks^ `:` type($sinks) `)`)?
    (`slopes` `(` $slopes^ `:` type($slopes) `)`)?
    (`scale_factor` `(` $scale_factor^ `:` type($scale_factor) `)`)?
    (`kv_scales` `(` $k_scales^ `,` $v_scales `:` type($k_scales) `,`
     type($v_scales) `)`)?
    (`block_table` `(` $block_table^ `:` type($block_table) `)`)?
    `outs` `(` $init `:` type($init) `)`
    (`lse` `(` $lse_init^ `:` type($lse_init) `)`)?
    attr-dict `->` type($result) (`,` type($lse)^)?
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// `mask` followed by the `mask_or` alternatives.
    ::llvm::SmallVector<::mhagen::mha::MaskAttr> maskClauses();
    /// A paged pool's tokens per block (key dimension 1, static by the
    /// verifier); 0 for a contiguous cache.
    int64_t kvBlockSize();
  }];
}

#endif
