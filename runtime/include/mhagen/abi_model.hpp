// The ABI model: every tensor of every op, described once (docs/design.md
// §5). Everything that needs to know the tensors derives it from this
// table: the runtime's argument validation, both backends' kernel
// parameters and C wrappers, the generated header, the test harness and
// the tensor table in abi.h (a unit test checks that comment against it).
//
// Adding a tensor to the ABI: a pointer (and strides, if it is a sequence)
// in mhagen_call_args (abi.h), one row in AbiModel.cpp, and the kernel math
// that reads or writes it. README.md, "How to add an ABI field", walks
// through it.
#ifndef MHAGEN_ABI_MODEL_HPP
#define MHAGEN_ABI_MODEL_HPP

#include "mhagen/abi.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mhagen::abi {

/// The version of the model below; equal to MHAGEN_ABI_VERSION.
inline constexpr uint32_t kVersion = MHAGEN_ABI_VERSION;

/// A stored element type.
enum class Scalar { F32, BF16, F16, I8, I32 };

/// The spec fields that decide which tensors a kernel has, their sizes and
/// element types.
struct AbiShape {
  bool layer = false; ///< op = layer (else sdpa)
  int64_t d = 0, h = 0, n_kv = 0, d_k = 0, d_v = 0;
  bool bias = false;         ///< op = layer with projection biases
  bool padding = false;      ///< mask has a padding term
  Scalar data = Scalar::F32; ///< the spec's dtype
  Scalar kv = Scalar::F32;   ///< the spec's kv_dtype (K and V)
  bool sinks = false;        ///< sinks = learned
  bool alibiSlopes = false;  ///< alibi = runtime
  bool lse = false;          ///< lse = true
  bool scale = false;        ///< scale = runtime
  int64_t kvBlock = 0;       ///< kv_cache = paged(kvBlock); 0: contiguous
  /// ragged = true: queries (and out, lse) packed, sequence b's rows
  /// [q_offsets[b], q_offsets[b + 1]), and each sequence's own key length
  /// in kv_lens (docs/design.md §5, "Ragged batches").
  bool ragged = false;
  /// qk_norm: none, head (weights [dk]) or projection ([h*dk], [kv*dk]).
  enum class Norm { None, Head, Projection } qkNorm = Norm::None;
  bool positions = false; ///< op = layer with positions = runtime
  /// op = layer with kv_cache = contiguous: it reads k and v (the cache,
  /// t_kv tokens) and writes its new tokens' rows into them; kv_lens holds
  /// each sequence's length after the call.
  bool layerCache = false;
};

/// What the kernel itself is called with: the runtime splits a ragged
/// batch into one call per sequence (batch 1, t_q its query count, and for
/// a contiguous cache t_kv its key length), so a ragged kernel takes the
/// uniform layout with kv_lens (RaggedBatch.cpp).
AbiShape perSequence(AbiShape s);

/// A size symbol. Batch, the token counts, the cache's block count and the
/// block table's width (ceil(t_kv / Block)) come from the call; the
/// others are fixed by the spec.
enum class Size {
  Batch,
  TokensQ,
  TokensKv,
  D,
  H,
  KvHeads,
  Dk,
  Dv,
  One,
  Blocks,      ///< num_blocks: blocks in a paged cache
  Block,       ///< tokens per block (kv_cache = paged(Block))
  TableBlocks, ///< block table entries per sequence: ceil(t_kv / Block)
  PackedQ,     ///< packed query rows of a ragged batch: q_offsets[B]
  Offsets      ///< B + 1 (a ragged batch's cumulative query offsets)
};

/// The sizes a call gives (op = layer: t_kv = t_q).
struct CallSizes {
  int64_t batch = 0, tq = 0, tkv = 0, numBlocks = 0;
  int64_t packedQ = 0; ///< a ragged batch's query rows (q_offsets[B])
};

/// One dimension: the product of its factors (w_q's columns are h*dk).
struct Dim {
  std::vector<Size> factors;
};

