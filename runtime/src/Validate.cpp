// Argument validation: every call is checked against the kernel's manifest
// before any tensor is touched, so a wrong call is an error code with a
// message, never a crash or a silent wrong answer.
#include "RuntimeInternal.h"

#include "mhagen/abi_model.hpp"

#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

namespace mhagen::rt {

namespace {

std::string num(int64_t v) { return std::to_string(v); }

// Products of manifest sizes. Manifests are bounded when they are read
// (Manifest.cpp), and every product is still checked here: a size that
// wrapped to 0 would let a call through unchecked.
struct CheckedProduct {
  int64_t value = 1;
  bool overflow = false;
};
CheckedProduct product(std::initializer_list<int64_t> factors) {
  CheckedProduct p;
  for (int64_t f : factors)
    if (f < 0 || __builtin_mul_overflow(p.value, f, &p.value))
      p.overflow = true;
  return p;
}

struct TensorView {
  const char *name;
  const void *ptr;
  int64_t tokens;      // rows per batch
  int64_t rowElems;    // dense elements per token
  int64_t tokenStride; // 0 = dense
  int64_t batchStride; // 0 = dense
};

// Effective strides, range checks and the byte range the tensor spans.
int checkTensor(const TensorView &t, int64_t batch, int elemBytes,
                uintptr_t &begin, uintptr_t &end) {
  if (!t.ptr)
    return fail(MHAGEN_ERR_INVALID_ARGUMENT, std::string(t.name) + " is NULL");
  if (reinterpret_cast<uintptr_t>(t.ptr) % static_cast<uintptr_t>(elemBytes))
    return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                std::string(t.name) + " is not aligned to its element size (" +
                    num(elemBytes) + " bytes)");
  // All size arithmetic in 128 bits: strides and sizes come from the
  // caller and may be anything (fuzz_call_validation found an int64
  // overflow here).
  using i128 = __int128;
  auto text = [](i128 v) {
    return v > INT64_MAX ? std::string("more than 2^63") : num(int64_t(v));
  };
  const i128 ts = t.tokenStride ? i128(t.tokenStride) : i128(t.rowElems);
  if (t.tokenStride < 0 || ts < t.rowElems)
    return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                std::string(t.name) + " token stride " + num(t.tokenStride) +
                    " is smaller than one token (" + num(t.rowElems) +
                    " elements); use 0 for dense");
  const i128 seq = ts * t.tokens; // tokens < 2^31, checked by the caller
  const i128 bs = t.batchStride ? i128(t.batchStride) : seq;
  if (t.batchStride < 0 || (batch > 1 && bs < seq))
    return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                std::string(t.name) + " batch stride " + num(t.batchStride) +
                    " is smaller than one sequence (" + text(seq) +
                    " elements); use 0 for dense");
  // Kernels index with 32-bit strides per dimension.
  if (ts > INT32_MAX || bs > INT32_MAX)
    return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                std::string(t.name) +
                    " is too large: strides must stay below 2^31 elements");
  i128 lastElem = i128(batch - 1) * bs + i128(t.tokens - 1) * ts + t.rowElems;
  i128 bytes = lastElem * elemBytes;
  if (bytes > i128(INT64_MAX))
    return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                std::string(t.name) + " spans more than 2^63 bytes");
  begin = reinterpret_cast<uintptr_t>(t.ptr);
  end = begin + static_cast<uintptr_t>(bytes);
  if (end < begin)
    return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                std::string(t.name) + " wraps around the address space");
  return MHAGEN_OK;
}

int checkVector(const char *name, const void *p, int elemBytes) {
  if (!p)
    return fail(MHAGEN_ERR_INVALID_ARGUMENT, std::string(name) + " is NULL");
  if (reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(elemBytes))
    return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                std::string(name) + " is not aligned to its element size");
  return MHAGEN_OK;
}

