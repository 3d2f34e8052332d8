// The Halide backend: builds the pipeline for a spec (AttentionAlgorithm),
// schedules it (CpuSchedule / GpuSchedule), compiles it to LLVM bitcode with
// Halide 14, and turns the bitcode into an object with llc-14 for an
// explicit CPU model (see HalideTargets.h for why not Halide's own object).
#include "mhagen/halide/HalideBackend.h"

#include "AttentionAlgorithm.h"
#include "CpuSchedule.h"
#include "GpuSchedule.h"
#include "HalideTargets.h"

#include "mhagen/backend/AbiWrapper.h"
#include "mhagen/support/Process.h"
#include "mhagen/templates/Templates.h"

#include <Halide.h>

#include <chrono>
#include <cstdlib>
#include <optional>
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
  const abi::AbiShape shape = backend::abiShapeOf(s);
  const int rank = static_cast<int>(t.dims.size());
  for (int i = 0; i < rank; ++i) {
    Internal::Dimension dim = p.dim(rank - 1 - i);
    const abi::Dim &d = t.dims[i];
    dim.set_min(0);
    if (d.factors.size() == 1 && abi::isCallSize(d.factors[0])) {
      std::optional<int64_t> fixed;
      if (d.factors[0] == abi::Size::Batch)
        fixed = s.B;
      else if (d.factors[0] == abi::Size::TokensQ || s.op == Op::Layer)
        fixed = s.T;
      else
        fixed = s.T_kv;
      if (bindCallSizes && fixed)
        dim.set_extent(static_cast<int>(*fixed));
      continue;
    }
    dim.set_extent(static_cast<int>(abi::staticExtent(d, shape)));
    dim.set_stride(static_cast<int>(abi::denseInnerElements(t, shape, i + 1)));
  }
}

AbiParams abiParams(const AttentionSpec &s, const Type &dataType) {
  AbiParams out;
  for (const abi::TensorModel *t : abi::tensors(backend::abiShapeOf(s))) {
    if (t->output)
      continue;
    const bool data = t->elem == abi::Elem::Data;
    ImageParam p(data ? dataType : Int(32), static_cast<int>(t->dims.size()),
                 t->name);
    constrainDims(p, *t, s, /*bindCallSizes=*/data);
    out.byName.emplace(t->name, p);
    out.inOrder.push_back(p);
  }
  return out;
}

const abi::TensorModel &outputModel(const AttentionSpec &s) {
  for (const abi::TensorModel *t : abi::tensors(backend::abiShapeOf(s)))
    if (t->output)
      return *t;
  throw BackendError("", "the ABI model has no output for this op");
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

  AbiParams params = abiParams(s, T);
  auto param = [&](const char *name) { return params.byName.at(name); };
  bp.inputs = params.inOrder;
  bp.args.assign(params.inOrder.begin(), params.inOrder.end());

  hl::AttentionInputs in;
  if (s.mask.padding) {
    bp.kvLens = param("kv_lens"); // one length per batch
    in.kvLen(v.b) = bp.kvLens(v.b);
    in.hasKvLen = true;
  }

  if (s.op == Op::Sdpa) {
    ImageParam q = param("q"), k = param("k"), vv = param("v");
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
  } else {
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
  // The output: dense within a token, any token and batch stride.
  constrainDims(bp.output.output_buffer(), outputModel(s), s,
                /*bindCallSizes=*/false);
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

std::string wrapperSource(const AttentionSpec &s, const std::string &symbol,
                          const std::string &target, bool gpu) {
  const backend::WrapperPlan plan = backend::wrapperPlan(s);
  const backend::HalideBufferCall bufs = backend::halideBufferCall(s, plan);
  std::string setup = bufs.setup, teardown;
  std::string includes;
  if (gpu) {
    // Host pointers (the default): Halide copies the inputs to the device
    // as needed; the output is copied back and every device allocation is
    // released before returning.
    std::string hostSetup, devSetup, hostDone, devDone;
    for (const backend::WrapperTensor &b : plan.tensors) {
      const std::string name = b.model->name;
      if (b.model->output)
        hostSetup += "    buf_" + name + ".flags = 0;\n";
      else
        hostSetup += "    buf_" + name + ".flags = 1; /* host dirty */\n";
    }
    hostDone += "    if (rc == 0)\n      rc = halide_copy_to_host(NULL, "
                "&buf_out);\n";
    for (const backend::WrapperTensor &b : plan.tensors)
      hostDone += "    halide_device_free(NULL, &buf_" +
                  std::string(b.model->name) + ");\n";
    if (s.target.kind == TargetKind::Cuda) {
      // Device pointers (args.device_pointers): the tensors are wrapped
      // as CUDA allocations in place and the output stays on the device.
      // Integer vectors (kv_lens) are always host pointers.
      includes = "#include <HalideRuntimeCuda.h>\n";
      for (const backend::WrapperTensor &b : plan.tensors) {
        const std::string name = b.model->name;
        if (b.model->elem == abi::Elem::Int32) {
          devSetup += "    buf_" + name + ".flags = 1; /* host dirty */\n";
          continue;
        }
        devSetup += "    buf_" + name +
                    ".host = NULL;\n"
                    "    if (halide_cuda_wrap_device_ptr(NULL, &buf_" +
                    name + ", (uint64_t)(uintptr_t)" + b.data +
                    ") != 0) {\n      snprintf(err, errlen, \"cannot wrap "
                    "the device pointer of " +
                    name + "\");\n      return -1;\n    }\n";
      }
      devDone += "    if (rc == 0)\n      rc = halide_device_sync(NULL, "
                 "&buf_out);\n";
      for (const backend::WrapperTensor &b : plan.tensors)
        devDone += b.model->elem == abi::Elem::Int32
                       ? "    halide_device_free(NULL, &buf_" +
                             std::string(b.model->name) + ");\n"
                       : "    halide_cuda_detach_device_ptr(NULL, &buf_" +
                             std::string(b.model->name) + ");\n";
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
                       {"PIPELINE_PARAMS", bufs.params},
                       {"BUFFER_SETUP", setup},
                       {"PIPELINE_CALL_ARGS", bufs.callArgs},
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
