// The ABI's tensor table (abi_model.hpp). One row per tensor; the order of
// the rows is the order of the kernels' parameters.
#include "mhagen/abi_model.hpp"

namespace mhagen::abi {

namespace {

// The accessors of one mhagen_call_args member.
#define MHAGEN_ABI_PTR(field)                                                  \
#field, [](const mhagen_call_args &a) -> const void * { return a.field; },   \
      [](mhagen_call_args &a, void *p) {                                       \
        a.field = static_cast<decltype(a.field)>(p);                           \
      }

using Getter = const void *(*)(const mhagen_call_args &);
using Binder = void (*)(mhagen_call_args &, void *);
#define MHAGEN_ABI_STRIDE(field)                                               \
  [](const mhagen_call_args &a) -> int64_t { return a.field; }

using S = Size;

// A [B, T, heads, width] activation with call-time strides.
TensorModel sequence(const char *name, Getter ptr, Binder bind, const char *doc,
                     Presence when, bool output, Size tokens,
                     std::vector<Dim> row, const char *tsField,
                     int64_t (*ts)(const mhagen_call_args &),
                     const char *bsField,
                     int64_t (*bs)(const mhagen_call_args &)) {
  std::vector<Dim> dims = {{{S::Batch}}, {{tokens}}};
  dims.insert(dims.end(), row.begin(), row.end());
  return {name, doc,     when,    output,  Elem::Data, Content::Values,
          dims, tsField, bsField, nullptr, "",         ptr,
          bind, ts,      bs};
}

// A ragged batch's packed rows [Nq, heads, width] (sequence b's rows
// start at q_offsets[b]): a token stride, no batch stride.
TensorModel packed(const char *name, Getter ptr, Binder bind, const char *doc,
                   Presence when, bool output, std::vector<Dim> row,
                   const char *tsField,
                   int64_t (*ts)(const mhagen_call_args &)) {
  std::vector<Dim> dims = {{{S::PackedQ}}};
  dims.insert(dims.end(), row.begin(), row.end());
  return {name, doc,     when,    output,  Elem::Data, Content::Values,
          dims, tsField, nullptr, nullptr, "",         ptr,
          bind, ts,      nullptr};
}

// A dense tensor fixed by the spec (weights, biases).
TensorModel fixed(const char *name, Getter ptr, Binder bind, const char *doc,
                  Presence when, std::vector<Dim> dims) {
  return {name,
          doc,
          when,
          false,
          Elem::Data,
          Content::Values,
          dims,
          nullptr,
          nullptr,
          when == Presence::LayerBias
              ? "bias pointers given but this kernel's spec has bias = false"
              : nullptr,
          "",
          ptr,
          bind,
          nullptr,
          nullptr};
}

// One int32 per batch.
TensorModel perBatch(const char *name, Getter ptr, Binder bind, const char *doc,
                     Presence when, Content content, const char *givenButAbsent,
                     const char *missingHint) {
  return {
      name,           doc,     when,    false,          Elem::Int32, content,
      {{{S::Batch}}}, nullptr, nullptr, givenButAbsent, missingHint, ptr,
      bind,           nullptr, nullptr};
}

std::vector<TensorModel> buildTable() {
  std::vector<TensorModel> t;
  // op = sdpa: the attention core on projected heads.
  t.push_back(sequence(MHAGEN_ABI_PTR(q), "queries", Presence::UniformQ, false,
                       S::TokensQ, {{{S::H}}, {{S::Dk}}}, "q_token_stride",
                       MHAGEN_ABI_STRIDE(q_token_stride), "q_batch_stride",
                       MHAGEN_ABI_STRIDE(q_batch_stride)));
  // ragged = true: every sequence's queries, packed one after another.
  t.push_back(packed(MHAGEN_ABI_PTR(q), "packed queries", Presence::Ragged,
                     false, {{{S::H}}, {{S::Dk}}}, "q_token_stride",
                     MHAGEN_ABI_STRIDE(q_token_stride)));
  // K and V are stored as the spec's kv_dtype (a KV cache).
  t.push_back(sequence(MHAGEN_ABI_PTR(k), "keys", Presence::Sdpa, false,
                       S::TokensKv, {{{S::KvHeads}}, {{S::Dk}}},
                       "k_token_stride", MHAGEN_ABI_STRIDE(k_token_stride),
                       "k_batch_stride", MHAGEN_ABI_STRIDE(k_batch_stride)));
  t.back().elem = Elem::KvData;
  t.back().presence = Presence::ContiguousKv;
  t.push_back(sequence(MHAGEN_ABI_PTR(v), "values", Presence::Sdpa, false,
                       S::TokensKv, {{{S::KvHeads}}, {{S::Dv}}},
                       "v_token_stride", MHAGEN_ABI_STRIDE(v_token_stride),
                       "v_batch_stride", MHAGEN_ABI_STRIDE(v_batch_stride)));
  t.back().elem = Elem::KvData;
  t.back().presence = Presence::ContiguousKv;
  // kv_dtype = i8: K[b, t, g, :] = k_scale[b, t, g] * int8 row.
  for (bool isK : {true, false}) {
    TensorModel scales =
        isK ? sequence(MHAGEN_ABI_PTR(k_scale), "int8 key row scales",
                       Presence::KvScales, false, S::TokensKv, {{{S::KvHeads}}},
                       "k_scale_token_stride",
                       MHAGEN_ABI_STRIDE(k_scale_token_stride),
                       "k_scale_batch_stride",
                       MHAGEN_ABI_STRIDE(k_scale_batch_stride))
            : sequence(MHAGEN_ABI_PTR(v_scale), "int8 value row scales",
                       Presence::KvScales, false, S::TokensKv, {{{S::KvHeads}}},
                       "v_scale_token_stride",
                       MHAGEN_ABI_STRIDE(v_scale_token_stride),
                       "v_scale_batch_stride",
                       MHAGEN_ABI_STRIDE(v_scale_batch_stride));
    scales.elem = Elem::F32;
    scales.givenButAbsent =
        isK ? "k_scale given but this kernel's kv_dtype is not i8"
            : "v_scale given but this kernel's kv_dtype is not i8";
    scales.missingHint = " but kv_dtype = i8: pass one f32 scale per "
                         "(batch, token, kv head) of the int8 cache";
    t.push_back(scales);
  }
  // kv_cache = paged(BLOCK): the cache as blocks of BLOCK tokens, dense,
  // that the block table names (docs/design.md §5, "Paged K/V"); the
  // int8 scales in the same blocks.
  for (bool isK : {true, false}) {
    TensorModel blocks =
        isK ? fixed(MHAGEN_ABI_PTR(k), "keys in blocks", Presence::PagedKv,
                    {{{S::Blocks}}, {{S::Block}}, {{S::KvHeads}}, {{S::Dk}}})
            : fixed(MHAGEN_ABI_PTR(v), "values in blocks", Presence::PagedKv,
                    {{{S::Blocks}}, {{S::Block}}, {{S::KvHeads}}, {{S::Dv}}});
    blocks.elem = Elem::KvData;
    t.push_back(blocks);
  }
  for (bool isK : {true, false}) {
    TensorModel scales =
        isK ? fixed(MHAGEN_ABI_PTR(k_scale), "int8 key scales",
                    Presence::PagedKvScales,
                    {{{S::Blocks}}, {{S::Block}}, {{S::KvHeads}}})
            : fixed(MHAGEN_ABI_PTR(v_scale), "int8 value scales",
                    Presence::PagedKvScales,
                    {{{S::Blocks}}, {{S::Block}}, {{S::KvHeads}}});
    scales.elem = Elem::F32;
    scales.givenButAbsent =
        isK ? "k_scale given but this kernel's kv_dtype is not i8"
            : "v_scale given but this kernel's kv_dtype is not i8";
    scales.missingHint = " but kv_dtype = i8: pass one f32 scale per "
                         "(block, slot, kv head) of the int8 cache";
    t.push_back(scales);
  }
  // op = layer: the projections around the core. W [in, out] row-major.
  t.push_back(sequence(MHAGEN_ABI_PTR(x), "input tokens", Presence::Layer,
                       false, S::TokensQ, {{{S::D}}}, nullptr, nullptr, nullptr,
                       nullptr));
  t.push_back(fixed(MHAGEN_ABI_PTR(w_q), "query projection", Presence::Layer,
                    {{{S::D}}, {{S::H, S::Dk}}}));
  t.push_back(fixed(MHAGEN_ABI_PTR(w_k), "key projection", Presence::Layer,
                    {{{S::D}}, {{S::KvHeads, S::Dk}}}));
  t.push_back(fixed(MHAGEN_ABI_PTR(w_v), "value projection", Presence::Layer,
                    {{{S::D}}, {{S::KvHeads, S::Dv}}}));
  t.push_back(fixed(MHAGEN_ABI_PTR(w_o), "output projection", Presence::Layer,
                    {{{S::H, S::Dv}}, {{S::D}}}));
  t.push_back(fixed(MHAGEN_ABI_PTR(b_q), "query bias", Presence::LayerBias,
                    {{{S::H, S::Dk}}}));
  t.push_back(fixed(MHAGEN_ABI_PTR(b_k), "key bias", Presence::LayerBias,
                    {{{S::KvHeads, S::Dk}}}));
  t.push_back(fixed(MHAGEN_ABI_PTR(b_v), "value bias", Presence::LayerBias,
                    {{{S::KvHeads, S::Dv}}}));
  t.push_back(fixed(MHAGEN_ABI_PTR(b_o), "output bias", Presence::LayerBias,
                    {{{S::D}}}));
  // Mask `padding`: batch b sees keys [0, kv_lens[b]); a paged cache:
  // sequence b's length.
  t.push_back(perBatch(MHAGEN_ABI_PTR(kv_lens), "keys per batch",
                       Presence::Padding, Content::KeyLengthPerBatch,
                       "kv_lens given but this kernel's mask has no padding, "
                       "its cache is not paged and its batch not ragged",
                       " but the mask has padding, the cache is paged or "
                       "the batch is ragged: "
                       "pass one key length per batch"));
  // A paged cache's block table: token t of sequence b is slot t % BLOCK
  // of block block_table[b, t / BLOCK].
  t.push_back(perBatch(MHAGEN_ABI_PTR(block_table), "block indices",
                       Presence::PagedKv, Content::BlockIndices,
                       "block_table given but this kernel's K/V cache is "
                       "contiguous (only kv_cache = paged(BLOCK) takes one)",
                       " but kv_cache = paged: pass ceil(t_kv / BLOCK) block "
                       "indices per sequence"));
  t.back().dims = {{{S::Batch}}, {{S::TableBlocks}}};
  // A ragged batch: sequence b's queries are packed rows [q_offsets[b],
  // q_offsets[b + 1]), its last tokens (kv_lens[b] gives its length).
  t.push_back(perBatch(MHAGEN_ABI_PTR(q_offsets), "cumulative query offsets",
                       Presence::Ragged, Content::QueryOffsets,
                       "q_offsets given but this kernel's batch is not "
                       "ragged (only ragged = true packs its queries)",
                       " but ragged = true: pass B + 1 cumulative query "
                       "offsets (q_offsets[0] = 0)"));
  t.back().dims = {{{S::Offsets}}};
  // Score modifiers given at call time: one f32 per query head.
  t.push_back(fixed(MHAGEN_ABI_PTR(sinks), "learned sink logit per head",
                    Presence::Sinks, {{{S::H}}}));
  t.back().elem = Elem::F32;
  t.back().givenButAbsent =
      "sinks given but this kernel's spec has no sinks (sinks = learned)";
  t.back().missingHint = " but sinks = learned: pass one f32 logit per "
                         "query head";
  t.back().content = Content::Finite; // a NaN logit would poison every row
  t.push_back(fixed(MHAGEN_ABI_PTR(alibi_slopes), "ALiBi slope per head",
                    Presence::AlibiSlopes, {{{S::H}}}));
  t.back().elem = Elem::F32;
  t.back().givenButAbsent = "alibi_slopes given but this kernel's spec has "
                            "no alibi = runtime";
  t.back().missingHint = " but alibi = runtime: pass one f32 slope per "
                         "query head";
  t.back().content = Content::Finite; // the backends differ on NaN bias
  t.push_back(fixed(MHAGEN_ABI_PTR(scale), "score scale, finite and > 0",
                    Presence::Scale, {{{S::One}}}));
  t.back().elem = Elem::F32;
  t.back().content = Content::PositiveFinite;
  t.back().givenButAbsent = "scale given but this kernel's scale is compiled "
                            "in (its spec has no scale = runtime)";
  t.back().missingHint = " but scale = runtime: pass a pointer to the "
                         "call's score scale (one float)";
  // The output of each op.
  t.push_back(sequence(MHAGEN_ABI_PTR(out), "attention output",
                       Presence::UniformQ, true, S::TokensQ,
                       {{{S::H}}, {{S::Dv}}}, "out_token_stride",
                       MHAGEN_ABI_STRIDE(out_token_stride), "out_batch_stride",
                       MHAGEN_ABI_STRIDE(out_batch_stride)));
  t.push_back(packed(MHAGEN_ABI_PTR(out), "packed output", Presence::Ragged,
                     true, {{{S::H}}, {{S::Dv}}}, "out_token_stride",
                     MHAGEN_ABI_STRIDE(out_token_stride)));
  t.push_back(sequence(MHAGEN_ABI_PTR(out), "layer output", Presence::Layer,
                       true, S::TokensQ, {{{S::D}}}, "out_token_stride",
                       MHAGEN_ABI_STRIDE(out_token_stride), "out_batch_stride",
                       MHAGEN_ABI_STRIDE(out_batch_stride)));
  // lse = true: each row's log-sum-exp, a second output (always f32).
  t.push_back(sequence(MHAGEN_ABI_PTR(lse), "log-sum-exp of each row",
                       Presence::Lse, true, S::TokensQ, {{{S::H}}}, nullptr,
                       nullptr, nullptr, nullptr));
  t.back().elem = Elem::F32;
  t.back().givenButAbsent = "lse given but this kernel's spec has no lse "
                            "(lse = true)";
  t.back().missingHint = " but lse = true: pass [B, t_q, h] floats";
  t.push_back(packed(MHAGEN_ABI_PTR(lse), "packed log-sum-exp per row",
                     Presence::RaggedLse, true, {{{S::H}}}, nullptr, nullptr));
  t.back().elem = Elem::F32;
  t.back().givenButAbsent = "lse given but this kernel's spec has no lse "
                            "(lse = true)";
  t.back().missingHint = " but lse = true: pass [q_offsets[B], h] floats";
  return t;
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
    return !s.layer && s.kvBlock == 0;
  case Presence::PagedKv:
    return !s.layer && s.kvBlock > 0;
  case Presence::PagedKvScales:
    return !s.layer && s.kvBlock > 0 && s.kv == Scalar::I8;
  case Presence::Layer:
    return s.layer;
  case Presence::LayerBias:
    return s.layer && s.bias;
  case Presence::Padding:
    return s.padding || (!s.layer && (s.kvBlock > 0 || s.ragged));
  case Presence::KvScales:
    return !s.layer && s.kvBlock == 0 && s.kv == Scalar::I8;
  case Presence::Sinks:
    return s.sinks;
  case Presence::AlibiSlopes:
    return s.alibiSlopes;
  case Presence::Lse:
    return s.lse && !(!s.layer && s.ragged);
  case Presence::Scale:
    return s.scale;
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
                               "padding/paged/ragged",
                               "kv_dtype i8",
                               "sinks learned",
                               "alibi runtime",
                               "lse",
                               "scale runtime",
                               "sdpa, contiguous",
                               "paged",
                               "paged, kv_dtype i8",
                               "ragged",
                               "ragged, lse"};
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