// A ragged batch's cumulative query offsets (host memory, B + 1 int32):
// q_offsets[0] = 0, each sequence's count in [0, t_q], at least one query
// in all. Sets sizes.packedQ to the packed rows, q_offsets[B].
int checkQueryOffsets(const mhagen_call_args &a, abi::CallSizes &sizes) {
  int rc = checkVector("q_offsets", a.q_offsets, 4);
  if (rc != MHAGEN_OK)
    return a.q_offsets ? rc
                       : fail(MHAGEN_ERR_INVALID_ARGUMENT,
                              "q_offsets is NULL but ragged = true: pass B + "
                              "1 cumulative query offsets (q_offsets[0] = 0)");
  if (a.device_pointers)
    return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                "device_pointers is set but a ragged batch is split on the "
                "host: q_offsets and kv_lens must be host memory");
  const int32_t *o = a.q_offsets;
  if (o[0] != 0)
    return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                "q_offsets[0] = " + num(o[0]) +
                    " but must be 0 (sequence 0's queries start at row 0)");
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t n = int64_t(o[b + 1]) - o[b];
    if (n < 0)
      return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                  "q_offsets[" + num(b + 1) + "] = " + num(o[b + 1]) +
                      " is below q_offsets[" + num(b) + "] = " + num(o[b]) +
                      ": offsets must not decrease");
    if (n > a.t_q)
      return fail(MHAGEN_ERR_SHAPE_MISMATCH,
                  "sequence " + num(b) + " has " + num(n) +
                      " queries (q_offsets[" + num(b + 1) + "] - q_offsets[" +
                      num(b) + "]) but t_q = " + num(a.t_q) +
                      " (t_q is the longest sequence's query count)");
  }
  if (o[a.batch] == 0)
    return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                "q_offsets[" + num(a.batch) +
                    "] = 0: the batch has no queries");
  const std::pair<const char *, int64_t> batchStrides[] = {
      {"q_batch_stride", a.q_batch_stride},
      {"out_batch_stride", a.out_batch_stride}};
  for (const auto &[field, stride] : batchStrides)
    if (stride != 0)
      return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                  std::string(field) +
                      " is set but this kernel's queries are packed (ragged "
                      "= true): sequence b starts at row q_offsets[b]; pass "
                      "0");
  sizes.packedQ = o[a.batch];
  return MHAGEN_OK;
}

} // namespace

abi::AbiShape abiShapeOf(const KernelManifest &m) {
  const ManifestSpec &s = m.spec;
  auto scalar = [](const std::string &name) {
    abi::Scalar x = abi::Scalar::F32; // fromJson accepts no unknown name
    abi::scalarFromName(name, x);
    return x;
  };
  abi::AbiShape shape;
  shape.layer = s.op == "layer";
  shape.d = s.d;
  shape.h = s.h;
  shape.n_kv = s.n_kv;
  shape.d_k = s.d_k;
  shape.d_v = s.d_v;
  shape.bias = s.bias;
  shape.padding = s.padding;
  shape.data = scalar(s.dtype);
  shape.kv = scalar(s.kv_dtype.empty() ? s.dtype : s.kv_dtype);
  shape.sinks = s.sinks;
  shape.alibiSlopes = s.alibi == "runtime";
  shape.lse = s.lse;
  shape.scale = s.scaleAtRuntime;
  shape.kvBlock = s.kv_block;
  shape.ragged = s.ragged;
  shape.positions = s.positions;
  shape.layerCache = s.layer_cache;
  shape.qkNorm = s.qk_norm == "head"         ? abi::AbiShape::Norm::Head
                 : s.qk_norm == "projection" ? abi::AbiShape::Norm::Projection
                                             : abi::AbiShape::Norm::None;
  return shape;
}

