// Argument validation: every call is checked against the kernel's manifest
// before any tensor is touched, so a wrong call is an error code with a
// message, never a crash or a silent wrong answer.
#include "RuntimeInternal.h"

#include <climits>
#include <cstdint>
#include <string>

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

} // namespace

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
  const ManifestSpec &s = m.spec;
  const bool layer = s.op == "layer";
  const int eb = m.elementBytes();
  // Elements per token of each tensor and of each weight, checked once.
  const CheckedProduct qRow = product({s.h, s.d_k}),
                       kRow = product({s.n_kv, s.d_k}),
                       vRow = product({s.n_kv, s.d_v}),
                       oRow = product({s.h, s.d_v}),
                       wq = product({s.d, s.h, s.d_k, eb}),
                       wk = product({s.d, s.n_kv, s.d_k, eb}),
                       wv = product({s.d, s.n_kv, s.d_v, eb}),
                       wo = product({s.h, s.d_v, s.d, eb});
  for (const CheckedProduct &p : {qRow, kRow, vRow, oRow, wq, wk, wv, wo})
    if (p.overflow || p.value <= 0)
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
  int64_t tkv = layer ? (a->t_kv ? a->t_kv : a->t_q) : a->t_kv;
  if (layer && a->t_kv != 0 && a->t_kv != a->t_q)
    return fail(MHAGEN_ERR_SHAPE_MISMATCH,
                "t_kv is " + num(a->t_kv) +
                    " but op = layer attends over its "
                    "own " +
                    num(a->t_q) + " tokens: pass t_kv = 0 or t_q");
  for (Size sz : {Size{"batch", a->batch, s.B}, Size{"t_q", a->t_q, s.T},
                  Size{"t_kv", tkv, layer ? s.T : s.T_kv}}) {
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

  // Tensors: collect byte ranges to reject an output that overlaps an input.
  struct Range {
    const char *name;
    uintptr_t begin, end;
  };
  std::vector<Range> inputs;
  uintptr_t b = 0, e = 0;
  int rc;
  if (!layer) {
    TensorView q{
        "q", a->q, a->t_q, qRow.value, a->q_token_stride, a->q_batch_stride};
    TensorView k{
        "k", a->k, tkv, kRow.value, a->k_token_stride, a->k_batch_stride};
    TensorView v{
        "v", a->v, tkv, vRow.value, a->v_token_stride, a->v_batch_stride};
    for (const TensorView &t : {q, k, v}) {
      if ((rc = checkTensor(t, a->batch, eb, b, e)) != MHAGEN_OK)
        return rc;
      inputs.push_back({t.name, b, e});
    }
  } else {
    TensorView x{"x", a->x, a->t_q, s.d, 0, 0};
    if ((rc = checkTensor(x, a->batch, eb, b, e)) != MHAGEN_OK)
      return rc;
    inputs.push_back({"x", b, e});
    struct W {
      const char *name;
      const void *p;
      int64_t bytes;
    };
    for (W w : {W{"w_q", a->w_q, wq.value}, W{"w_k", a->w_k, wk.value},
                W{"w_v", a->w_v, wv.value}, W{"w_o", a->w_o, wo.value}}) {
      if ((rc = checkVector(w.name, w.p, eb)) != MHAGEN_OK)
        return rc;
      uintptr_t wb = reinterpret_cast<uintptr_t>(w.p);
      inputs.push_back({w.name, wb, wb + static_cast<uintptr_t>(w.bytes)});
    }
    if (s.bias) {
      struct Bv {
        const char *name;
        const void *p;
        int64_t elems;
      };
      for (Bv bv :
           {Bv{"b_q", a->b_q, qRow.value}, Bv{"b_k", a->b_k, kRow.value},
            Bv{"b_v", a->b_v, vRow.value}, Bv{"b_o", a->b_o, s.d}}) {
        if ((rc = checkVector(bv.name, bv.p, eb)) != MHAGEN_OK)
          return rc;
        uintptr_t bb = reinterpret_cast<uintptr_t>(bv.p);
        inputs.push_back(
            {bv.name, bb, bb + static_cast<uintptr_t>(bv.elems * eb)});
      }
    } else if (a->b_q || a->b_k || a->b_v || a->b_o) {
      return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                  "bias pointers given but this kernel's spec has bias = "
                  "false");
    }
  }

  TensorView out{"out",
                 a->out,
                 a->t_q,
                 layer ? s.d : oRow.value,
                 a->out_token_stride,
                 a->out_batch_stride};
  if ((rc = checkTensor(out, a->batch, eb, b, e)) != MHAGEN_OK)
    return rc;
  for (const Range &r : inputs)
    if (b < r.end && r.begin < e)
      return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                  std::string("out overlaps input ") + r.name +
                      "; the output must not alias an input");

  if (s.padding) {
    if (!a->kv_lens)
      return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                  "kv_lens is NULL but the mask has padding: pass one key "
                  "length per batch");
    for (int64_t i = 0; i < a->batch; ++i)
      if (a->kv_lens[i] < 0 || a->kv_lens[i] > tkv)
        return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                    "kv_lens[" + num(i) + "] = " + num(a->kv_lens[i]) +
                        " is outside [0, t_kv = " + num(tkv) + "]");
  } else if (a->kv_lens) {
    return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                "kv_lens given but this kernel's mask has no padding");
  }
  if (a->device_pointers && m.device != "cuda")
    return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                "device_pointers is set but this kernel runs on the " +
                    m.device);
  return MHAGEN_OK;
}

} // namespace mhagen::rt
