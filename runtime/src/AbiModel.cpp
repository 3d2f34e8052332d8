// The ABI's tensor table (abi_model.hpp). One row per tensor; the order of
// the rows is the order of the kernels' parameters.
#include "mhagen/abi_model.hpp"

namespace mhagen::abi {

namespace {

using Getter = const void *(*)(const mhagen_call_args &);
using Binder = void (*)(mhagen_call_args &, void *);
using Stride = int64_t (*)(const mhagen_call_args &);
using S = Size;

/// A row of the table, built by naming its fields:
///   TensorRow(MHAGEN_ABI_PTR(sinks), "learned sink logit per head")
///       .when(Presence::Sinks).elem(Elem::F32).dims({{{S::H}}}) ...
class TensorRow {
public:
  TensorRow(const char *name, Getter pointer, Binder bind, const char *doc) {
    m_.name = name;
    m_.pointer = pointer;
    m_.bind = bind;
    m_.doc = doc;
  }
  TensorRow &when(Presence p) { return set(m_.presence, p); }
  TensorRow &output() {
    m_.output = true;
    return set(m_.role, Role::Result);
  }
  TensorRow &elem(Elem e) { return set(m_.elem, e); }
  TensorRow &content(Content c) { return set(m_.content, c); }
  TensorRow &role(Role r) { return set(m_.role, r); }
  TensorRow &dims(std::vector<Dim> d) { return set(m_.dims, std::move(d)); }
  /// [B, tokens, row...]: an activation of a batch of sequences.
  TensorRow &sequence(Size tokens, std::vector<Dim> row) {
    m_.dims = {{{S::Batch}}, {{tokens}}};
    m_.dims.insert(m_.dims.end(), row.begin(), row.end());
    return *this;
  }
  /// [PackedQ, row...]: a ragged batch's packed rows (sequence b's start
  /// at q_offsets[b]): a token stride, no batch stride.
  TensorRow &packed(std::vector<Dim> row) {
    m_.dims = {{{S::PackedQ}}};
    m_.dims.insert(m_.dims.end(), row.begin(), row.end());
    return *this;
  }
  TensorRow &tokenStride(const char *field, Stride f) {
    m_.tokenStrideField = field;
    return set(m_.tokenStride, f);
  }
  TensorRow &batchStride(const char *field, Stride f) {
    m_.batchStrideField = field;
    return set(m_.batchStride, f);
  }
  /// The call's error when a pointer is given to a kernel without it.
  TensorRow &ifGivenButAbsent(const char *why) {
    return set(m_.givenButAbsent, why);
  }
  /// Appended to "<name> is NULL" when a kernel needs it.
  TensorRow &ifMissing(const char *hint) { return set(m_.missingHint, hint); }
  /// Rows of a K/V cache, which a cached layer appends to.
  TensorRow &cacheRows() { return set(m_.cacheRows, true); }
  operator TensorModel() const { return m_; }

private:
  template <class T, class V> TensorRow &set(T &field, V value) {
    field = std::move(value);
    return *this;
  }
  TensorModel m_;
};

// The name and accessors of one mhagen_call_args member.
#define MHAGEN_ABI_PTR(field)                                                  \
#field, [](const mhagen_call_args &a) -> const void * { return a.field; },   \
      [](mhagen_call_args &a, void *p) {                                       \
        a.field = static_cast<decltype(a.field)>(p);                           \
      }
// A stride member: its name and its accessor.
#define MHAGEN_ABI_STRIDE(field)                                               \
#field, [](const mhagen_call_args &a) -> int64_t { return a.field; }

const char *const kBiasAbsent =
    "bias pointers given but this kernel's spec has bias = false";
const char *const kQkNormAbsent =
    "q_norm or k_norm given but this kernel's spec has qk_norm = none";
const char *const kLseAbsent =
    "lse given but this kernel's spec has no lse (lse = true)";

std::vector<TensorModel> buildTable() {
  return {
      // op = sdpa: the attention core on projected heads.
      TensorRow(MHAGEN_ABI_PTR(q), "queries")
          .when(Presence::UniformQ)
          .role(Role::Queries)
          .sequence(S::TokensQ, {{{S::H}}, {{S::Dk}}})
          .tokenStride(MHAGEN_ABI_STRIDE(q_token_stride))
          .batchStride(MHAGEN_ABI_STRIDE(q_batch_stride)),
      // ragged = true: every sequence's queries, packed one after another.
      TensorRow(MHAGEN_ABI_PTR(q), "packed queries")
          .when(Presence::Ragged)
          .role(Role::Queries)
          .packed({{{S::H}}, {{S::Dk}}})
          .tokenStride(MHAGEN_ABI_STRIDE(q_token_stride)),
      // K and V are stored as the spec's kv_dtype (a KV cache). A layer
      // with kv_cache = contiguous writes its new tokens' rows into them.
      TensorRow(MHAGEN_ABI_PTR(k), "keys")
          .when(Presence::ContiguousKv)
          .elem(Elem::KvData)
          .sequence(S::TokensKv, {{{S::KvHeads}}, {{S::Dk}}})
          .tokenStride(MHAGEN_ABI_STRIDE(k_token_stride))
          .batchStride(MHAGEN_ABI_STRIDE(k_batch_stride))
          .cacheRows(),
      TensorRow(MHAGEN_ABI_PTR(v), "values")
          .when(Presence::ContiguousKv)
          .elem(Elem::KvData)
          .sequence(S::TokensKv, {{{S::KvHeads}}, {{S::Dv}}})
          .tokenStride(MHAGEN_ABI_STRIDE(v_token_stride))
          .batchStride(MHAGEN_ABI_STRIDE(v_batch_stride))
          .cacheRows(),
      // kv_dtype = i8: K[b, t, g, :] = k_scale[b, t, g] * int8 row.
      TensorRow(MHAGEN_ABI_PTR(k_scale), "int8 key row scales")
          .when(Presence::KvScales)
          .elem(Elem::F32)
          .role(Role::RowScale)
          .sequence(S::TokensKv, {{{S::KvHeads}}})
          .tokenStride(MHAGEN_ABI_STRIDE(k_scale_token_stride))
          .batchStride(MHAGEN_ABI_STRIDE(k_scale_batch_stride))
          .cacheRows()
          .ifGivenButAbsent("k_scale given but this kernel's kv_dtype is not "
                            "i8")
          .ifMissing(" but kv_dtype = i8: pass one f32 scale per (batch, "
                     "token, kv head) of the int8 cache"),
      TensorRow(MHAGEN_ABI_PTR(v_scale), "int8 value row scales")
          .when(Presence::KvScales)
          .elem(Elem::F32)
          .role(Role::RowScale)
          .sequence(S::TokensKv, {{{S::KvHeads}}})
          .tokenStride(MHAGEN_ABI_STRIDE(v_scale_token_stride))
          .batchStride(MHAGEN_ABI_STRIDE(v_scale_batch_stride))
          .cacheRows()
          .ifGivenButAbsent("v_scale given but this kernel's kv_dtype is not "
                            "i8")
          .ifMissing(" but kv_dtype = i8: pass one f32 scale per (batch, "
                     "token, kv head) of the int8 cache"),
      // kv_cache = paged(BLOCK): the cache as blocks of BLOCK tokens,
      // dense, that the block table names (docs/design.md §5, "Paged
      // K/V"); the int8 scales in the same blocks.
      TensorRow(MHAGEN_ABI_PTR(k), "keys in blocks")
          .when(Presence::PagedKv)
          .elem(Elem::KvData)
          .dims({{{S::Blocks}}, {{S::Block}}, {{S::KvHeads}}, {{S::Dk}}}),
      TensorRow(MHAGEN_ABI_PTR(v), "values in blocks")
          .when(Presence::PagedKv)
          .elem(Elem::KvData)
          .dims({{{S::Blocks}}, {{S::Block}}, {{S::KvHeads}}, {{S::Dv}}}),
      TensorRow(MHAGEN_ABI_PTR(k_scale), "int8 key scales")
          .when(Presence::PagedKvScales)
          .elem(Elem::F32)
          .role(Role::RowScale)
          .dims({{{S::Blocks}}, {{S::Block}}, {{S::KvHeads}}})
          .ifGivenButAbsent("k_scale given but this kernel's kv_dtype is not "
                            "i8")
          .ifMissing(" but kv_dtype = i8: pass one f32 scale per (block, "
                     "slot, kv head) of the int8 cache"),
      TensorRow(MHAGEN_ABI_PTR(v_scale), "int8 value scales")
          .when(Presence::PagedKvScales)
          .elem(Elem::F32)
          .role(Role::RowScale)
          .dims({{{S::Blocks}}, {{S::Block}}, {{S::KvHeads}}})
          .ifGivenButAbsent("v_scale given but this kernel's kv_dtype is not "
                            "i8")
          .ifMissing(" but kv_dtype = i8: pass one f32 scale per (block, "
                     "slot, kv head) of the int8 cache"),
      // op = layer: the projections around the core. W [in, out]
      // row-major.
      TensorRow(MHAGEN_ABI_PTR(x), "input tokens")
          .when(Presence::Layer)
          .sequence(S::TokensQ, {{{S::D}}}),
      TensorRow(MHAGEN_ABI_PTR(w_q), "query projection")
          .when(Presence::Layer)
          .role(Role::QueryWeight)
          .dims({{{S::D}}, {{S::H, S::Dk}}}),
      TensorRow(MHAGEN_ABI_PTR(w_k), "key projection")
          .when(Presence::Layer)
          .role(Role::Weight)
          .dims({{{S::D}}, {{S::KvHeads, S::Dk}}}),
      TensorRow(MHAGEN_ABI_PTR(w_v), "value projection")
          .when(Presence::Layer)
          .role(Role::Weight)
          .dims({{{S::D}}, {{S::KvHeads, S::Dv}}}),
      TensorRow(MHAGEN_ABI_PTR(w_o), "output projection")
          .when(Presence::Layer)
          .role(Role::Weight)
          .dims({{{S::H, S::Dv}}, {{S::D}}}),
      TensorRow(MHAGEN_ABI_PTR(b_q), "query bias")
          .when(Presence::LayerBias)
          .role(Role::Bias)
          .dims({{{S::H, S::Dk}}})
          .ifGivenButAbsent(kBiasAbsent),
      TensorRow(MHAGEN_ABI_PTR(b_k), "key bias")
          .when(Presence::LayerBias)
          .role(Role::Bias)
          .dims({{{S::KvHeads, S::Dk}}})
          .ifGivenButAbsent(kBiasAbsent),
      TensorRow(MHAGEN_ABI_PTR(b_v), "value bias")
          .when(Presence::LayerBias)
          .role(Role::Bias)
          .dims({{{S::KvHeads, S::Dv}}})
          .ifGivenButAbsent(kBiasAbsent),
      TensorRow(MHAGEN_ABI_PTR(b_o), "output bias")
          .when(Presence::LayerBias)
          .role(Role::Bias)
          .dims({{{S::D}}})
          .ifGivenButAbsent(kBiasAbsent),
      // qk_norm: the RMSNorm gains of the projected q and k.
      TensorRow(MHAGEN_ABI_PTR(q_norm), "query norm weight")
          .when(Presence::QkNormHead)
          .role(Role::NormWeight)
          .dims({{{S::Dk}}})
          .ifGivenButAbsent(kQkNormAbsent)
          .ifMissing(" but qk_norm = head: pass dk query norm weights"),
      TensorRow(MHAGEN_ABI_PTR(k_norm), "key norm weight")
          .when(Presence::QkNormHead)
          .role(Role::NormWeight)
          .dims({{{S::Dk}}})
          .ifGivenButAbsent(kQkNormAbsent)
          .ifMissing(" but qk_norm = head: pass dk key norm weights"),
      TensorRow(MHAGEN_ABI_PTR(q_norm), "query norm weight")
          .when(Presence::QkNormProjection)
          .role(Role::NormWeight)
          .dims({{{S::H, S::Dk}}})
          .ifGivenButAbsent(kQkNormAbsent)
          .ifMissing(" but qk_norm = projection: pass h*dk query norm "
                     "weights"),
      TensorRow(MHAGEN_ABI_PTR(k_norm), "key norm weight")
          .when(Presence::QkNormProjection)
          .role(Role::NormWeight)
          .dims({{{S::KvHeads, S::Dk}}})
          .ifGivenButAbsent(kQkNormAbsent)
          .ifMissing(" but qk_norm = projection: pass kv*dk key norm "
                     "weights"),
      // Mask `padding`: batch b sees keys [0, kv_lens[b]); a paged cache
      // or a ragged batch: sequence b's length.
      TensorRow(MHAGEN_ABI_PTR(kv_lens), "keys per batch")
          .when(Presence::Padding)
          .elem(Elem::Int32)
          .content(Content::KeyLengthPerBatch)
          .role(Role::Index)
          .dims({{{S::Batch}}})
          .ifGivenButAbsent("kv_lens given but this kernel's mask has no "
                            "padding, its cache is not paged and its batch "
                            "not ragged")
          .ifMissing(" but the mask has padding, the cache is paged or the "
                     "batch is ragged: pass one key length per batch"),
      // positions = runtime: where each token sits for the rotation.
      TensorRow(MHAGEN_ABI_PTR(positions), "position of each token")
          .when(Presence::Positions)
          .elem(Elem::Int32)
          .content(Content::TokenPositions)
          .role(Role::Index)
          .sequence(S::TokensQ, {})
          .ifGivenButAbsent("positions given but this kernel's spec has no "
                            "positions = runtime (its token t sits at "
                            "position t)")
          .ifMissing(" but positions = runtime: pass [B, t_q] int32 "
                     "positions"),
      // A paged cache's block table: token t of sequence b is slot
      // t % BLOCK of block block_table[b, t / BLOCK].
      TensorRow(MHAGEN_ABI_PTR(block_table), "block indices")
          .when(Presence::PagedKv)
          .elem(Elem::Int32)
          .content(Content::BlockIndices)
          .role(Role::Index)
          .dims({{{S::Batch}}, {{S::TableBlocks}}})
          .ifGivenButAbsent("block_table given but this kernel's K/V cache "
                            "is contiguous (only kv_cache = paged(BLOCK) "
                            "takes one)")
          .ifMissing(" but kv_cache = paged: pass ceil(t_kv / BLOCK) block "
                     "indices per sequence"),
      // A ragged batch: sequence b's queries are packed rows
      // [q_offsets[b], q_offsets[b + 1]), its last tokens (kv_lens[b]
      // gives its length).
      TensorRow(MHAGEN_ABI_PTR(q_offsets), "cumulative query offsets")
          .when(Presence::Ragged)
          .elem(Elem::Int32)
          .content(Content::QueryOffsets)
          .role(Role::Index)
          .dims({{{S::Offsets}}})
          .ifGivenButAbsent("q_offsets given but this kernel's batch is not "
                            "ragged (only ragged = true packs its queries)")
          .ifMissing(" but ragged = true: pass B + 1 cumulative query "
                     "offsets (q_offsets[0] = 0)"),
      // Score modifiers given at call time: one f32 per query head.
      TensorRow(MHAGEN_ABI_PTR(sinks), "learned sink logit per head")
          .when(Presence::Sinks)
          .elem(Elem::F32)
          .content(Content::Finite) // a NaN logit would poison every row
          .role(Role::SinkLogit)
          .dims({{{S::H}}})
          .ifGivenButAbsent("sinks given but this kernel's spec has no sinks "
                            "(sinks = learned)")
          .ifMissing(" but sinks = learned: pass one f32 logit per query "
                     "head"),
      TensorRow(MHAGEN_ABI_PTR(alibi_slopes), "ALiBi slope per head")
          .when(Presence::AlibiSlopes)
          .elem(Elem::F32)
          .content(Content::Finite) // the backends differ on NaN bias
          .role(Role::Slope)
          .dims({{{S::H}}})
          .ifGivenButAbsent("alibi_slopes given but this kernel's spec has "
                            "no alibi = runtime")
          .ifMissing(" but alibi = runtime: pass one f32 slope per query "
                     "head"),
      TensorRow(MHAGEN_ABI_PTR(scale), "score scale, finite and > 0")
          .when(Presence::Scale)
          .elem(Elem::F32)
          .content(Content::PositiveFinite)
          .role(Role::Scale)
          .dims({{{S::One}}})
          .ifGivenButAbsent("scale given but this kernel's scale is compiled "
                            "in (its spec has no scale = runtime)")
          .ifMissing(" but scale = runtime: pass a pointer to the call's "
                     "score scale (one float)"),
      // The output of each op.
      TensorRow(MHAGEN_ABI_PTR(out), "attention output")
          .when(Presence::UniformQ)
          .output()
          .sequence(S::TokensQ, {{{S::H}}, {{S::Dv}}})
          .tokenStride(MHAGEN_ABI_STRIDE(out_token_stride))
          .batchStride(MHAGEN_ABI_STRIDE(out_batch_stride)),
      TensorRow(MHAGEN_ABI_PTR(out), "packed output")
          .when(Presence::Ragged)
          .output()
          .packed({{{S::H}}, {{S::Dv}}})
          .tokenStride(MHAGEN_ABI_STRIDE(out_token_stride)),
      TensorRow(MHAGEN_ABI_PTR(out), "layer output")
          .when(Presence::Layer)
          .output()
          .sequence(S::TokensQ, {{{S::D}}})
          .tokenStride(MHAGEN_ABI_STRIDE(out_token_stride))
          .batchStride(MHAGEN_ABI_STRIDE(out_batch_stride)),
      // lse = true: each row's log-sum-exp, a second output (always f32).
      TensorRow(MHAGEN_ABI_PTR(lse), "log-sum-exp of each row")
          .when(Presence::Lse)
          .output()
          .elem(Elem::F32)
          .sequence(S::TokensQ, {{{S::H}}})
          .ifGivenButAbsent(kLseAbsent)
          .ifMissing(" but lse = true: pass [B, t_q, h] floats"),
      TensorRow(MHAGEN_ABI_PTR(lse), "packed log-sum-exp per row")
          .when(Presence::RaggedLse)
          .output()
          .elem(Elem::F32)
          .packed({{{S::H}}})
          .ifGivenButAbsent(kLseAbsent)
          .ifMissing(" but lse = true: pass [q_offsets[B], h] floats"),
  };
}

#undef MHAGEN_ABI_PTR
#undef MHAGEN_ABI_STRIDE

} // namespace

bool TensorModel::isSequence() const {
  return dims.size() >= 2 && dims[0].factors.size() == 1 &&
         dims[0].factors[0] == Size::Batch && dims[1].factors.size() == 1 &&
         (dims[1].factors[0] == Size::TokensQ ||
          dims[1].factors[0] == Size::TokensKv);
}

Size TensorModel::tokens() const { return dims[1].factors[0]; }

bool TensorModel::isPacked() const {
  return !dims.empty() && dims[0].factors.size() == 1 &&
         dims[0].factors[0] == Size::PackedQ;
}

AbiShape perSequence(AbiShape s) {
  if (s.ragged) {
    s.ragged = false;
    s.padding = true; // each sequence's length: kv_lens + b
  }
  return s;
}

const std::vector<TensorModel> &allTensors() {
  static const std::vector<TensorModel> table = buildTable();
  return table;
}

bool isPresent(const TensorModel &t, const AbiShape &s) {
  switch (t.presence) {
  case Presence::Sdpa:
    return !s.layer;
  case Presence::UniformQ:
    return !s.layer && !s.ragged;
  case Presence::Ragged:
    return !s.layer && s.ragged;
  case Presence::RaggedLse:
    return !s.layer && s.ragged && s.lse;
  case Presence::ContiguousKv:
    return s.layer ? s.layerCache : s.kvBlock == 0;
  case Presence::PagedKv:
    return !s.layer && s.kvBlock > 0;
  case Presence::PagedKvScales:
    return !s.layer && s.kvBlock > 0 && s.kv == Scalar::I8;
  case Presence::Layer:
    return s.layer;
  case Presence::LayerBias:
    return s.layer && s.bias;
  case Presence::Padding:
    return s.padding || s.layerCache ||
           (!s.layer && (s.kvBlock > 0 || s.ragged));
  case Presence::KvScales:
    return (s.layer ? s.layerCache : s.kvBlock == 0) && s.kv == Scalar::I8;
  case Presence::Sinks:
    return s.sinks;
  case Presence::AlibiSlopes:
    return s.alibiSlopes;
  case Presence::Lse:
    return s.lse && !(!s.layer && s.ragged);
  case Presence::Scale:
    return s.scale;
  case Presence::QkNormHead:
    return s.layer && s.qkNorm == AbiShape::Norm::Head;
  case Presence::QkNormProjection:
    return s.layer && s.qkNorm == AbiShape::Norm::Projection;
  case Presence::Positions:
    return s.layer && s.positions;
  }
  return false;
}

Scalar scalarOf(const TensorModel &t, const AbiShape &s) {
  switch (t.elem) {
  case Elem::Data:
    return s.data;
  case Elem::KvData:
    return s.kv;
  case Elem::F32:
    return Scalar::F32;
  case Elem::Int32:
    return Scalar::I32;
  }
  return Scalar::F32;
}

int scalarBytes(Scalar x) {
  switch (x) {
  case Scalar::BF16:
  case Scalar::F16:
    return 2;
  case Scalar::I8:
    return 1;
  default:
    return 4;
  }
}

const char *scalarName(Scalar x) {
  static const char *names[] = {"f32", "bf16", "f16", "i8", "i32"};
  return names[static_cast<int>(x)];
}

bool scalarFromName(const std::string &name, Scalar &out) {
  for (Scalar x :
       {Scalar::F32, Scalar::BF16, Scalar::F16, Scalar::I8, Scalar::I32})
    if (name == scalarName(x)) {
      out = x;
      return true;
    }
  return false;
}

uint16_t quietNaNBits(Scalar x) { return x == Scalar::BF16 ? 0x7fc0 : 0x7e00; }

const char *scalarCType(Scalar x) {
  static const char *types[] = {"float", "uint16_t", "uint16_t", "int8_t",
                                "int32_t"};
  return types[static_cast<int>(x)];
}

std::vector<const TensorModel *> tensors(const AbiShape &s) {
  std::vector<const TensorModel *> out;
  for (const TensorModel &t : allTensors())
    if (isPresent(t, s))
      out.push_back(&t);
  return out;
}

bool isCallSize(Size sym) {
  return sym == Size::Batch || sym == Size::TokensQ || sym == Size::TokensKv ||
         sym == Size::Blocks || sym == Size::TableBlocks ||
         sym == Size::PackedQ || sym == Size::Offsets;
}

int64_t staticSize(Size sym, const AbiShape &s) {
  switch (sym) {
  case Size::D:
    return s.d;
  case Size::H:
    return s.h;
  case Size::KvHeads:
    return s.n_kv;
  case Size::Dk:
    return s.d_k;
  case Size::Dv:
    return s.d_v;
  case Size::One:
    return 1;
  case Size::Block:
    return s.kvBlock;
  default:
    return 0;
  }
}

int64_t sizeAt(Size sym, const AbiShape &s, const CallSizes &c) {
  switch (sym) {
  case Size::Batch:
    return c.batch;
  case Size::TokensQ:
    return c.tq;
  case Size::TokensKv:
    return c.tkv;
  case Size::Blocks:
    return c.numBlocks;
  case Size::TableBlocks:
    return s.kvBlock > 0 ? (c.tkv + s.kvBlock - 1) / s.kvBlock : 0;
  case Size::PackedQ:
    return c.packedQ;
  case Size::Offsets:
    return c.batch + 1;
  default:
    return staticSize(sym, s);
  }
}

int64_t elementsAt(const TensorModel &t, const AbiShape &s, const CallSizes &c,
                   size_t fromDim) {
  int64_t v = 1;
  for (size_t i = fromDim; i < t.dims.size(); ++i)
    for (Size f : t.dims[i].factors) {
      const int64_t x = sizeAt(f, s, c);
      if (x < 0 || __builtin_mul_overflow(v, x, &v))
        return -1;
    }
  return v;
}

int64_t staticExtent(const Dim &d, const AbiShape &s) {
  int64_t v = 1;
  for (Size f : d.factors) {
    if (isCallSize(f))
      return 0;
    const int64_t x = staticSize(f, s);
    if (x < 0 || __builtin_mul_overflow(v, x, &v))
      return -1;
  }
  return v;
}

int64_t denseInnerElements(const TensorModel &t, const AbiShape &s,
                           size_t fromDim) {
  int64_t v = 1;
  for (size_t i = fromDim; i < t.dims.size(); ++i) {
    const int64_t e = staticExtent(t.dims[i], s);
    if (e < 0 || __builtin_mul_overflow(v, e, &v))
      return -1;
  }
  return v;
}

const char *label(Size sym) {
  switch (sym) {
  case Size::Batch:
    return "B";
  case Size::TokensQ:
    return "Tq";
  case Size::TokensKv:
    return "Tkv";
  case Size::D:
    return "d";
  case Size::H:
    return "h";
  case Size::KvHeads:
    return "kv";
  case Size::Dk:
    return "dk";
  case Size::Dv:
    return "dv";
  case Size::One:
    return "1";
  case Size::Blocks:
    return "NB";
  case Size::Block:
    return "BLOCK";
  case Size::TableBlocks:
    return "ceil(Tkv/BLOCK)";
  case Size::PackedQ:
    return "Nq";
  case Size::Offsets:
    return "B+1";
  }
  return "?";
}

std::string dimsText(const TensorModel &t) {
  std::string out = "[";
  for (size_t i = 0; i < t.dims.size(); ++i) {
    if (i)
      out += ", ";
    for (size_t j = 0; j < t.dims[i].factors.size(); ++j)
      out += std::string(j ? "*" : "") + label(t.dims[i].factors[j]);
  }
  return out + "]";
}

std::string docTable() {
  static const char *when[] = {"sdpa",
                               "uniform",
                               "layer",
                               "layer, bias",
                               "padding/paged/ragged/layer cache",
                               "kv_dtype i8",
                               "sinks learned",
                               "alibi runtime",
                               "lse",
                               "scale runtime",
                               "sdpa or layer cache, contiguous",
                               "paged",
                               "paged, kv_dtype i8",
                               "ragged",
                               "ragged, lse",
                               "layer, qk_norm head",
                               "layer, qk_norm projection",
                               "layer, positions runtime"};
  std::string out;
  for (const TensorModel &t : allTensors()) {
    std::string line = std::string(" *   ") + t.name;
    line.resize(std::max<size_t>(line.size() + 1, 14), ' ');
    line += dimsText(t);
    line.resize(std::max<size_t>(line.size() + 1, 32), ' ');
    line += std::string(t.elem == Elem::Int32 ? "int32 " : "") + t.doc + " (" +
            when[static_cast<int>(t.presence)] + (t.output ? ", output" : "") +
            (t.tokenStrideField ? ", strided" : "") + ")";
    out += line + "\n";
  }
  return out;
}

} // namespace mhagen::abi