int validateCall(const KernelManifest &m, const mhagen_call_args *a) {
  if (!a)
    return fail(MHAGEN_ERR_INVALID_ARGUMENT, "call arguments are NULL");
  if (a->abi_version != MHAGEN_ABI_VERSION)
    return fail(MHAGEN_ERR_ABI_MISMATCH,
                "call arguments carry ABI version " + num(a->abi_version) +
                    " but this runtime speaks ABI " + num(MHAGEN_ABI_VERSION) +
                    " (set args.abi_version = MHAGEN_ABI_VERSION)");
  if (a->flags != 0)
    return fail(MHAGEN_ERR_INVALID_ARGUMENT, "flags must be 0");
  if (a->cuda_stream && m.backend != "cuda")
    return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                "cuda_stream is set, but kernel " + m.symbol + " (backend " +
                    m.backend + ", target " + m.target +
                    ") does not run on a caller's CUDA stream; pass NULL");
  const ManifestSpec &s = m.spec;
  const bool layer = s.op == "layer";
  const abi::AbiShape shape = abiShapeOf(m);
  // The model's table is walked in place: this runs on every call.
  const std::vector<abi::TensorModel> &table = abi::allTensors();
  // Elements per token (or in all) of each data tensor, and its bytes,
  // checked once.
  auto bytes = [&](const abi::TensorModel &t) {
    return abi::scalarBytes(abi::scalarOf(t, shape));
  };
  // The dimensions after the leading call sizes ([B, T] of a sequence,
  // [num_blocks] of a paged cache's blocks) are fixed by the manifest.
  auto fixedFrom = [](const abi::TensorModel &t) {
    size_t i = 0;
    while (i < t.dims.size() && t.dims[i].factors.size() == 1 &&
           abi::isCallSize(t.dims[i].factors[0]))
      ++i;
    return i;
  };
  auto overflows = [&](const abi::TensorModel &t) {
    const int64_t n = abi::denseInnerElements(t, shape, fixedFrom(t));
    return n <= 0 || product({n, bytes(t)}).overflow;
  };
  for (const abi::TensorModel &t : table)
    if (abi::isPresent(t, shape) && abi::isNumeric(t) && overflows(t))
      return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                  "the kernel's manifest has sizes whose products overflow "
                  "(h " +
                      num(s.h) + ", kv " + num(s.n_kv) + ", dk " + num(s.d_k) +
                      ", dv " + num(s.d_v) + ", d " + num(s.d) + ")");

  struct Size {
    const char *name;
    int64_t value;
    int64_t fixed;
  };
  // A layer attends over its own tokens (t_kv = t_q), or over its cache
  // of t_kv tokens.
  const bool ownTokens = layer && !s.layer_cache;
  int64_t tkv = ownTokens ? (a->t_kv ? a->t_kv : a->t_q) : a->t_kv;
  if (ownTokens && a->t_kv != 0 && a->t_kv != a->t_q)
    return fail(MHAGEN_ERR_SHAPE_MISMATCH,
                "t_kv is " + num(a->t_kv) +
                    " but op = layer attends over its "
                    "own " +
                    num(a->t_q) + " tokens: pass t_kv = 0 or t_q");
  for (Size sz : {Size{"batch", a->batch, s.B}, Size{"t_q", a->t_q, s.T},
                  Size{"t_kv", tkv, ownTokens ? s.T : s.T_kv}}) {
    if (sz.value < 1)
      return fail(MHAGEN_ERR_INVALID_ARGUMENT, std::string(sz.name) +
                                                   " must be >= 1 (got " +
                                                   num(sz.value) + ")");
    if (sz.value > INT32_MAX)
      return fail(MHAGEN_ERR_INVALID_ARGUMENT, std::string(sz.name) +
                                                   " must be < 2^31 (got " +
                                                   num(sz.value) + ")");
    if (sz.fixed && sz.value != sz.fixed)
      return fail(MHAGEN_ERR_SHAPE_MISMATCH,
                  std::string(sz.name) + " is " + num(sz.value) +
                      " but this kernel was generated for " + sz.name + " = " +
                      num(sz.fixed));
  }

  // A paged cache: its block count (the other kernels take none).
  const bool paged = s.kv_block > 0 && !layer;
  if (paged && (a->num_blocks < 1 || a->num_blocks > INT32_MAX))
    return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                "num_blocks must be in [1, 2^31) for this kernel's paged "
                "K/V cache (got " +
                    num(a->num_blocks) + ")");
  if (!paged && a->num_blocks != 0)
    return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                "num_blocks is " + num(a->num_blocks) +
                    " but this kernel's K/V cache is contiguous (only "
                    "kv_cache = paged(BLOCK) takes blocks): pass 0");
  abi::CallSizes sizes{a->batch, a->t_q, tkv, a->num_blocks};

  // A ragged batch: its offsets first, since they size the packed q, out
  // and lse (checked below like any tensor).
  int rc;
  if (shape.ragged && (rc = checkQueryOffsets(*a, sizes)) != MHAGEN_OK)
    return rc;

  // Pointers of tensors this kernel does not have must stay NULL (a name
  // of two rows, such as k contiguous or paged, counts as present if one
  // of them is).
  auto namePresent = [&](const abi::TensorModel &t) {
    for (const abi::TensorModel &o : table)
      if (std::string(o.name) == t.name && abi::isPresent(o, shape))
        return true;
    return false;
  };
  for (const abi::TensorModel &t : table)
    if (t.givenButAbsent && t.pointer(*a) && !namePresent(t))
      return fail(MHAGEN_ERR_INVALID_ARGUMENT, t.givenButAbsent);

  // Strides that no tensor of this kernel takes must stay 0 (a paged
  // cache's blocks and a layer's tensors are dense): a stride the kernel
  // would ignore is a caller's mistake, not a layout.
  auto strideTaken = [&](const char *field) {
    for (const abi::TensorModel &o : table)
      if (abi::isPresent(o, shape) &&
          ((o.tokenStrideField && std::string(o.tokenStrideField) == field) ||
           (o.batchStrideField && std::string(o.batchStrideField) == field)))
        return true;
    return false;
  };
  for (const abi::TensorModel &t : table) {
    const std::pair<const char *, int64_t (*)(const mhagen_call_args &)>
        strides[] = {{t.tokenStrideField, t.tokenStride},
                     {t.batchStrideField, t.batchStride}};
    for (const auto &[field, stride] : strides)
      if (field && stride && stride(*a) != 0 && !strideTaken(field))
        return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                    std::string(field) + " is " + num(stride(*a)) +
                        " but no tensor of this kernel takes it (" +
                        (namePresent(t) ? std::string(t.name) + " is dense"
                                        : "it has no " + std::string(t.name)) +
                        " here): pass 0");
  }

  // Tensors in the model's order, outputs and integer vectors last; byte
  // ranges are collected to reject an output that overlaps an input.
  struct Range {
    const char *name;
    uintptr_t begin, end;
    bool cacheRows; ///< a cache the layer writes (abi::TensorModel)
  };
  std::vector<Range> inputs, outputs;
  auto checkData = [&](const abi::TensorModel &t, uintptr_t &b, uintptr_t &e) {
    // A required tensor left NULL: say why this kernel needs it (sequence
    // and fixed-size tensors alike).
    if (!t.pointer(*a) && t.missingHint && *t.missingHint)
      return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                  std::string(t.name) + " is NULL" + t.missingHint);
    if (t.isSequence()) {
      TensorView view{t.name,
                      t.pointer(*a),
                      t.tokens() == abi::Size::TokensQ ? a->t_q : tkv,
                      abi::denseInnerElements(t, shape, 2),
                      t.tokenStride ? t.tokenStride(*a) : 0,
                      t.batchStride ? t.batchStride(*a) : 0};
      return checkTensor(view, a->batch, bytes(t), b, e);
    }
    if (t.isPacked()) { // a ragged batch's rows: one token stride
      TensorView view{t.name,
                      t.pointer(*a),
                      sizes.packedQ,
                      abi::denseInnerElements(t, shape, 1),
                      t.tokenStride ? t.tokenStride(*a) : 0,
                      0};
      return checkTensor(view, 1, bytes(t), b, e);
    }
    if ((rc = checkVector(t.name, t.pointer(*a), bytes(t))) != MHAGEN_OK)
      return rc;
    // Kernels index with 32-bit strides per dimension: one block of a
    // paged cache must stay below 2^31 elements; the whole tensor below
    // 2^63 bytes.
    const int64_t inner = abi::elementsAt(t, shape, sizes, 1);
    const int64_t n = abi::elementsAt(t, shape, sizes, 0);
    if (inner < 0 || inner > INT32_MAX || n < 0 ||
        product({n, bytes(t)}).overflow)
      return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                  std::string(t.name) +
                      " is too large: each of its rows must stay below "
                      "2^31 elements and the whole below 2^63 bytes");
    b = reinterpret_cast<uintptr_t>(t.pointer(*a));
    e = b + static_cast<uintptr_t>(n * bytes(t));
    if (e < b)
      return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                  std::string(t.name) + " wraps around the address space");
    return int(MHAGEN_OK);
  };
  for (const abi::TensorModel &m : table) {
    const abi::TensorModel *t = &m;
    if (!abi::isPresent(m, shape) || t->output || !abi::isNumeric(*t))
      continue;
    uintptr_t b = 0, e = 0;
    if ((rc = checkData(*t, b, e)) != MHAGEN_OK)
      return rc;
    inputs.push_back({t->name, b, e, t->cacheRows});
    // Values the kernel relies on (host memory; a device pointer is not
    // read here).
    const bool positive = t->content == abi::Content::PositiveFinite;
    if ((positive || t->content == abi::Content::Finite) &&
        !a->device_pointers) {
      const auto *values = static_cast<const float *>(t->pointer(*a));
      const int64_t n = abi::denseInnerElements(*t, shape, 0);
      for (int64_t i = 0; i < n; ++i)
        if (!std::isfinite(values[i]) || (positive && !(values[i] > 0)))
          return fail(
              MHAGEN_ERR_INVALID_ARGUMENT,
              std::string(t->name) + "[" + num(i) +
                  "] = " + std::to_string(values[i]) +
                  (positive ? " must be finite and > 0" : " must be finite"));
    }
  }
  // A layer's cache is written as well as read: it must alias no other
  // tensor.
  if (shape.layerCache)
    for (const Range &c : inputs)
      if (c.cacheRows)
        for (const Range &r : inputs)
          if (&r != &c && c.begin < r.end && r.begin < c.end)
            return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                        std::string(c.name) +
                            " (the cache the layer appends to) overlaps " +
                            r.name + "; the cache must not alias a tensor");
  for (const abi::TensorModel &m : table) {
    const abi::TensorModel *t = &m;
    if (!abi::isPresent(m, shape) || !t->output)
      continue;
    uintptr_t b = 0, e = 0;
    if ((rc = checkData(*t, b, e)) != MHAGEN_OK)
      return rc;
    for (const Range &r : inputs)
      if (b < r.end && r.begin < e)
        return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                    std::string(t->name) + " overlaps input " + r.name +
                        "; the output must not alias an input");
    for (const Range &r : outputs)
      if (b < r.end && r.begin < e)
        return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                    std::string(t->name) + " overlaps output " + r.name +
                        "; the outputs must not alias each other");
    outputs.push_back({t->name, b, e, false});
  }
  for (const abi::TensorModel &m : table) {
    const abi::TensorModel *t = &m;
    if (!abi::isPresent(m, shape) || t->elem != abi::Elem::Int32)
      continue;
    const auto *values = static_cast<const int32_t *>(t->pointer(*a));
    if (!values)
      return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                  std::string(t->name) + " is NULL" + t->missingHint);
    if ((rc = checkVector(t->name, values, 4)) != MHAGEN_OK)
      return rc;
    if (t->content == abi::Content::KeyLengthPerBatch)
      for (int64_t i = 0; i < a->batch; ++i)
        if (values[i] < 0 || values[i] > tkv)
          return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                      std::string(t->name) + "[" + num(i) +
                          "] = " + num(values[i]) +
                          " is outside [0, t_kv = " + num(tkv) + "]" +
                          (paged ? " (t_kv is the block table's capacity: " +
                                       num(abi::sizeAt(abi::Size::TableBlocks,
                                                       shape, sizes)) +
                                       " blocks of " + num(s.kv_block) +
                                       " tokens per sequence)"
                                 : std::string()));
    // A layer's cache must hold the tokens it appends: they are each
    // sequence's last t_q of its kv_lens[b].
    if (t->content == abi::Content::KeyLengthPerBatch && shape.layerCache)
      for (int64_t b = 0; b < a->batch; ++b)
        if (values[b] < a->t_q)
          return fail(MHAGEN_ERR_SHAPE_MISMATCH,
                      "kv_lens[" + num(b) + "] = " + num(values[b]) +
                          " but the layer appends its t_q = " + num(a->t_q) +
                          " tokens to the cache: kv_lens holds each "
                          "sequence's length after the call, at least t_q");
    // Positions far past any context would lose the rotation's precision
    // (and a negative one is no token's).
    if (t->content == abi::Content::TokenPositions) {
      constexpr int32_t kMaxPosition = int32_t(1) << 24;
      for (int64_t i = 0; i < a->batch * a->t_q; ++i)
        if (values[i] < 0 || values[i] > kMaxPosition)
          return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                      std::string(t->name) + "[" + num(i / a->t_q) + ", " +
                          num(i % a->t_q) + "] = " + num(values[i]) +
                          " is outside [0, 2^24]");
    }
    // A ragged batch's queries are its sequences' last tokens.
    if (t->content == abi::Content::KeyLengthPerBatch && shape.ragged)
      for (int64_t b = 0; b < a->batch; ++b) {
        const int64_t n = int64_t(a->q_offsets[b + 1]) - a->q_offsets[b];
        if (n > values[b])
          return fail(MHAGEN_ERR_SHAPE_MISMATCH,
                      "sequence " + num(b) + " has " + num(n) +
                          " queries (q_offsets[" + num(b + 1) +
                          "] - q_offsets[" + num(b) + "]) but kv_lens[" +
                          num(b) + "] = " + num(values[b]) +
                          " keys: its queries are its last tokens, so they "
                          "must be among its keys");
      }
    // A paged cache: every block a sequence's length needs lies in the
    // cache (kv_lens, checked above, bounds the entries read). A hostile
    // table is refused here; the kernel clamps its reads as well.
    if (t->content == abi::Content::BlockIndices) {
      const int64_t width = abi::sizeAt(abi::Size::TableBlocks, shape, sizes);
      for (int64_t b = 0; b < a->batch; ++b) {
        const int64_t need = (a->kv_lens[b] + s.kv_block - 1) / s.kv_block;
        for (int64_t j = 0; j < need; ++j) {
          const int32_t blk = values[b * width + j];
          if (blk < 0 || blk >= a->num_blocks)
            return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                        std::string(t->name) + "[" + num(b) + ", " + num(j) +
                            "] = " + num(blk) +
                            " is outside [0, num_blocks = " +
                            num(a->num_blocks) + ") and sequence " + num(b) +
                            " (length " + num(a->kv_lens[b]) + ") reads it");
        }
      }
    }
  }
  if (a->device_pointers && m.device != "cuda")
    return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                "device_pointers is set but this kernel runs on the " +
                    m.device);
  return MHAGEN_OK;
}

} // namespace mhagen::rt