enum class Elem {
  Data,   ///< the spec's dtype (float, or uint16_t bits of bf16/f16)
  KvData, ///< the spec's kv_dtype (float, uint16_t bits, or int8_t)
  F32,    ///< float whatever the dtype (the scales of int8 K/V)
  Int32
};

/// When a tensor is part of a kernel's ABI.
enum class Presence {
  Sdpa,             ///< op = sdpa
  UniformQ,         ///< op = sdpa, queries [B, Tq, ...] (not ragged)
  Layer,            ///< op = layer
  LayerBias,        ///< op = layer with bias = true
  Padding,          ///< a padding term in the mask, or keys per sequence
  KvScales,         ///< a contiguous cache (sdpa's or a layer's) in i8
  Sinks,            ///< any op with sinks = learned
  AlibiSlopes,      ///< any op with alibi = runtime
  Lse,              ///< any op with lse = true, not ragged
  Scale,            ///< any op with scale = runtime
  ContiguousKv,     ///< a contiguous K/V cache: op = sdpa's or a layer's
  PagedKv,          ///< op = sdpa with kv_cache = paged(BLOCK)
  PagedKvScales,    ///< a paged cache with kv_dtype = i8
  Ragged,           ///< op = sdpa with ragged = true (packed queries)
  RaggedLse,        ///< ragged = true with lse = true
  QkNormHead,       ///< op = layer with qk_norm = head
  QkNormProjection, ///< op = layer with qk_norm = projection
  Positions         ///< op = layer with positions = runtime
};

/// How the runtime checks a tensor's contents (beyond size and pointer).
enum class Content {
  Values,            ///< any values
  KeyLengthPerBatch, ///< one key count per batch, each in [0, t_kv]
  PositiveFinite,    ///< every value finite and > 0 (host memory only)
  Finite,            ///< every value finite (host memory only)
  /// A paged cache's block table: the entries a sequence's length needs
  /// (ceil(kv_lens[b] / Block)) each name a block in [0, num_blocks)
  BlockIndices,
  /// A ragged batch's cumulative query offsets: [0] = 0, non-decreasing,
  /// each sequence's count in [0, min(t_q, kv_lens[b])]
  QueryOffsets,
  /// Token positions: each in [0, 2^24] (the largest token count)
  TokenPositions
};

/// What an input holds in the math, which sets the values a test draws
/// for it (the harness and the fuzzers read it; the runtime does not).
enum class Role {
  Activation,  ///< x, k, v: uniform in [-1, 1]
  Queries,     ///< q: scaled so the scores reach a chosen logit magnitude
  Weight,      ///< uniform in +-sqrt(3 / fan-in), fan-in = dims[0]
  QueryWeight, ///< w_q: a Weight scaled like Queries
  Bias,        ///< uniform in +-0.1
  NormWeight,  ///< uniform in [0.5, 1.5]: an RMSNorm's per-channel gain
  SinkLogit,   ///< uniform in [-2, 3]: a sink takes a visible share of a row
  Slope,       ///< uniform in [0.01, 0.5]: positive ALiBi slopes
  Scale,       ///< uniform in [0.5, 2] times the spec's compiled-in scale
  RowScale,    ///< an int8 row's f32 scale: made with its int8 tensor
  Index,       ///< an integer vector (Content says which)
  Result       ///< an output
};

/// One tensor of the ABI. AbiModel.cpp builds each row by naming its
/// fields (TensorRow); every field has the value most rows take.
struct TensorModel {
  const char *name = ""; ///< the mhagen_call_args member (and parameter name)
  const char *doc = "";  ///< what it holds, for headers and docs
  Presence presence = Presence::Sdpa;
  bool output = false;
  Elem elem = Elem::Data;
  Content content = Content::Values;
  Role role = Role::Activation;
  std::vector<Dim> dims; ///< outermost first; row-major
  /// A sequence tensor ([B, T, ...]) may have token and batch strides,
  /// given in these mhagen_call_args members (0 = dense); nullptr: always
  /// dense.
  const char *tokenStrideField = nullptr;
  const char *batchStrideField = nullptr;
  /// What the call does when the tensor is absent from this kernel but a
  /// pointer is given, and when it is required but NULL (appended to
  /// "<name> is NULL").
  const char *givenButAbsent = nullptr;
  const char *missingHint = "";
  /// Part of a K/V cache: a layer with kv_cache = contiguous writes its
  /// new tokens' rows into it, so it must alias no other tensor.
  bool cacheRows = false;

