// The Halide backend: builds the pipeline for a spec (AttentionAlgorithm),
// schedules it (CpuSchedule / GpuSchedule), compiles it to LLVM bitcode with
// Halide 14, and turns the bitcode into an object with llc-14 for an
// explicit CPU model (see HalideTargets.h for why not Halide's own object).
#include "mhagen/halide/HalideBackend.h"

#include "CpuSchedule.h"
#include "GpuSchedule.h"
#include "HalidePipeline.h"
#include "HalideTargets.h"
#include "HalideWrapper.h"

#include "mhagen/backend/KernelBackend.h"
#include "mhagen/support/Process.h"
#include "mhagen/templates/Templates.h"

#include <Halide.h>

#include <algorithm>
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
using hl::BuiltPipeline;
using hl::HalideTargetInfo;

namespace {
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

std::vector<std::string> halideEmitKinds(const AttentionSpec &s) {
  std::vector<std::string> kinds = {"stmt", "html", "llvm", "asm"};
  if (s.target.kind == TargetKind::Cuda)
    kinds.push_back("ptx");
  return kinds;
}

// `longCall`: the long-call variant's pipeline (CpuSchedule.h,
// cpuLongCallParams), compiled into the same object as
// <symbol>_long_pipeline; the wrapper runs it for calls of at least
// long_min_tokens query tokens.
BackendResult compileBuilt(BuiltPipeline &bp, const AttentionSpec &s,
                           const BackendOptions &opt,
                           const HalideTargetInfo &ti,
                           const ScheduleParams &params,
                           BuiltPipeline *longCall = nullptr) {
  const std::vector<std::string> kinds = halideEmitKinds(s);
  checkEmitKinds(
      opt.emit,
      [&](const std::string &e) {
        return std::find(kinds.begin(), kinds.end(), e) != kinds.end();
      },
      [](const std::string &e) {
        return e +
               " is not produced by the halide backend for this "
               "target; it emits stmt, html, llvm, asm" +
               (e.rfind("mlir", 0) == 0
                    ? std::string(" (mlir IRs come from --backend mlir)")
                    : std::string(" and, for cuda targets, ptx"));
      });
  BackendResult r;
  r.schedule = params;
  r.cpuFeatures = ti.cpuFeatures;
  r.device = s.target.kind == TargetKind::Cuda     ? "cuda"
             : s.target.kind == TargetKind::OpenCL ? "opencl"
                                                   : "cpu";
  Halide::Target target(ti.halideTarget);
  std::vector<Argument> args = bp.args;
  Pipeline pipeline(hl::outputsOf(bp, s));
  Module m = pipeline.compile_to_module(args, opt.symbol + "_pipeline", target,
                                        LinkageType::External);
  std::optional<hl::LongCallRange> longCalls;
  if (longCall) {
    Pipeline longPipeline(hl::outputsOf(*longCall, s));
    Module lm = longPipeline.compile_to_module(longCall->args,
                                               opt.symbol + "_long_pipeline",
                                               target, LinkageType::External);
    m = link_modules(opt.symbol + "_pipelines", {m, lm});
    longCalls = hl::LongCallRange{params.at("long_min_tokens"), {}};
    if (params.at("long_tiles_per_task") > 1)
      longCalls->maxKeys = params.at("long_max_keys");
  }
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
  r.wrapperSource =
      hl::wrapperSource(s, opt.symbol, s.target.str(), ti.gpu, longCalls);
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
  ScheduleParams params = resolveSchedule(space, opt.schedule, "this spec");
  try {
    hl::AttentionTiles tiles = ti.gpu ? hl::gpuAttentionTiles(s, params)
                                      : hl::cpuAttentionTiles(s, params);
    BuiltPipeline bp =
        ti.gpu ? hl::buildPipeline(s, tiles)
               : hl::buildPipeline(s, tiles, hl::cpuDecodeTiles(s, params, ti),
                                   hl::cpuStreamRows(s, params));
    if (ti.gpu)
      hl::applyGpuSchedule(bp, s, params);
    else
      hl::applyCpuSchedule(bp, s, params);
    const std::optional<ScheduleParams> longParams =
        ti.gpu ? std::nullopt : hl::cpuLongCallParams(s, params);
    if (!longParams)
      return compileBuilt(bp, s, opt, ti, params);
    BuiltPipeline longCall =
        hl::buildPipeline(s, hl::cpuAttentionTiles(s, *longParams));
    hl::applyCpuSchedule(longCall, s, *longParams);
    return compileBuilt(bp, s, opt, ti, params, &longCall);
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

// Halide's autoschedulers instead of mhagen's schedules (for comparison;
// BackendOptions::autoscheduler).
BackendResult compileWithHalideAutoscheduler(const AttentionSpec &s,
                                             const BackendOptions &opt) {
  const std::string &name = opt.autoscheduler;
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
    BuiltPipeline bp = hl::buildPipeline(s, tiles);
    hl::setEstimates(bp, s);
    Pipeline pipeline(hl::outputsOf(bp, s));
    auto start = std::chrono::steady_clock::now();
    // Cores and L2 from the target's machine model.
    MachineParams mp(ti.machine->coresOrDefault(), ti.machine->l2Bytes, 40);
    pipeline.auto_schedule(name, Halide::Target(ti.halideTarget), mp);
    BackendResult r;
    r.scheduleSeconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    r.cpuFeatures = ti.cpuFeatures;
    Module m = pipeline.compile_to_module(bp.args, opt.symbol + "_pipeline",
                                          Halide::Target(ti.halideTarget),
                                          LinkageType::External);
    TempDir dir("mhagen-halide-as");
    m.compile({{OutputFileType::bitcode, dir.file("kernel.bc")}});
    codegenWithLlc(dir, ti, false, r);
    r.wrapperSource = hl::wrapperSource(s, opt.symbol, s.target.str(), false);
    r.wrapperIncludeDirs = {MHAGEN_HALIDE_INCLUDE_DIR};
    return r;
  } catch (const Halide::Error &e) {
    throw BackendError("autoscheduler", e.what());
  }
}

class HalideKernelBackend final : public KernelBackend {
public:
  Backend id() const override { return Backend::Halide; }
  std::string unsupportedReason(const AttentionSpec &s) const override {
    return refusalOf([&] {
      checkSpec(s);
      (void)hl::halideTargetInfo(s.target, s.dtype);
    });
  }
  ScheduleSpace scheduleSpace(const AttentionSpec &s) const override {
    return halideScheduleSpace(s);
  }
  std::vector<std::string> emitKinds(const AttentionSpec &s) const override {
    return halideEmitKinds(s);
  }
  BackendResult compile(const AttentionSpec &s,
                        const BackendOptions &o) const override {
    return o.autoscheduler.empty() ? compileWithHalide(s, o)
                                   : compileWithHalideAutoscheduler(s, o);
  }
};

} // namespace

std::unique_ptr<KernelBackend> makeHalideBackend() {
  return std::make_unique<HalideKernelBackend>();
}

} // namespace mhagen
