// The Halide backend: builds the pipeline for a spec (AttentionAlgorithm),
// schedules it (CpuSchedule / GpuSchedule), compiles it to LLVM bitcode with
// Halide 14, and turns the bitcode into an object with llc-14 for an
// explicit CPU model (see HalideTargets.h for why not Halide's own object).
#include "mhagen/halide/HalideBackend.h"

#include "AttentionAlgorithm.h"
#include "CpuSchedule.h"
#include "GpuSchedule.h"
#include "HalideTargets.h"

#include "mhagen/support/Process.h"
#include "mhagen/templates/Templates.h"

#include <Halide.h>

#include <chrono>
#include <cstdlib>
#include <sstream>

#ifndef MHAGEN_LLC14
#define MHAGEN_LLC14 "llc-14"
#endif
#ifndef MHAGEN_HALIDE_INCLUDE_DIR
#define MHAGEN_HALIDE_INCLUDE_DIR "/usr/include/halide14"
#endif
#ifndef MHAGEN_VERSION
#define MHAGEN_VERSION "0.0.0"
#endif

namespace mhagen {

using namespace Halide;
using hl::AttentionStages;
using hl::AttentionVars;
using hl::HalideTargetInfo;
using hl::Projection;

namespace {

// GPU targets keep bf16 as its 16-bit pattern and convert by hand: Halide
// 14's OpenCL backend needs half-precision support for any bf16 arithmetic
// (PoCL has none), and the conversion is exact anyway.
bool bf16AsBits(const AttentionSpec &s) {
  return s.dtype == DType::BF16 && s.target.isGpu();
}

Type elementType(const AttentionSpec &s) {
  switch (s.dtype) {
  case DType::F32:
    return Float(32);
  case DType::BF16:
    return bf16AsBits(s) ? UInt(16) : BFloat(16);
  case DType::F16:
    return Float(16);
  }
  return Float(32);
}

// Storage value -> f32, and f32 -> storage value (round to nearest even).
Expr toF32(const AttentionSpec &s, Expr e) {
  if (bf16AsBits(s))
    return reinterpret(Float(32), cast(UInt(32), e) << 16);
  return cast<float>(e);
}
Expr fromF32(const AttentionSpec &s, const Type &T, Expr f) {
  if (bf16AsBits(s)) {
    Expr u = reinterpret(UInt(32), f);
    return cast(UInt(16), (u + 0x7fff + ((u >> 16) & 1)) >> 16);
  }
  return cast(T, f);
}

// Requires a dimension to start at 0 with a fixed extent (and stride).
void fixDim(const ImageParam &p, int d, int64_t extent, int64_t stride = 0) {
  p.dim(d).set_min(0).set_extent(static_cast<int>(extent));
  if (stride)
    p.dim(d).set_stride(static_cast<int>(stride));
}

// Everything the schedules and the compiler need about one built pipeline.
struct BuiltPipeline {
  AttentionVars v;
  std::vector<Argument> args;
  std::vector<ImageParam> inputs;
  Func output;
  AttentionStages attention;
  std::vector<Projection> projections; // q, k, v, out (layer only)
  std::vector<int64_t> projectionWidths;
  ImageParam kvLens;
};

// The algorithm for the spec: inputs, projections (layer), attention core.
BuiltPipeline buildPipeline(const AttentionSpec &s,
                            const hl::AttentionTiles &tiles) {
  BuiltPipeline bp;
  AttentionVars &v = bp.v;
  const Type T = elementType(s);
  const int64_t h = s.h, kv = s.n_kv, dk = s.d_k, dv = s.d_v, d = s.d;
  auto f32 = [&](Expr e) { return toF32(s, e); };

  hl::AttentionInputs in;
  if (s.mask.padding) {
    bp.kvLens = ImageParam(Int(32), 1, "kv_lens"); // one length per batch
    bp.kvLens.dim(0).set_min(0);
    in.kvLen(v.b) = bp.kvLens(v.b);
    in.hasKvLen = true;
  }

  if (s.op == Op::Sdpa) {
    ImageParam q(T, 4, "q"), k(T, 4, "k"), vv(T, 4, "v");
    fixDim(q, 0, dk, 1);
    fixDim(q, 1, h, dk);
    fixDim(k, 0, dk, 1);
    fixDim(k, 1, kv, dk);
    fixDim(vv, 0, dv, 1);
    fixDim(vv, 1, kv, dv);
    for (ImageParam *p : {&q, &k, &vv}) {
      p->dim(2).set_min(0);
      p->dim(3).set_min(0);
    }
    if (s.T)
      q.dim(2).set_extent(static_cast<int>(*s.T));
    if (s.T_kv) {
      k.dim(2).set_extent(static_cast<int>(*s.T_kv));
      vv.dim(2).set_extent(static_cast<int>(*s.T_kv));
    }
    if (s.B)
      for (ImageParam *p : {&q, &k, &vv})
        p->dim(3).set_extent(static_cast<int>(*s.B));
    in.q(v.c, v.hd, v.t, v.b) = f32(q(v.c, v.hd, v.t, v.b));
    in.k(v.c, v.g, v.t, v.b) = f32(k(v.c, v.g, v.t, v.b));
    in.v(v.c, v.g, v.t, v.b) = f32(vv(v.c, v.g, v.t, v.b));
    in.qRaw(v.c, v.hd, v.t, v.b) = q(v.c, v.hd, v.t, v.b);
    in.kRaw(v.c, v.g, v.t, v.b) = k(v.c, v.g, v.t, v.b);
    in.vRaw(v.c, v.g, v.t, v.b) = vv(v.c, v.g, v.t, v.b);
    in.tq = q.dim(2).extent();
    in.tkv = k.dim(2).extent();
    bp.attention = hl::defineAttention(s, in, tiles, v);
    bp.output = Func("out");
    bp.output(v.c, v.hd, v.t, v.b) =
        fromF32(s, T, bp.attention.out(v.c, v.hd, v.t, v.b));
    bp.inputs = {q, k, vv};
    bp.args = {q, k, vv};
  } else {
    ImageParam x(T, 3, "x");
    ImageParam wq(T, 2, "w_q"), wk(T, 2, "w_k"), wv(T, 2, "w_v"),
        wo(T, 2, "w_o");
    fixDim(x, 0, d, 1);
    x.dim(1).set_min(0);
    x.dim(2).set_min(0);
    if (s.T)
      x.dim(1).set_extent(static_cast<int>(*s.T));
    if (s.B)
      x.dim(2).set_extent(static_cast<int>(*s.B));
    // W [in, out] row-major is w(out_feature, in_feature) here.
    fixDim(wq, 0, h * dk, 1);
    fixDim(wq, 1, d, h * dk);
    fixDim(wk, 0, kv * dk, 1);
    fixDim(wk, 1, d, kv * dk);
    fixDim(wv, 0, kv * dv, 1);
    fixDim(wv, 1, d, kv * dv);
    fixDim(wo, 0, d, 1);
    fixDim(wo, 1, h * dv, d);
    bp.args = {x, wq, wk, wv, wo};
    bp.inputs = {x, wq, wk, wv, wo};
    Func bq("b_q_f"), bk("b_k_f"), bvf("b_v_f"), bo("b_o_f");
    if (s.bias) {
      ImageParam pbq(T, 1, "b_q"), pbk(T, 1, "b_k"), pbv(T, 1, "b_v"),
          pbo(T, 1, "b_o");
      fixDim(pbq, 0, h * dk, 1);
      fixDim(pbk, 0, kv * dk, 1);
      fixDim(pbv, 0, kv * dv, 1);
      fixDim(pbo, 0, d, 1);
      bq(v.n) = f32(pbq(v.n));
      bk(v.n) = f32(pbk(v.n));
      bvf(v.n) = f32(pbv(v.n));
      bo(v.n) = f32(pbo(v.n));
      for (ImageParam p : {pbq, pbk, pbv, pbo}) {
        bp.args.push_back(p);
        bp.inputs.push_back(p);
      }
    }
    Func xf("x_f"), wqf("w_q_f"), wkf("w_k_f"), wvf("w_v_f"), wof("w_o_f");
    Var kk("k");
    // Token index clamped: GEMM blocks of gemm_rows tokens run whole and
    // the rows past T are discarded.
    xf(kk, v.t, v.b) = f32(x(kk, min(v.t, x.dim(1).extent() - 1), v.b));
    wqf(v.n, kk) = f32(wq(v.n, kk));
    wkf(v.n, kk) = f32(wk(v.n, kk));
    wvf(v.n, kk) = f32(wv(v.n, kk));
    wof(v.n, kk) = f32(wo(v.n, kk));
    auto keepF32 = [](Expr e) { return e; };
    Projection pq =
        hl::defineProjection("q_proj", xf, d, wqf, bq, s.bias, keepF32, v);
    Projection pk =
        hl::defineProjection("k_proj", xf, d, wkf, bk, s.bias, keepF32, v);
    Projection pv =
        hl::defineProjection("v_proj", xf, d, wvf, bvf, s.bias, keepF32, v);
    // Split heads by feature columns: head i owns columns i*dk..(i+1)*dk-1.
    in.q(v.c, v.hd, v.t, v.b) =
        pq.out(v.hd * static_cast<int>(dk) + v.c, v.t, v.b);
    in.k(v.c, v.g, v.t, v.b) =
        pk.out(v.g * static_cast<int>(dk) + v.c, v.t, v.b);
    in.v(v.c, v.g, v.t, v.b) =
        pv.out(v.g * static_cast<int>(dv) + v.c, v.t, v.b);
    in.tq = x.dim(1).extent();
    in.tkv = x.dim(1).extent();
    bp.attention = hl::defineAttention(s, in, tiles, v);
    // Merge heads: column n of O is channel n % dv of head n / dv.
    Func merged("merged");
    merged(kk, v.t, v.b) =
        bp.attention.out(kk % static_cast<int>(dv), kk / static_cast<int>(dv),
                         min(v.t, x.dim(1).extent() - 1), v.b);
    Projection po = hl::defineProjection(
        "out_proj", merged, h * dv, wof, bo, s.bias,
        [&](Expr e) { return fromF32(s, T, e); }, v);
    bp.projections = {pq, pk, pv, po};
    bp.projectionWidths = {h * dk, kv * dk, kv * dv, d};
    bp.output = po.out;
  }
  if (s.mask.padding) {
    bp.args.push_back(bp.kvLens);
    bp.inputs.push_back(bp.kvLens);
  }

  // The output: dense within a token, any token and batch stride.
  OutputImageParam out = bp.output.output_buffer();
  if (s.op == Op::Sdpa) {
    out.dim(0).set_min(0).set_extent(static_cast<int>(dv)).set_stride(1);
    out.dim(1)
        .set_min(0)
        .set_extent(static_cast<int>(h))
        .set_stride(static_cast<int>(dv));
    out.dim(2).set_min(0);
    out.dim(3).set_min(0);
  } else {
    out.dim(0).set_min(0).set_extent(static_cast<int>(d)).set_stride(1);
    out.dim(1).set_min(0);
    out.dim(2).set_min(0);
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
    hl::scheduleAttentionCpu(bp.attention, bp.output, bp.v, s, p);
    return;
  }
  for (size_t i = 0; i < 3; ++i)
    hl::scheduleProjectionCpu(bp.projections[i], bp.v, bp.projectionWidths[i],
                              p, /*isOutput=*/false);
  bp.attention.out.compute_root();
  hl::scheduleAttentionCpu(bp.attention, bp.attention.out, bp.v, s, p);
  hl::scheduleProjectionCpu(bp.projections[3], bp.v, bp.projectionWidths[3], p,
                            /*isOutput=*/true);
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
}

// ---- the C ABI wrapper -------------------------------------------------

struct WrapperBuffer {
  std::string name; // C variable suffix and pipeline parameter name
  std::string data; // C expression of the data pointer
  int code, bits;   // halide_type_code_t and bits
  std::vector<std::string> extents, strides; // C expressions, inner first
};

std::string wrapperSource(const AttentionSpec &s, const std::string &symbol,
                          const std::string &target, bool gpu) {
  const std::string H = std::to_string(s.h), KV = std::to_string(s.n_kv),
                    DK = std::to_string(s.d_k), DV = std::to_string(s.d_v),
                    D = std::to_string(s.d);
  int code = s.dtype == DType::BF16
                 ? (bf16AsBits(s) ? 1 /* halide_type_uint */
                                  : 4 /* halide_type_bfloat */)
                 : 2 /* halide_type_float */;
  int bits = s.dtype == DType::F32 ? 32 : 16;
  auto stride = [](const std::string &given, const std::string &dense) {
    return "(" + given + " ? " + given + " : " + dense + ")";
  };
  std::vector<WrapperBuffer> bufs;
  std::string setup = "  const int64_t B = a->batch, TQ = a->t_q, TKV = " +
                      std::string(s.op == Op::Sdpa ? "a->t_kv" : "a->t_q") +
                      ";\n  (void)TKV;\n";
  if (s.op == Op::Sdpa) {
    setup += "  const int64_t q_ts = " +
             stride("a->q_token_stride", "(int64_t)" + H + " * " + DK) +
             ";\n  const int64_t k_ts = " +
             stride("a->k_token_stride", "(int64_t)" + KV + " * " + DK) +
             ";\n  const int64_t v_ts = " +
             stride("a->v_token_stride", "(int64_t)" + KV + " * " + DV) +
             ";\n  const int64_t o_ts = " +
             stride("a->out_token_stride", "(int64_t)" + H + " * " + DV) +
             ";\n";
    bufs.push_back(
        {"q",
         "a->q",
         code,
         bits,
         {DK, H, "TQ", "B"},
         {"1", DK, "q_ts", stride("a->q_batch_stride", "q_ts * TQ")}});
    bufs.push_back(
        {"k",
         "a->k",
         code,
         bits,
         {DK, KV, "TKV", "B"},
         {"1", DK, "k_ts", stride("a->k_batch_stride", "k_ts * TKV")}});
    bufs.push_back(
        {"v",
         "a->v",
         code,
         bits,
         {DV, KV, "TKV", "B"},
         {"1", DV, "v_ts", stride("a->v_batch_stride", "v_ts * TKV")}});
  } else {
    setup += "  const int64_t o_ts = " +
             stride("a->out_token_stride", "(int64_t)" + D) + ";\n";
    const std::string hdk = "(int64_t)" + H + " * " + DK,
                      kdk = "(int64_t)" + KV + " * " + DK,
                      kdv = "(int64_t)" + KV + " * " + DV,
                      hdv = "(int64_t)" + H + " * " + DV;
    bufs.push_back({"x",
                    "a->x",
                    code,
                    bits,
                    {D, "TQ", "B"},
                    {"1", D, "(int64_t)" + D + " * TQ"}});
    bufs.push_back({"w_q", "a->w_q", code, bits, {hdk, D}, {"1", hdk}});
    bufs.push_back({"w_k", "a->w_k", code, bits, {kdk, D}, {"1", kdk}});
    bufs.push_back({"w_v", "a->w_v", code, bits, {kdv, D}, {"1", kdv}});
    bufs.push_back({"w_o", "a->w_o", code, bits, {D, hdv}, {"1", D}});
    if (s.bias) {
      bufs.push_back({"b_q", "a->b_q", code, bits, {hdk}, {"1"}});
      bufs.push_back({"b_k", "a->b_k", code, bits, {kdk}, {"1"}});
      bufs.push_back({"b_v", "a->b_v", code, bits, {kdv}, {"1"}});
      bufs.push_back({"b_o", "a->b_o", code, bits, {D}, {"1"}});
    }
  }
  if (s.mask.padding)
    bufs.push_back({"kv_lens", "a->kv_lens", 0 /* int */, 32, {"B"}, {"1"}});
  if (s.op == Op::Sdpa)
    bufs.push_back(
        {"out",
         "a->out",
         code,
         bits,
         {DV, H, "TQ", "B"},
         {"1", DV, "o_ts", stride("a->out_batch_stride", "o_ts * TQ")}});
  else
    bufs.push_back({"out",
                    "a->out",
                    code,
                    bits,
                    {D, "TQ", "B"},
                    {"1", "o_ts", stride("a->out_batch_stride", "o_ts * TQ")}});

  std::string params, call, teardown;
  for (const WrapperBuffer &b : bufs) {
    const std::string n = std::to_string(b.extents.size());
    setup += "  halide_buffer_t buf_" + b.name +
             ";\n  halide_dimension_t dim_" + b.name + "[" + n +
             "];\n  {\n    const int64_t e[" + n + "] = {";
    for (size_t i = 0; i < b.extents.size(); ++i)
      setup += (i ? ", " : "") + b.extents[i];
    setup += "};\n    const int64_t s[" + n + "] = {";
    for (size_t i = 0; i < b.strides.size(); ++i)
      setup += (i ? ", " : "") + b.strides[i];
    setup += "};\n    mh_buffer(&buf_" + b.name + ", dim_" + b.name + ", " +
             b.data + ", " + std::to_string(b.code) + ", " +
             std::to_string(b.bits) + ", " + n + ", e, s);\n  }\n";
    params +=
        std::string(params.empty() ? "" : ", ") + "halide_buffer_t *" + b.name;
    call += std::string(call.empty() ? "" : ", ") + "&buf_" + b.name;
  }
  std::string includes;
  if (gpu) {
    // Host pointers (the default): Halide copies the inputs to the device
    // as needed; the output is copied back and every device allocation is
    // released before returning.
    std::string hostSetup, devSetup, hostDone, devDone;
    for (const WrapperBuffer &b : bufs) {
      if (b.name == "out")
        hostSetup += "    buf_out.flags = 0;\n";
      else
        hostSetup += "    buf_" + b.name + ".flags = 1; /* host dirty */\n";
    }
    hostDone += "    if (rc == 0)\n      rc = halide_copy_to_host(NULL, "
                "&buf_out);\n";
    for (const WrapperBuffer &b : bufs)
      hostDone += "    halide_device_free(NULL, &buf_" + b.name + ");\n";
    if (s.target.kind == TargetKind::Cuda) {
      // Device pointers (args.device_pointers): the tensors are wrapped
      // as CUDA allocations in place and the output stays on the device.
      // kv_lens is always a host pointer.
      includes = "#include <HalideRuntimeCuda.h>\n";
      for (const WrapperBuffer &b : bufs) {
        if (b.name == "kv_lens") {
          devSetup += "    buf_kv_lens.flags = 1; /* host dirty */\n";
          continue;
        }
        devSetup += "    buf_" + b.name +
                    ".host = NULL;\n"
                    "    if (halide_cuda_wrap_device_ptr(NULL, &buf_" +
                    b.name + ", (uint64_t)(uintptr_t)" + b.data +
                    ") != 0) {\n      snprintf(err, errlen, \"cannot wrap "
                    "the device pointer of " +
                    b.name + "\");\n      return -1;\n    }\n";
      }
      devDone += "    if (rc == 0)\n      rc = halide_device_sync(NULL, "
                 "&buf_out);\n";
      for (const WrapperBuffer &b : bufs)
        devDone += b.name == "kv_lens"
                       ? "    halide_device_free(NULL, &buf_kv_lens);\n"
                       : "    halide_cuda_detach_device_ptr(NULL, &buf_" +
                             b.name + ");\n";
      setup += "  if (a->device_pointers) {\n" + devSetup + "  } else {\n" +
               hostSetup + "  }\n";
      teardown += "  if (a->device_pointers) {\n" + devDone + "  } else {\n" +
                  hostDone + "  }\n";
    } else {
      setup += "  {\n" + hostSetup + "  }\n";
      teardown += "  {\n" + hostDone + "  }\n";
    }
  }
  return fillTemplate(templateText("halide_wrapper.c.in"),
                      {{"MHAGEN_VERSION", MHAGEN_VERSION},
                       {"SYMBOL", symbol},
                       {"TARGET", target},
                       {"PIPELINE_PARAMS", params},
                       {"BUFFER_SETUP", setup},
                       {"PIPELINE_CALL_ARGS", call},
                       {"BUFFER_TEARDOWN", teardown},
                       {"EXTRA_INCLUDES", includes}});
}

std::string llcPath() {
  const char *env = std::getenv("MHAGEN_LLC");
  return env && *env ? env : MHAGEN_LLC14;
}

// Bitcode -> object (and assembly when asked) with llc-14.
void codegenWithLlc(const TempDir &dir, const HalideTargetInfo &ti,
                    bool wantAsm, BackendResult &r) {
  std::vector<std::string> base = {llcPath(), "-O3", "-relocation-model=pic",
                                   "-mcpu=" + ti.llcCpu};
  if (!ti.llcAttrs.empty())
    base.push_back("-mattr=" + ti.llcAttrs);
  for (bool assembly : {false, true}) {
    if (assembly && !wantAsm)
      continue;
    std::vector<std::string> cmd = base;
    const std::string out = dir.file(assembly ? "kernel.s" : "kernel.o");
    cmd.push_back(assembly ? "-filetype=asm" : "-filetype=obj");
    cmd.push_back(dir.file("kernel.bc"));
    cmd.push_back("-o");
    cmd.push_back(out);
    ProcessResult pr = runProcess(cmd, 600);
    if (pr.exitCode != 0)
      throw BackendError("", "llc failed (" + commandLine(cmd) + "):\n" +
                                 pr.output);
    if (assembly)
      r.irs["asm"] = readFile(out);
    else
      r.object = readBinaryFile(out);
  }
}

ScheduleParams resolveParams(const ScheduleSpace &space,
                             const ScheduleParams &overrides) {
  ScheduleParams p = space.defaults;
  for (const auto &[k, val] : overrides) {
    if (!p.count(k)) {
      std::string known;
      for (const auto &d : space.params)
        known += (known.empty() ? "" : ", ") + d.name;
      throw BackendError("schedule", "unknown schedule parameter '" + k +
                                         "' for this spec; known: " + known);
    }
    p[k] = val;
  }
  std::string why = space.violation ? space.violation(p) : "";
  if (!why.empty())
    throw BackendError("schedule", why);
  return p;
}

BackendResult compileBuilt(BuiltPipeline &bp, const AttentionSpec &s,
                           const BackendOptions &opt,
                           const HalideTargetInfo &ti,
                           const ScheduleParams &params) {
  for (const std::string &e : opt.emit) {
    const bool ok = e == "stmt" || e == "html" || e == "llvm" || e == "asm" ||
                    (e == "ptx" && s.target.kind == TargetKind::Cuda);
    if (!ok)
      throw BackendError(
          "emit", e +
                      " is not produced by the halide backend for this "
                      "target; it emits stmt, html, llvm, asm" +
                      (e.rfind("mlir", 0) == 0
                           ? std::string(" (mlir IRs come from --backend mlir)")
                           : std::string(" and, for cuda targets, ptx")));
  }
  BackendResult r;
  r.schedule = params;
  r.cpuFeatures = ti.cpuFeatures;
  r.device = s.target.kind == TargetKind::Cuda     ? "cuda"
             : s.target.kind == TargetKind::OpenCL ? "opencl"
                                                   : "cpu";
  Halide::Target target(ti.halideTarget);
  std::vector<Argument> args = bp.args;
  Pipeline pipeline(bp.output);
  Module m = pipeline.compile_to_module(args, opt.symbol + "_pipeline", target,
                                        LinkageType::External);
  TempDir dir("mhagen-halide");
  std::map<OutputFileType, std::string> outs = {
      {OutputFileType::bitcode, dir.file("kernel.bc")}};
  if (opt.emit.count("stmt"))
    outs[OutputFileType::stmt] = dir.file("kernel.stmt");
  if (opt.emit.count("html"))
    outs[OutputFileType::stmt_html] = dir.file("kernel.html");
  if (opt.emit.count("llvm"))
    outs[OutputFileType::llvm_assembly] = dir.file("kernel.ll");
  m.compile(outs);
  if (opt.emit.count("stmt"))
    r.irs["stmt"] = readFile(dir.file("kernel.stmt"));
  if (opt.emit.count("html"))
    r.irs["html"] = readFile(dir.file("kernel.html"));
  if (opt.emit.count("llvm"))
    r.irs["llvm"] = readFile(dir.file("kernel.ll"));
  codegenWithLlc(dir, ti, opt.emit.count("asm") > 0, r);
  if (ti.gpu) {
    // The device code Halide embedded in the host object, also written
    // next to the artifact (PTX for CUDA, OpenCL C for OpenCL).
    std::string device = hl::deviceSource(m);
    const char *name = s.target.kind == TargetKind::Cuda ? "ptx" : "cl";
    if (device.empty())
      throw BackendError("", "Halide produced no device code");
    r.sideFiles[name] = device;
    if (opt.emit.count("ptx") && s.target.kind == TargetKind::Cuda)
      r.irs["ptx"] = device;
  }
  r.wrapperSource = wrapperSource(s, opt.symbol, s.target.str(), ti.gpu);
  r.wrapperIncludeDirs = {MHAGEN_HALIDE_INCLUDE_DIR};
  return r;
}

void checkSpec(const AttentionSpec &s) {
  if (s.target.kind == TargetKind::Host)
    throw BackendError("target", "host must be resolved before the backend "
                                 "runs (internal error)");
  if (s.op == Op::Layer && s.T && s.T_kv && *s.T != *s.T_kv)
    throw BackendError("Tkv", "a layer attends over its own tokens");
}

} // namespace

ScheduleSpace halideScheduleSpace(const AttentionSpec &s) {
  checkSpec(s);
  HalideTargetInfo ti = hl::halideTargetInfo(s.target, s.dtype);
  return ti.gpu ? hl::gpuScheduleSpace(s, ti) : hl::cpuScheduleSpace(s, ti);
}

BackendResult compileWithHalide(const AttentionSpec &s,
                                const BackendOptions &opt) {
  checkSpec(s);
  HalideTargetInfo ti = hl::halideTargetInfo(s.target, s.dtype);
  ScheduleSpace space = halideScheduleSpace(s);
  ScheduleParams params = resolveParams(space, opt.schedule);
  try {
    hl::AttentionTiles tiles = ti.gpu ? hl::gpuAttentionTiles(s, params)
                                      : hl::cpuAttentionTiles(s, params);
    BuiltPipeline bp = buildPipeline(s, tiles);
    if (ti.gpu)
      applyGpuSchedule(bp, s, params);
    else
      applyCpuSchedule(bp, s, params);
    return compileBuilt(bp, s, opt, ti, params);
  } catch (const Halide::CompileError &e) {
    throw BackendError("", std::string("Halide could not compile the "
                                       "pipeline: ") +
                               e.what());
  } catch (const Halide::InternalError &e) {
    throw BackendError("", std::string("Halide internal error: ") + e.what());
  } catch (const Halide::RuntimeError &e) {
    throw BackendError("", std::string("Halide error: ") + e.what());
  }
}

BackendResult compileWithHalideAutoscheduler(const AttentionSpec &s,
                                             const BackendOptions &opt,
                                             const std::string &name,
                                             double *scheduleSeconds) {
  checkSpec(s);
  HalideTargetInfo ti = hl::halideTargetInfo(s.target, s.dtype);
  if (ti.gpu)
    throw BackendError("target", "autoscheduler comparison is CPU-only");
  static const std::map<std::string, std::string> plugins = {
      {"Mullapudi2016", "libautoschedule_mullapudi2016.so"},
      {"Li2018", "libautoschedule_li2018.so"},
      {"Adams2019", "libautoschedule_adams2019.so"}};
  auto it = plugins.find(name);
  if (it == plugins.end())
    throw BackendError("autoscheduler",
                       "unknown autoscheduler " + name +
                           " (Mullapudi2016, Li2018, Adams2019)");
  try {
    load_plugin(std::string(MHAGEN_HALIDE_PLUGIN_DIR) + "/" + it->second);
    // The algorithm needs a tile shape; use the default one.
    ScheduleSpace space = hl::cpuScheduleSpace(s, ti);
    hl::AttentionTiles tiles = hl::cpuAttentionTiles(s, space.defaults);
    BuiltPipeline bp = buildPipeline(s, tiles);
    setEstimates(bp, s);
    Pipeline pipeline(bp.output);
    auto start = std::chrono::steady_clock::now();
    MachineParams mp(2, 1024 * 1024, 40); // 2 cores, 1 MiB L2
    pipeline.auto_schedule(name, Halide::Target(ti.halideTarget), mp);
    if (scheduleSeconds)
      *scheduleSeconds = std::chrono::duration<double>(
                             std::chrono::steady_clock::now() - start)
                             .count();
    BackendResult r;
    r.cpuFeatures = ti.cpuFeatures;
    Module m = pipeline.compile_to_module(bp.args, opt.symbol + "_pipeline",
                                          Halide::Target(ti.halideTarget),
                                          LinkageType::External);
    TempDir dir("mhagen-halide-as");
    m.compile({{OutputFileType::bitcode, dir.file("kernel.bc")}});
    codegenWithLlc(dir, ti, false, r);
    r.wrapperSource = wrapperSource(s, opt.symbol, s.target.str(), false);
    r.wrapperIncludeDirs = {MHAGEN_HALIDE_INCLUDE_DIR};
    return r;
  } catch (const Halide::Error &e) {
    throw BackendError("autoscheduler", e.what());
  }
}

} // namespace mhagen
