// The Halide algorithm of one spec (HalidePipeline.h): the algorithm in
// plain math first (AttentionAlgorithm.cpp holds the attention core), the
// parameters from the ABI model, then the schedules by name.
#include "HalidePipeline.h"

#include "CpuSchedule.h"
#include "GpuSchedule.h"
#include "RotaryPositions.h"

#include "mhagen/abi_model.hpp"
#include "mhagen/backend/AbiWrapper.h"
#include "mhagen/spec/BackendResult.h"
#include "mhagen/spec/ScoreModifiers.h"

#include <functional>
#include <map>
#include <optional>
#include <string>

namespace mhagen::hl {

using namespace Halide;

bool bf16AsBits(const AttentionSpec &s) {
  return s.dtype == DType::BF16 && s.target.isGpu();
}

namespace {

// The Halide type of a stored element.
Type halideType(abi::Scalar x, bool bf16Bits) {
  switch (x) {
  case abi::Scalar::BF16:
    return bf16Bits ? UInt(16) : BFloat(16);
  case abi::Scalar::F16:
    return Float(16);
  case abi::Scalar::I8:
    return Int(8);
  case abi::Scalar::I32:
    return Int(32);
  default:
    return Float(32);
  }
}

Type elementType(const AttentionSpec &s) {
  return halideType(backend::abiShapeOf(s).data, bf16AsBits(s));
}

// f16 -> f32 from the bits, exact for every f16 (subnormals included; Inf
// and NaN keep their class): the magnitude's bits shifted into f32's
// fields, scaled by 2^(127-15), the exponent forced to all ones for Inf/NaN,
// the sign or-ed back. Halide 14 lowers cast<float>(float16) on x86 with its
// own emulation even when the target has F16C (no vcvtph2ps; 15 vector
// instructions per 16 elements in the K/V staging loop, measured in the
// kernel's assembly), this takes 9.
Expr f16BitsToF32(Expr h) {
  const Expr x = cast(UInt(32), reinterpret(UInt(16), std::move(h)));
  const Expr mag = (x & 0x7fff) << 13;
  const Expr scaled = reinterpret(Float(32), mag) * 5.192296858534828e+33f;
  const Expr special = reinterpret(Float(32), mag | 0x7f800000u);
  const Expr v = select((x & 0x7c00) == 0x7c00, special, scaled);
  return reinterpret(Float(32),
                     reinterpret(UInt(32), v) | ((x & 0x8000) << 16));
}

// Storage value -> f32, and f32 -> storage value (round to nearest even).
Expr toF32(const AttentionSpec &s, Expr e) {
  if (bf16AsBits(s))
    return reinterpret(Float(32), cast(UInt(32), e) << 16);
  if (e.type().is_float() && e.type().bits() == 16 && !e.type().is_bfloat() &&
      !s.target.isGpu())
    return f16BitsToF32(std::move(e));
  return cast<float>(e);
}
Expr fromF32(const AttentionSpec &s, const Type &T, Expr f) {
  if (bf16AsBits(s)) {
    Expr u = reinterpret(UInt(32), f);
    return cast(UInt(16), (u + 0x7fff + ((u >> 16) & 1)) >> 16);
  }
  if (T.is_float() && T.bits() == 16) {
    // Halide 14's emulated f32 -> f16 turns a NaN into an infinity; a NaN
    // output (docs/design.md §1, non-finite inputs) stays a NaN.
    const Expr isNan =
        (reinterpret(UInt(32), f) << 1) > cast(UInt(32), Expr(0xff000000u));
    const Expr nan =
        reinterpret(T, cast(UInt(16), Expr(T.is_bfloat() ? 0x7fc0 : 0x7e00)));
    return select(isNan, nan, cast(T, f));
  }
  return cast(T, f);
}

// The kernel's parameters, made from the ABI model: one ImageParam per
// input tensor (Halide lists dimensions innermost first). Sizes the spec
// fixes are extents (and dense strides inside a token); the call's sizes
// start at 0, and the spec's fixed B/T bind the data inputs (the runtime
// checks the call against the manifest before the kernel runs).
struct AbiParams {
  std::map<std::string, ImageParam> byName;
  std::vector<ImageParam> inOrder;
};

void constrainDims(OutputImageParam p, const abi::TensorModel &t,
                   const AttentionSpec &s, bool bindCallSizes) {
  const abi::AbiShape shape = backend::kernelAbiShapeOf(s);
  const int rank = static_cast<int>(t.dims.size());
  for (int i = 0; i < rank; ++i) {
    Internal::Dimension dim = p.dim(rank - 1 - i);
    const abi::Dim &d = t.dims[i];
    dim.set_min(0);
    if (d.factors.size() == 1 && abi::isCallSize(d.factors[0])) {
      const std::optional<int64_t> fixed = backend::fixedCallSize(d, s);
      if (bindCallSizes && fixed)
        dim.set_extent(static_cast<int>(*fixed));
      continue;
    }
    dim.set_extent(static_cast<int>(abi::staticExtent(d, shape)));
    dim.set_stride(static_cast<int>(abi::denseInnerElements(t, shape, i + 1)));
  }
}

AbiParams abiParams(const AttentionSpec &s) {
  AbiParams out;
  const abi::AbiShape shape = backend::kernelAbiShapeOf(s);
  for (const abi::TensorModel *t : abi::tensors(shape)) {
    if (t->output)
      continue;
    ImageParam p(halideType(abi::scalarOf(*t, shape), bf16AsBits(s)),
                 static_cast<int>(t->dims.size()), t->name);
    constrainDims(p, *t, s, /*bindCallSizes=*/abi::isNumeric(*t));
    out.byName.emplace(t->name, p);
    out.inOrder.push_back(p);
  }
  return out;
}

const abi::TensorModel &outputModel(const AttentionSpec &s,
                                    const std::string &name) {
  for (const abi::TensorModel *t : abi::tensors(backend::kernelAbiShapeOf(s)))
    if (t->output && t->name == name)
      return *t;
  throw BackendError("",
                     "the ABI model has no output " + name + " for this op");
}

} // namespace

std::vector<Func> outputsOf(const BuiltPipeline &bp, const AttentionSpec &s) {
  std::vector<Func> out{bp.output};
  if (s.lse)
    out.push_back(bp.lse);
  if (bp.newKeys) {
    out.push_back(*bp.newKeys);
    out.push_back(*bp.newValues);
  }
  if (bp.newKeyScales) {
    out.push_back(*bp.newKeyScales);
    out.push_back(*bp.newValueScales);
  }
  return out;
}

namespace {

/// The call arguments and constants that modify scores: scale = runtime,
/// learned sinks, ALiBi slopes (runtime ones are arguments; the standard
/// ones are constants embedded in the kernel).
void defineModifierInputs(const AttentionSpec &s, const AbiParams &params,
                          const AttentionVars &v, hl::AttentionInputs &in) {
  auto param = [&](const char *name) { return params.byName.at(name); };
  if (s.scaleAtRuntime)
    in.scale = param("scale")(0);
  if (s.sinks)
    in.sink(v.hd) = param("sinks")(v.hd);
  if (s.alibi == AlibiSlopes::Runtime) {
    in.slope(v.hd) = param("alibi_slopes")(v.hd);
  } else if (s.alibi == AlibiSlopes::Standard) {
    const std::vector<double> slopes = standardAlibiSlopes(s.h);
    Buffer<float> table(static_cast<int>(s.h), "alibi_standard_slopes");
    for (int64_t i = 0; i < s.h; ++i)
      table(static_cast<int>(i)) = static_cast<float>(slopes[i]);
    in.slope(v.hd) = table(v.hd);
  }
}

/// op = sdpa: Q, K and V as the attention reads them.
void defineSdpaInputs(const AttentionSpec &s, const AbiParams &params,
                      const AttentionVars &v, hl::AttentionInputs &in) {
  auto param = [&](const char *name) { return params.byName.at(name); };
  auto f32 = [&](Expr e) { return toF32(s, e); };
  ImageParam q = param("q"), k = param("k"), vv = param("v");
  in.q(v.c, v.hd, v.t, v.b) = f32(q(v.c, v.hd, v.t, v.b));
  // K/V as stored (kv_dtype): f32/bf16/f16 convert exactly to f32; int8
  // rows are scaled by their row's scale (docs/design.md §5). GPU
  // kernels keep K/V as the dtype (kv_dtype is for CPU targets).
  //
  // A paged cache (docs/design.md §5, "Paged K/V"): token t of sequence
  // b is slot t % BLOCK of block block_table(t / BLOCK, b). Tiles run
  // past a sequence's length, and the table's entries there may be junk
  // (abi.h: they are never used), so a key past the length reads slot
  // t % BLOCK of block 0 and only entries of the sequence's own tokens
  // choose a block. Both indices are clamped into the table and the
  // cache as well; values past the length (slots never written, maybe
  // NaN) are replaced by 0 before P V multiplies them by their zero
  // weights.
  std::function<Expr(Expr, Expr)> slot = [](Expr t, Expr) { return t; };
  std::function<Expr(Expr, Expr)> block = [](Expr, Expr b) { return b; };
  if (s.pagedKv()) {
    ImageParam table = param("block_table");
    const int BLK = static_cast<int>(s.kv_block);
    // k, v and their scales hold the same num_blocks (one call size).
    const Expr numBlocks = k.dim(3).extent();
    const Expr width = table.dim(0).extent();
    const Func kvLen = in.kvLen;
    slot = [BLK](Expr t, Expr) { return t % BLK; };
    block = [=](Expr t, Expr b) {
      const Expr len = kvLen(b);
      const Expr entry = clamp(min(t, len - 1) / BLK, 0, width - 1);
      return select(t < len, clamp(table(entry, b), 0, numBlocks - 1), 0);
    };
  }
  auto rowAt = [&](ImageParam p, Expr c, Expr g, Expr t, Expr b) {
    return p(c, g, slot(t, b), block(t, b));
  };
  auto scaleAt = [&](ImageParam p, Expr g, Expr t, Expr b) {
    return p(g, slot(t, b), block(t, b));
  };
  Expr kValue, vValue;
  if (s.kvQuantized()) {
    ImageParam ks = param("k_scale"), vs = param("v_scale");
    kValue =
        cast<float>(rowAt(k, v.c, v.g, v.t, v.b)) * scaleAt(ks, v.g, v.t, v.b);
    vValue =
        cast<float>(rowAt(vv, v.c, v.g, v.t, v.b)) * scaleAt(vs, v.g, v.t, v.b);
  } else {
    kValue = f32(rowAt(k, v.c, v.g, v.t, v.b));
    vValue = f32(rowAt(vv, v.c, v.g, v.t, v.b));
  }
  Expr vRawValue = rowAt(vv, v.c, v.g, v.t, v.b);
  if (s.pagedKv()) {
    const Expr written = v.t < in.kvLen(v.b);
    vValue = select(written, vValue, 0.0f);
    vRawValue =
        select(written, vRawValue, Internal::make_zero(vRawValue.type()));
  }
  in.k(v.c, v.g, v.t, v.b) = kValue;
  in.v(v.c, v.g, v.t, v.b) = vValue;
  in.qRaw(v.c, v.hd, v.t, v.b) = q(v.c, v.hd, v.t, v.b);
  in.kRaw(v.c, v.g, v.t, v.b) = rowAt(k, v.c, v.g, v.t, v.b);
  in.vRaw(v.c, v.g, v.t, v.b) = vRawValue;
  in.tq = q.dim(2).extent();
  // A paged cache's key axis: the table's capacity (kv_lens <= t_kv).
  in.tkv = s.pagedKv() ? param("block_table").dim(0).extent() *
                             static_cast<int>(s.kv_block)
                       : k.dim(2).extent();
  in.batch = q.dim(3).extent();
}

/// op = sdpa: the attention core (and its decode variant), and the outputs
/// out (and lse) read from it.
void defineSdpaOutputs(const AttentionSpec &s, const hl::AttentionTiles &tiles,
                       const std::optional<AttentionTiles> &decodeTiles,
                       const hl::AttentionInputs &in, BuiltPipeline &bp) {
  const AttentionVars &v = bp.v;
  const Type T = elementType(s);
  bp.attention = hl::defineAttention(s, in, tiles, v);
  if (decodeTiles) {
    // Both variants, chosen by the call's T_q: Halide computes the
    // decode stages only under that condition (and the schedule
    // specialises the output on it).
    bp.decode = hl::defineAttention(s, in, *decodeTiles, v);
    bp.isDecode = in.tq <= decodeTiles->tokensPerTile;
  }
  if (!s.lse) {
    Expr attention = bp.attention.out(v.c, v.hd, v.t, v.b);
    if (decodeTiles)
      attention =
          select(bp.isDecode, bp.decode->out(v.c, v.hd, v.t, v.b), attention);
    bp.output = Func("out");
    bp.output(v.c, v.hd, v.t, v.b) = fromF32(s, T, attention);
  } else {
    // Two outputs from one scan: the rows (value, m, l) are computed
    // once, in `core` (scheduled as the output is without lse), and
    // both outputs read them.
    Tuple rows(bp.attention.out(v.c, v.hd, v.t, v.b));
    if (decodeTiles)
      rows = tuple_select(bp.isDecode,
                          Tuple(bp.decode->out(v.c, v.hd, v.t, v.b)), rows);
    bp.core = Func("attention_rows");
    bp.core(v.c, v.hd, v.t, v.b) = rows;
    bp.output = Func("out");
    bp.output(v.c, v.hd, v.t, v.b) =
        fromF32(s, T, bp.core(v.c, v.hd, v.t, v.b)[0]);
    bp.lse = Func("lse");
    bp.lse(v.hd, v.t, v.b) = hl::logSumExp(bp.core(0, v.hd, v.t, v.b)[1],
                                           bp.core(0, v.hd, v.t, v.b)[2]);
  }
}

/// Symmetric int8 rows (kv_dtype = i8): per (channel row g, t, b) of
/// `rows` (width channels), amax = max |x|, scale = amax / 127 and
/// q = round(x * 127 / amax) in [-127, 127], ties to even, in f64 as
/// mhagen_kv_quantize_i8 does (so a row the layer appends holds the bytes
/// the runtime's quantiser writes for the same f32 values).
void defineRowQuantisation(Func rows, int64_t width, const AttentionVars &v,
                           Func amax, Func quantised, Func scales) {
  RDom r(0, static_cast<int>(width), amax.name() + "_r");
  amax(v.g, v.t, v.b) = maximum(abs(rows(r, v.g, v.t, v.b)));
  scales(v.g, v.t, v.b) = amax(v.g, v.t, v.b) / 127.0f;
  const Expr m = amax(v.g, v.t, v.b);
  const Expr top = Internal::make_const(Float(64), 127.0);
  const Expr inv =
      select(m > 0.0f, top / cast<double>(m), Internal::make_zero(Float(64)));
  quantised(v.c, v.g, v.t, v.b) = cast<int8_t>(
      clamp(round(cast<double>(rows(v.c, v.g, v.t, v.b)) * inv), -top, top));
}

/// op = layer: the projections around the attention core.
void defineLayer(const AttentionSpec &s, const hl::AttentionTiles &tiles,
                 const std::optional<AttentionTiles> &decodeTiles,
                 int streamRows, const AbiParams &params,
                 hl::AttentionInputs &in, BuiltPipeline &bp) {
  const AttentionVars &v = bp.v;
  const Type T = elementType(s);
  const int64_t h = s.h, kv = s.n_kv, dk = s.d_k, dv = s.d_v, d = s.d;
  auto param = [&](const char *name) { return params.byName.at(name); };
  auto f32 = [&](Expr e) { return toF32(s, e); };
  // W [in, out] row-major is w(out_feature, in_feature) here.
  ImageParam x = param("x"), wq = param("w_q"), wk = param("w_k"),
             wv = param("w_v"), wo = param("w_o");
  Func bq("b_q_f"), bk("b_k_f"), bvf("b_v_f"), bo("b_o_f");
  if (s.bias) {
    bq(v.n) = f32(param("b_q")(v.n));
    bk(v.n) = f32(param("b_k")(v.n));
    bvf(v.n) = f32(param("b_v")(v.n));
    bo(v.n) = f32(param("b_o")(v.n));
  }
  Func wqf("w_q_f"), wkf("w_k_f"), wvf("w_v_f"), wof("w_o_f");
  Var kk("k");
  const Expr tokens = x.dim(1).extent(), batch = x.dim(2).extent();
  // The projections' rows, token t of sequence b at row t + T b
  // (Projection). Rows are clamped: GEMM blocks of gemm_rows run whole and
  // the rows past the last are discarded.
  auto tokenRows = [&](const std::string &name, const auto &token) {
    Func rows(name);
    const Expr row = min(v.t, tokens * batch - 1);
    rows(kk, v.t) = token(kk, row % tokens, row / tokens);
    return rows;
  };
  Func xRows = tokenRows(
      "x_rows", [&](Expr k, Expr t, Expr b) { return f32(x(k, t, b)); });
  wqf(v.n, kk) = f32(wq(v.n, kk));
  wkf(v.n, kk) = f32(wk(v.n, kk));
  wvf(v.n, kk) = f32(wv(v.n, kk));
  wof(v.n, kk) = f32(wo(v.n, kk));
  auto keepF32 = [](Expr e) { return e; };
  // Calls of at most streamRows rows (decoder steps) stream the weights.
  const Expr streamed = streamRows > 0 ? tokens * batch <= streamRows : Expr();
  Projection pq = hl::defineProjection("q_proj", xRows, d, wqf, bq, s.bias,
                                       keepF32, tokens, v, streamed);
  Projection pk = hl::defineProjection("k_proj", xRows, d, wkf, bk, s.bias,
                                       keepF32, tokens, v, streamed);
  Projection pv = hl::defineProjection("v_proj", xRows, d, wvf, bvf, s.bias,
                                       keepF32, tokens, v, streamed);
  // QK-norm, then rotary positions, on the projected columns.
  Func qCols = pq.out, kCols = pk.out;
  if (s.qk_norm.enabled()) {
    Func qw("q_norm_f"), kw("k_norm_f");
    qw(v.n) = f32(param("q_norm")(v.n));
    kw(v.n) = f32(param("k_norm")(v.n));
    bp.qNorm = hl::defineRmsNorm("q", s, pq.out, qw, h, v.n, v.t, v.b);
    bp.kNorm = hl::defineRmsNorm("k", s, pk.out, kw, kv, v.n, v.t, v.b);
    qCols = bp.qNorm->normed;
    kCols = bp.kNorm->normed;
  }
  // With a cache, the call's tokens are each sequence's last T of its
  // kv_lens (docs/design.md §5, "The layer's KV cache").
  const Expr cachedBefore = s.cachedLayer() ? in.kvLen(v.b) - tokens : Expr();
  if (s.rope.enabled())
    bp.rope = defineRotaryTable(
        s, v.j, v.t, v.b,
        s.positionsAtRuntime ? param("positions") : ImageParam(), cachedBefore);
  // Split heads by feature columns: head i owns columns i*dk..(i+1)*dk-1.
  auto channel = [&](Func cols, Expr c, Expr head) {
    return s.rope.enabled()
               ? rotateChannel(s, *bp.rope, cols, c, head, v.t, v.b)
               : cols(head * static_cast<int>(dk) + c, v.t, v.b);
  };
  // q is normalised and rotated as the attention reads it (once per head
  // and token); k once per call, since every query tile reads it.
  in.q(v.c, v.hd, v.t, v.b) = channel(qCols, v.c, v.hd);
  const Expr valueCol = pv.out(v.g * static_cast<int>(dv) + v.c, v.t, v.b);
  if (s.cachedLayer()) {
    // The new rows as the cache stores them (outputs, appended by the
    // wrapper), and the keys the attention reads: the cache's rows before
    // the call's, then the new rows as stored (so a call attends over
    // exactly what the next call reads back). Indices are clamped: both
    // sides of the select are loaded.
    bp.newKeys = Func("k_new");
    bp.newValues = Func("v_new");
    ImageParam kc = param("k"), vc = param("v");
    const Expr capacity = kc.dim(2).extent();
    const Expr before = in.kvLen(v.b) - tokens;
    const Expr old = v.t < before;
    const Expr cacheRow = clamp(v.t, 0, capacity - 1);
    const Expr newRow = clamp(v.t - before, 0, tokens - 1);
    if (s.kvQuantized()) {
      // int8 rows with one scale each, as mhagen_kv_quantize_i8 writes
      // them (docs/design.md §5): the rows are computed once, so that the
      // row maximum and the quantised values see the same numbers.
      bp.keyRows = Func("k_new_rows");
      (*bp.keyRows)(v.c, v.g, v.t, v.b) = channel(kCols, v.c, v.g);
      bp.valueRows = Func("v_new_rows");
      (*bp.valueRows)(v.c, v.g, v.t, v.b) = valueCol;
      bp.newKeyScales = Func("k_new_scale");
      bp.newValueScales = Func("v_new_scale");
      bp.keyRowMax = Func("k_new_amax");
      bp.valueRowMax = Func("v_new_amax");
      defineRowQuantisation(*bp.keyRows, s.d_k, v, *bp.keyRowMax, *bp.newKeys,
                            *bp.newKeyScales);
      defineRowQuantisation(*bp.valueRows, s.d_v, v, *bp.valueRowMax,
                            *bp.newValues, *bp.newValueScales);
      ImageParam ks = param("k_scale"), vs = param("v_scale");
      auto dequantised = [&](Func rows, Func scales, ImageParam cache,
                             ImageParam cacheScales) {
        return select(old,
                      cast<float>(cache(v.c, v.g, cacheRow, v.b)) *
                          cacheScales(v.g, cacheRow, v.b),
                      cast<float>(rows(v.c, v.g, newRow, v.b)) *
                          scales(v.g, newRow, v.b));
      };
      in.k(v.c, v.g, v.t, v.b) =
          dequantised(*bp.newKeys, *bp.newKeyScales, kc, ks);
      in.v(v.c, v.g, v.t, v.b) =
          dequantised(*bp.newValues, *bp.newValueScales, vc, vs);
    } else {
      const Type stored = halideType(backend::abiShapeOf(s).kv, bf16AsBits(s));
      (*bp.newKeys)(v.c, v.g, v.t, v.b) =
          fromF32(s, stored, channel(kCols, v.c, v.g));
      (*bp.newValues)(v.c, v.g, v.t, v.b) = fromF32(s, stored, valueCol);
      in.k(v.c, v.g, v.t, v.b) =
          select(old, f32(kc(v.c, v.g, cacheRow, v.b)),
                 f32((*bp.newKeys)(v.c, v.g, newRow, v.b)));
      in.v(v.c, v.g, v.t, v.b) =
          select(old, f32(vc(v.c, v.g, cacheRow, v.b)),
                 f32((*bp.newValues)(v.c, v.g, newRow, v.b)));
    }
    in.tkv = capacity;
  } else {
    if (s.rope.enabled() || s.qk_norm.enabled()) {
      bp.keys = Func("k_final");
      (*bp.keys)(v.c, v.g, v.t, v.b) = channel(kCols, v.c, v.g);
      in.k(v.c, v.g, v.t, v.b) = (*bp.keys)(v.c, v.g, v.t, v.b);
    } else {
      in.k(v.c, v.g, v.t, v.b) = channel(kCols, v.c, v.g);
    }
    in.v(v.c, v.g, v.t, v.b) = valueCol;
    in.tkv = tokens;
  }
  in.tq = tokens;
  in.batch = batch;
  bp.attention = hl::defineAttention(s, in, tiles, v);
  // The attention rows the output projection reads, computed whole before
  // it. A cached layer's decode steps take them from the split-KV decode
  // variant, as sdpa's do: the prefill tile would pad one token per
  // sequence to a tile of rows and walk the cache on one task per head
  // block.
  bp.core = Func("attention_rows");
  if (decodeTiles) {
    bp.decode = hl::defineAttention(s, in, *decodeTiles, v);
    bp.isDecode = in.tq <= decodeTiles->tokensPerTile;
    if (s.lse)
      bp.core(v.c, v.hd, v.t, v.b) =
          tuple_select(bp.isDecode, Tuple(bp.decode->out(v.c, v.hd, v.t, v.b)),
                       Tuple(bp.attention.out(v.c, v.hd, v.t, v.b)));
    else
      bp.core(v.c, v.hd, v.t, v.b) =
          select(bp.isDecode, bp.decode->out(v.c, v.hd, v.t, v.b),
                 bp.attention.out(v.c, v.hd, v.t, v.b));
  } else {
    bp.core(v.c, v.hd, v.t, v.b) = bp.attention.out(v.c, v.hd, v.t, v.b);
  }
  // Merge heads: column n of O is channel n % dv of head n / dv.
  Func merged = tokenRows("merged", [&](Expr k, Expr t, Expr b) {
    return hl::attentionValue(s, bp.core, k % static_cast<int>(dv),
                              k / static_cast<int>(dv), t, b);
  });
  Projection po = hl::defineProjection(
      "out_proj", merged, h * dv, wof, bo, s.bias,
      [&](Expr e) { return fromF32(s, T, e); }, tokens, v, streamed);
  bp.projections = {pq, pk, pv, po};
  bp.projectionWidths = {h * dk, kv * dk, kv * dv, d};
  bp.output = po.out;
  if (s.lse) {
    // The attention rows are computed whole (compute_root) before the
    // output projection: lse reads their (m, l) directly.
    bp.lse = Func("lse");
    bp.lse(v.hd, v.t, v.b) = hl::logSumExp(bp.core(0, v.hd, v.t, v.b)[1],
                                           bp.core(0, v.hd, v.t, v.b)[2]);
  }
}

} // namespace

// The algorithm for the spec: inputs, projections (layer), attention core.
BuiltPipeline buildPipeline(const AttentionSpec &s,
                            const hl::AttentionTiles &tiles,
                            const std::optional<AttentionTiles> &decodeTiles,
                            int streamRows) {
  BuiltPipeline bp;
  AbiParams params = abiParams(s);
  bp.inputs = params.inOrder;
  bp.args.assign(params.inOrder.begin(), params.inOrder.end());

  hl::AttentionInputs in;
  if (s.effectiveMask().hasPadding()) {      // padding, paged or ragged
    bp.kvLens = params.byName.at("kv_lens"); // one length per sequence
    in.kvLen(bp.v.b) = bp.kvLens(bp.v.b);
    in.hasKvLen = true;
  }
  defineModifierInputs(s, params, bp.v, in);
  if (s.op == Op::Sdpa) {
    defineSdpaInputs(s, params, bp.v, in);
    defineSdpaOutputs(s, tiles, decodeTiles, in, bp);
  } else {
    defineLayer(s, tiles, decodeTiles, streamRows, params, in, bp);
  }
  // The outputs: out dense within a token, any token and batch stride;
  // lse dense.
  constrainDims(bp.output.output_buffer(), outputModel(s, "out"), s,
                /*bindCallSizes=*/false);
  if (s.lse)
    constrainDims(bp.lse.output_buffer(), outputModel(s, "lse"), s,
                  /*bindCallSizes=*/false);
  if (bp.newKeys) {
    // Dense [B, T, kv, dk] scratch rows from the wrapper.
    const int kv = static_cast<int>(s.n_kv);
    const std::pair<Func, int> rows[] = {{*bp.newKeys, int(s.d_k)},
                                         {*bp.newValues, int(s.d_v)}};
    for (const auto &[f, width] : rows) {
      OutputImageParam o = f.output_buffer();
      o.dim(0).set_min(0).set_extent(width).set_stride(1);
      o.dim(1).set_min(0).set_extent(kv).set_stride(width);
      o.dim(2).set_min(0).set_stride(width * kv);
      o.dim(3).set_min(0);
    }
  }
  if (bp.newKeyScales)
    for (Func f : {*bp.newKeyScales, *bp.newValueScales}) {
      // Dense [B, T, kv] scratch scales from the wrapper.
      OutputImageParam o = f.output_buffer();
      o.dim(0).set_min(0).set_extent(static_cast<int>(s.n_kv)).set_stride(1);
      o.dim(1).set_min(0).set_stride(static_cast<int>(s.n_kv));
      o.dim(2).set_min(0);
    }
  return bp;
}

void applyGpuSchedule(BuiltPipeline &bp, const AttentionSpec &s,
                      const ScheduleParams &p) {
  if (s.op == Op::Sdpa) {
    hl::scheduleAttentionGpu(bp.attention, bp.output, bp.v, s, p);
    return;
  }
  for (size_t i = 0; i < 3; ++i)
    hl::scheduleProjectionGpu(bp.projections[i], bp.v, bp.projectionWidths[i],
                              p, /*isOutput=*/false);
  bp.attention.out.compute_root();
  hl::scheduleAttentionGpu(bp.attention, bp.attention.out, bp.v, s, p);
  hl::scheduleProjectionGpu(bp.projections[3], bp.v, bp.projectionWidths[3], p,
                            /*isOutput=*/true);
}

void applyCpuSchedule(BuiltPipeline &bp, const AttentionSpec &s,
                      const ScheduleParams &p) {
  if (s.op == Op::Sdpa) {
    // With lse, `core` takes the output's place in the task loop.
    Func rows = s.lse ? bp.core : bp.output;
    if (s.lse)
      rows.compute_root();
    hl::scheduleAttentionCpu(bp.attention, rows, bp.v, s, p);
    if (bp.decode) {
      // The specialisation starts from the schedule above (same loops).
      rows.specialize(bp.isDecode);
      hl::scheduleDecodeCpu(*bp.decode, bp.v, s, p);
    }
    if (s.lse)
      hl::scheduleRowOutputsCpu(bp.output, bp.lse, bp.v, p);
    return;
  }
  for (size_t i = 0; i < 3; ++i)
    hl::scheduleProjectionCpu(bp.projections[i], bp.v, bp.projectionWidths[i],
                              p, /*isOutput=*/false);
  if (bp.rope)
    hl::scheduleRotaryCpu(*bp.rope, bp.v);
  if (bp.qNorm) {
    hl::scheduleRmsNormCpu(*bp.qNorm, bp.v, p);
    hl::scheduleRmsNormCpu(*bp.kNorm, bp.v, p);
  }
  if (bp.keys)
    hl::scheduleKeysOnceCpu(*bp.keys, bp.v, p);
  if (bp.newKeys) {
    // Outputs, so computed once per call like k_final above.
    hl::scheduleKeysOnceCpu(*bp.newKeys, bp.v, p);
    hl::scheduleKeysOnceCpu(*bp.newValues, bp.v, p);
  }
  if (bp.keyRows) {
    // int8 rows: the f32 rows once, then their maxima and scales.
    hl::scheduleKeysOnceCpu(*bp.keyRows, bp.v, p);
    hl::scheduleKeysOnceCpu(*bp.valueRows, bp.v, p);
    for (Func f :
         {*bp.keyRowMax, *bp.valueRowMax, *bp.newKeyScales, *bp.newValueScales})
      f.compute_root().parallel(bp.v.t);
  }
  bp.core.compute_root();
  hl::scheduleAttentionCpu(bp.attention, bp.core, bp.v, s, p);
  if (bp.decode) {
    bp.core.specialize(bp.isDecode);
    hl::scheduleDecodeCpu(*bp.decode, bp.v, s, p);
  }
  hl::scheduleProjectionCpu(bp.projections[3], bp.v, bp.projectionWidths[3], p,
                            /*isOutput=*/true);
  if (s.lse)
    hl::scheduleRowOutputsCpu(Func(), bp.lse, bp.v, p);
}

// Estimates for Halide's autoschedulers (the hand schedules ignore them).
void setEstimates(BuiltPipeline &bp, const AttentionSpec &s) {
  const int T = static_cast<int>(s.T.value_or(512));
  const int Tkv = static_cast<int>(s.T_kv.value_or(T));
  const int B = static_cast<int>(s.B.value_or(1));
  for (ImageParam &p : bp.inputs) {
    std::vector<std::pair<Expr, Expr>> est;
    const std::string name = p.name();
    if (name == "q")
      est = {{0, (int)s.d_k}, {0, (int)s.h}, {0, T}, {0, B}};
    else if (name == "k")
      est = {{0, (int)s.d_k}, {0, (int)s.n_kv}, {0, Tkv}, {0, B}};
    else if (name == "v")
      est = {{0, (int)s.d_v}, {0, (int)s.n_kv}, {0, Tkv}, {0, B}};
    else if (name == "x")
      est = {{0, (int)s.d}, {0, T}, {0, B}};
    else if (name == "kv_lens")
      est = {{0, B}};
    else if (p.dimensions() == 2)
      est = {{0, p.dim(0).extent()}, {0, p.dim(1).extent()}};
    else
      est = {{0, p.dim(0).extent()}};
    Region r;
    for (auto &e : est)
      r.push_back(Range(e.first, e.second));
    p.set_estimates(r);
  }
  if (s.op == Op::Sdpa)
    bp.output.set_estimates({{0, (int)s.d_v}, {0, (int)s.h}, {0, T}, {0, B}});
  else
    bp.output.set_estimates({{0, (int)s.d}, {0, T}, {0, B}});
  if (s.lse)
    bp.lse.set_estimates({{0, (int)s.h}, {0, T}, {0, B}});
}

} // namespace mhagen::hl
