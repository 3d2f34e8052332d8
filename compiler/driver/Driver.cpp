// The driver: resolves targets, runs the spec's backend (BackendRegistry.h)
// and turns its result into the artifacts, moved into place only when every
// spec succeeded. Manifest and header: Artifacts.cpp; C toolchain, bundles
// and shared libraries: Toolchain.cpp.
#include "mhagen/driver/Driver.h"

#include "Toolchain.h"

#include "mhagen/abi.h"
#include "mhagen/abi_model.hpp"
#include "mhagen/backend/AbiWrapper.h"
#include "mhagen/driver/BackendRegistry.h"
#include "mhagen/machine/MachineModel.h"
#include "mhagen/runtime.h"
#include "mhagen/support/Process.h"
#include "mhagen/templates/Templates.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include <unistd.h>

namespace mhagen {

namespace fs = std::filesystem;

// ---- targets ---------------------------------------------------------------

// Which named targets this CPU runs: every feature of the target's machine
// model (mhagen/machine/MachineModel.h), as the runtime sees the CPU.
Target resolveTarget(const Target &t, DType dtype) {
  if (t.kind != TargetKind::Host)
    return t;
  Target r;
  if (dtype == DType::BF16 && hostRuns(TargetKind::Avx512Amx))
    r.kind = TargetKind::Avx512Amx;
  else if (dtype == DType::BF16 && hostRuns(TargetKind::Avx512Bf16))
    r.kind = TargetKind::Avx512Bf16;
  else if (hostRuns(TargetKind::Avx512))
    r.kind = TargetKind::Avx512;
  else if (hostRuns(TargetKind::Avx2))
    r.kind = TargetKind::Avx2;
  else if (hostRuns(TargetKind::Neon))
    r.kind = TargetKind::Neon;
  else
    throw DriverError(
        "target host: this CPU has neither AVX2+FMA+F16C (x86-64) nor "
        "Advanced SIMD with FP16 and the dot product (AArch64), the oldest "
        "instruction sets mhagen generates for (it has: " +
        std::string(mhagen_cpu_features()) + ")");
  r.machine = std::make_shared<const MachineModel>(hostMachine(r.kind));
  return r;
}

std::string targetUnavailableReason(const Target &t) {
  switch (t.kind) {
  case TargetKind::Host:
  case TargetKind::Avx2:
    return hostRuns(TargetKind::Avx2) ? "" : "the CPU lacks AVX2, FMA or F16C";
  case TargetKind::Avx512:
    return hostRuns(TargetKind::Avx512)
               ? ""
               : "the CPU lacks AVX-512 F/CD/BW/DQ/VL (or the OS "
                 "does not save ZMM state)";
  case TargetKind::Avx512Bf16:
    return hostRuns(TargetKind::Avx512Bf16)
               ? ""
               : "the CPU lacks AVX512_BF16 or AVX512_VNNI";
  case TargetKind::Avx512Amx:
    return hostRuns(TargetKind::Avx512Amx)
               ? ""
               : "the CPU lacks AMX-BF16 (or the OS does not enable AMX "
                 "tile state)";
  case TargetKind::Neon:
    return hostRuns(TargetKind::Neon)
               ? ""
               : "the CPU is not AArch64 with ASIMD, FP16 and the dot "
                 "product (kernels for it are generated here and run there, "
                 "or under qemu-aarch64)";
  case TargetKind::Cuda:
  case TargetKind::OpenCL:
    return ""; // generation needs no device; the runtime checks for one
  }
  return "";
}

std::string variantSymbol(const AttentionSpec &s) {
  std::string sym = s.kernelName() + "_" + s.target.str();
  if (s.backend != Backend::Halide)
    sym += std::string("_") + toString(s.backend);
  for (char &c : sym)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_')
      c = '_';
  return sym;
}

BackendResult runBackend(const AttentionSpec &s, const BackendOptions &o) {
  return kernelBackend(s.backend).compile(s, o);
}

namespace {

// Compiles the wrapper and links it with the backend object into one
// relocatable object in `dir`.
std::string buildObject(const TempDir &dir, const AttentionSpec &spec,
                        const std::string &symbol, const BackendResult &r,
                        const std::string &wrapper) {
  // A backend whose code travels inside the wrapper (the cuda backend's
  // device image) hands over no object of its own.
  const std::string backendObj =
      r.object.empty() ? std::string() : dir.file(symbol + ".backend.o");
  if (!backendObj.empty())
    writeFile(backendObj, std::string(r.object.begin(), r.object.end()));
  const std::string wrapperC = dir.file(symbol + ".wrapper.c");
  writeFile(wrapperC, wrapper);
  const std::string wrapperObj = dir.file(symbol + ".wrapper.o");
  std::vector<std::string> cc = cCompiler(machineOf(spec.target));
  std::vector<std::string> compile = cc;
  for (const char *a : {"-std=c11", "-O2", "-fPIC", "-c"})
    compile.push_back(a);
  compile.push_back("-I" + runtimeIncludeDir());
  for (const std::string &inc : r.wrapperIncludeDirs)
    compile.push_back("-I" + inc);
  compile.push_back(wrapperC);
  compile.push_back("-o");
  compile.push_back(wrapperObj);
  runTool(compile, "compiling the ABI wrapper of " + symbol);
  const std::string obj = dir.file(symbol + ".o");
  std::vector<std::string> link = cc;
  for (const char *a : {"-r", "-nostdlib", "-o"})
    link.push_back(a);
  link.push_back(obj);
  if (!backendObj.empty())
    link.push_back(backendObj);
  link.push_back(wrapperObj);
  runTool(link, "linking the object of " + symbol);
  return obj;
}

std::string irExtension(const std::string &name) {
  if (name == "stmt")
    return ".stmt";
  if (name == "html")
    return ".stmt.html";
  if (name == "llvm")
    return ".ll";
  if (name == "asm")
    return ".s";
  if (name == "ptx")
    return ".ptx";
  if (name.rfind("mlir", 0) == 0)
    return "." + name; // mlir, mlir.<stage>
  return "." + name;
}

} // namespace

std::vector<GeneratedKernel>
generateKernels(const std::vector<AttentionSpec> &specs,
                const GenerateOptions &opt) {
  std::error_code ec;
  // Everything is built in a scratch directory and moved into outDir only
  // when every spec succeeded; outDir itself is created only then, so a
  // refused spec leaves nothing behind.
  TempDir scratch("mhagen-gen");
  std::vector<GeneratedKernel> out;
  std::vector<std::pair<std::string, std::string>> moves; // scratch -> final
  std::set<std::string> symbols;
  for (const AttentionSpec &input : specs) {
    AttentionSpec s = input;
    s.target = resolveTarget(s.target, s.dtype);
    GeneratedKernel k;
    k.spec = s;
    k.symbol = variantSymbol(s);
    if (!symbols.insert(k.symbol).second)
      throw DriverError("two specs generate the same kernel " + k.symbol +
                            " (same name, target " + s.target.str() +
                            " and backend " + toString(s.backend) +
                            "); give them different names",
                        true);
    BackendOptions bo;
    bo.symbol = k.symbol;
    bo.emit = opt.emit;
    bo.schedule = opt.schedule;
    bo.autoscheduler = opt.autoscheduler;
    BackendResult r;
    try {
      r = runBackend(s, bo);
    } catch (const BackendError &e) {
      throw DriverError("spec " + s.kernelName() + " (target " +
                            s.target.str() + ", backend " +
                            toString(s.backend) + "): " + e.what(),
                        true);
    }
    ScheduleSource source = opt.scheduleSource;
    if (!opt.autoscheduler.empty()) {
      source.kind = "autoscheduler";
      char note[128];
      std::snprintf(note, sizeof note, "%s, %.2f s to schedule",
                    opt.autoscheduler.c_str(), r.scheduleSeconds);
      source.note = note;
    }
    k.manifest = makeManifest(s, k.symbol, r, source);
    const std::string manifestJson = k.manifest.toJson();
    const std::string wrapper = fillTemplate(
        r.wrapperSource, {{"MANIFEST_LITERAL", cStringLiteral(manifestJson)}});
    const std::string obj = buildObject(scratch, s, k.symbol, r, wrapper);
    const std::string header = scratch.file(k.symbol + ".h");
    writeFile(header, kernelHeader(s, k.symbol));
    const std::string manifest = scratch.file(k.symbol + ".json");
    writeFile(manifest, manifestJson);
    const fs::path dir(opt.outDir);
    k.objectPath = (dir / (k.symbol + ".o")).string();
    k.headerPath = (dir / (k.symbol + ".h")).string();
    k.manifestPath = (dir / (k.symbol + ".json")).string();
    moves.push_back({obj, k.objectPath});
    moves.push_back({header, k.headerPath});
    moves.push_back({manifest, k.manifestPath});
    auto addFile = [&](const std::string &name, const std::string &text) {
      const std::string file = k.symbol + irExtension(name);
      writeFile(scratch.file(file), text);
      k.irPaths[name] = (dir / file).string();
      moves.push_back({scratch.file(file), k.irPaths[name]});
    };
    for (const auto &[name, text] : r.irs)
      addFile(name, text);
    for (const auto &[name, text] : r.sideFiles)
      if (!r.irs.count(name))
        addFile(name, text);
    out.push_back(std::move(k));
  }
  if (fs::exists(opt.outDir) && !fs::is_directory(opt.outDir))
    throw DriverError("output directory " + opt.outDir +
                      " is a file, not a directory: give -o a directory");
  fs::create_directories(opt.outDir, ec);
  if (!fs::is_directory(opt.outDir))
    throw DriverError("output directory " + opt.outDir +
                      " does not exist and cannot be created" +
                      (ec ? " (" + ec.message() + ")" : std::string()));
  // Move into place: each file appears whole (rename within one file
  // system; otherwise copy to a temporary name next to it, then rename).
  for (const auto &[from, to] : moves) {
    fs::rename(from, to, ec);
    if (ec) {
      writeFileAtomic(to, readFile(from));
      ec.clear();
    }
  }
  return out;
}

} // namespace mhagen