  // Accessors into mhagen_call_args (the member named above).
  const void *(*pointer)(const mhagen_call_args &) = nullptr;
  void (*bind)(mhagen_call_args &, void *) = nullptr;
  int64_t (*tokenStride)(const mhagen_call_args &) = nullptr; ///< null: dense
  int64_t (*batchStride)(const mhagen_call_args &) = nullptr; ///< null: dense

  /// True if dims are [B, T, ...] with T the query or key tokens.
  bool isSequence() const;
  /// True if dims are [PackedQ, ...]: a ragged batch's rows, one token
  /// stride and no batch stride (sequence b starts at row q_offsets[b]).
  bool isPacked() const;
  /// The token symbol of a sequence tensor (TokensQ or TokensKv).
  Size tokens() const;
};

/// Every tensor of the ABI, both ops, in kernel-parameter order: inputs,
/// then per-batch integer vectors, then the output.
const std::vector<TensorModel> &allTensors();

/// True if the tensor is part of a kernel with this shape.
bool isPresent(const TensorModel &t, const AbiShape &s);

/// The tensors of a kernel with this shape, in kernel-parameter order.
std::vector<const TensorModel *> tensors(const AbiShape &s);

/// The element type of a tensor in a kernel of this shape.
Scalar scalarOf(const TensorModel &t, const AbiShape &s);
int scalarBytes(Scalar x);
/// "f32", "bf16", "f16", "i8", "i32".
const char *scalarName(Scalar x);
/// The Scalar named `name` (scalarName's inverse); false if none is.
bool scalarFromName(const std::string &name, Scalar &out);
/// The C type a caller passes: float, uint16_t (bf16/f16 bits), int8_t,
/// int32_t.
const char *scalarCType(Scalar x);
/// The bits of a quiet NaN stored as bf16 (0x7fc0) or f16 (0x7e00).
uint16_t quietNaNBits(Scalar x);
/// A tensor holding numbers to compute with (not an integer vector such
/// as kv_lens that only steers which keys are visible).
inline bool isNumeric(const TensorModel &t) { return t.elem != Elem::Int32; }

/// Value of a symbol fixed by the spec (0 for Batch/TokensQ/TokensKv).
int64_t staticSize(Size sym, const AbiShape &s);
bool isCallSize(Size sym);
/// Product of a dimension's factors when all are fixed by the spec, else
/// 0. Products are computed with overflow checks; -1 on overflow.
int64_t staticExtent(const Dim &d, const AbiShape &s);
/// Elements per token of a sequence tensor, or all elements of a fixed
/// tensor (-1 on overflow).
int64_t denseInnerElements(const TensorModel &t, const AbiShape &s,
                           size_t fromDim);

/// Value of any symbol at a call's sizes (0 if unknown).
int64_t sizeAt(Size sym, const AbiShape &s, const CallSizes &c);
/// Elements of dims [fromDim, rank) at a call's sizes; -1 on overflow.
int64_t elementsAt(const TensorModel &t, const AbiShape &s, const CallSizes &c,
                   size_t fromDim = 0);

/// Short label of a symbol ("B", "Tq", "Tkv", "d", "h", "kv", "dk", "dv",
/// "1", "Nq", "B+1").
const char *label(Size sym);
/// "[B, Tq, h, dk]" or "[d, h*dk]".
std::string dimsText(const TensorModel &t);
/// The tensor table as written in abi.h's comment, one line per tensor:
/// " *   op = sdpa : q [B, Tq, h, dk] ..." (see abi.h).
std::string docTable();

} // namespace mhagen::abi

#endif
