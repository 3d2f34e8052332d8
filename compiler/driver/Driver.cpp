#include "mhagen/driver/Driver.h"

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

#ifndef MHAGEN_VERSION
#define MHAGEN_VERSION "0.0.0"
#endif
#ifndef MHAGEN_BUILD_RUNTIME_INCLUDE_DIR
#define MHAGEN_BUILD_RUNTIME_INCLUDE_DIR ""
#endif
#ifndef MHAGEN_BUILD_RUNTIME_LIB_DIR
#define MHAGEN_BUILD_RUNTIME_LIB_DIR ""
#endif

namespace mhagen {

namespace fs = std::filesystem;

// ---- targets ---------------------------------------------------------------

// Which named targets this CPU runs: every feature of the target's machine
// model (mhagen/machine/MachineModel.h), as the runtime sees the CPU.
Target resolveTarget(const Target &t, DType dtype) {
  if (t.kind != TargetKind::Host)
    return t;
  Target r;
  if (dtype == DType::BF16 && hostRuns(TargetKind::Avx512Bf16))
    r.kind = TargetKind::Avx512Bf16;
  else if (hostRuns(TargetKind::Avx512))
    r.kind = TargetKind::Avx512;
  else if (hostRuns(TargetKind::Avx2))
    r.kind = TargetKind::Avx2;
  else
    throw DriverError(
        "target host: this CPU lacks AVX2+FMA+F16C, the oldest instruction "
        "set mhagen generates for (it has: " +
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
  case TargetKind::Cuda:
  case TargetKind::OpenCL:
    return ""; // generation needs no device; the runtime checks for one
  }
  return "";
}

std::string variantSymbol(const AttentionSpec &s) {
  std::string sym = s.kernelName() + "_" + s.target.str();
  if (s.backend == Backend::Mlir)
    sym += "_mlir";
  for (char &c : sym)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_')
      c = '_';
  return sym;
}

// ---- toolchain
// ---------------------------------------------------------------

std::string runtimeIncludeDir() {
  fs::path installed = fs::path(executableDir()) / ".." / "include";
  if (fileExists((installed / "mhagen" / "abi.h").string()))
    return fs::weakly_canonical(installed).string();
  return MHAGEN_BUILD_RUNTIME_INCLUDE_DIR;
}

std::string runtimeLibraryDir() {
  for (const char *lib : {"lib", "lib64"}) {
    fs::path installed = fs::path(executableDir()) / ".." / lib;
    if (fileExists((installed / "libmhagen_runtime.so").string()))
      return fs::weakly_canonical(installed).string();
  }
  return MHAGEN_BUILD_RUNTIME_LIB_DIR;
}

// The C compiler for wrappers and links: $MHAGEN_CC, else $CC, else cc.
static std::vector<std::string> cCompiler() {
  const char *env = std::getenv("MHAGEN_CC");
  if (!env || !*env)
    env = std::getenv("CC");
  std::string cc = env && *env ? env : "cc";
  std::vector<std::string> argv;
  std::istringstream ss(cc);
  for (std::string w; ss >> w;)
    argv.push_back(w);
  return argv;
}

static void runTool(std::vector<std::string> argv, const std::string &what) {
  ProcessResult r = runProcess(argv, 600);
  if (r.exitCode != 0)
    throw DriverError(what + " failed (" + commandLine(argv) + "):\n" +
                      r.output);
}

// ---- manifest and header -------------------------------------------------

KernelManifest makeManifest(const AttentionSpec &s, const std::string &symbol,
                            const BackendResult &result,
                            const ScheduleSource &source) {
  KernelManifest m;
  m.abiVersion = MHAGEN_ABI_VERSION;
  m.mhagenVersion = MHAGEN_VERSION;
  m.symbol = symbol;
  m.kernelName = s.kernelName();
  m.spec.canonical = s.canonical();
  m.spec.semanticKey = s.semanticKey();
  m.spec.hash = s.hash();
  m.spec.op = toString(s.op);
  m.spec.d = s.d;
  m.spec.h = s.h;
  m.spec.d_k = s.d_k;
  m.spec.d_v = s.d_v;
  m.spec.n_kv = s.n_kv;
  m.spec.causal = s.mask.isCausal();
  m.spec.window = s.mask.window;
  m.spec.padding = s.mask.padding;
  m.spec.dtype = toString(s.dtype);
  m.spec.bias = s.bias;
  m.spec.scale = s.effectiveScale();
  m.spec.T = s.T.value_or(0);
  m.spec.T_kv = s.op == Op::Layer ? s.T.value_or(0) : s.T_kv.value_or(0);
  m.spec.B = s.B.value_or(0);
  m.target = s.target.str();
  m.backend = toString(s.backend);
  m.device = result.device;
  m.cpuFeatures = result.cpuFeatures;
  m.scheduleJson = scheduleParamsToJson(result.schedule);
  nlohmann::ordered_json t;
  t["source"] = source.kind;
  if (!source.database.empty())
    t["database"] = fs::path(source.database).filename().string();
  if (!source.trialId.empty())
    t["trial"] = source.trialId;
  if (source.medianMs > 0)
    t["median_ms"] = source.medianMs;
  if (!source.note.empty())
    t["note"] = source.note;
  m.tuningJson = t.dump();
  return m;
}

static std::string upper(std::string s) {
  for (char &c : s)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// Joins items with ", ", starting a new line (with `indent`) before an item
// that would pass column 78; `column` is where the first item starts.
static std::string wrapList(const std::vector<std::string> &items,
                            size_t column, const std::string &indent) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string sep = i ? ", " : "";
    if (i && column + sep.size() + items[i].size() > 78) {
      out += ",\n" + indent;
      column = indent.size();
    } else {
      out += sep;
      column += sep.size();
    }
    out += items[i];
    column += items[i].size();
  }
  return out;
}

std::string kernelHeader(const AttentionSpec &s, const std::string &symbol) {
  const std::string T = s.dtype == DType::F32 ? "float" : "uint16_t";
  std::string comment;
  std::istringstream lines(s.canonical());
  for (std::string line; std::getline(lines, line);)
    comment += " *   " + line + "\n";
  const std::string elem =
      s.dtype == DType::F32
          ? "float"
          // No "/* */" here: this text sits inside the header's comment.
          : std::string("uint16_t holding ") + toString(s.dtype) + " bits";
  // A convenience entry point for dense tensors: the ABI model's tensors
  // as parameters (inputs, outputs, the sizes, then integer vectors).
  const bool layer = s.op == Op::Layer;
  std::vector<std::string> docs, params;
  std::string sets, ints, intSets;
  for (const abi::TensorModel *t : abi::tensors(backend::abiShapeOf(s))) {
    const std::string n = t->name;
    if (t->elem == abi::Elem::Int32) {
      ints += ",\n    const int32_t *" + n;
      intSets += "  a." + n + " = " + n + ";\n";
      continue;
    }
    docs.push_back(n + " " + abi::dimsText(*t));
    params.push_back((t->output ? "" : "const ") + T + " *" + n);
    sets += "  a." + n + " = " + n + ";\n";
  }
  std::string conv =
      "/* Dense tensors: " + wrapList(docs, 18, " * ") + ";\n * elements are " +
      elem + ". */\nstatic inline int " + symbol +
      (layer ? "_layer" : "_sdpa") + "(\n    " + wrapList(params, 4, "    ") +
      ",\n    int64_t batch, " +
      (layer ? "int64_t t" : "int64_t t_q, int64_t t_kv") + ints +
      ") {\n  mhagen_call_args a;\n  memset(&a, 0, sizeof a);\n"
      "  a.abi_version = MHAGEN_ABI_VERSION;\n  a.batch = batch;\n" +
      (layer ? "  a.t_q = t;\n" : "  a.t_q = t_q;\n  a.t_kv = t_kv;\n") + sets +
      intSets + "  return " + symbol + "(&a);\n}\n";
  conv = "#include <string.h>\n\n" + conv;
  std::string desc = s.op == Op::Sdpa
                         ? "scaled dot-product attention core (op = sdpa)"
                         : "full multi-head attention layer (op = layer)";
  return fillTemplate(templateText("kernel_header.h.in"),
                      {{"MHAGEN_VERSION", MHAGEN_VERSION},
                       {"SYMBOL", symbol},
                       {"OP_DESCRIPTION", desc},
                       {"TARGET", s.target.str()},
                       {"BACKEND", toString(s.backend)},
                       {"HASH", s.hash()},
                       {"SPEC_COMMENT", comment},
                       {"GUARD", upper(symbol)},
                       {"H", std::to_string(s.h)},
                       {"KV", std::to_string(s.n_kv)},
                       {"DK", std::to_string(s.d_k)},
                       {"DV", std::to_string(s.d_v)},
                       {"D", std::to_string(s.d)},
                       {"CONVENIENCE", conv}});
}

// ---- generation ------------------------------------------------------------

BackendResult runBackend(const AttentionSpec &s, const BackendOptions &o) {
  return kernelBackend(s.backend).compile(s, o);
}

namespace {

// Compiles the wrapper and links it with the backend object into one
// relocatable object in `dir`.
std::string buildObject(const TempDir &dir, const std::string &symbol,
                        const BackendResult &r, const std::string &wrapper) {
  const std::string backendObj = dir.file(symbol + ".backend.o");
  writeFile(backendObj, std::string(r.object.begin(), r.object.end()));
  const std::string wrapperC = dir.file(symbol + ".wrapper.c");
  writeFile(wrapperC, wrapper);
  const std::string wrapperObj = dir.file(symbol + ".wrapper.o");
  std::vector<std::string> cc = cCompiler();
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
    const std::string obj = buildObject(scratch, k.symbol, r, wrapper);
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
  fs::create_directories(opt.outDir, ec);
  if (!fs::is_directory(opt.outDir))
    throw DriverError("output directory " + opt.outDir +
                      " does not exist and cannot be created");
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

void writeBundle(const std::vector<GeneratedKernel> &kernels,
                 const std::string &dir, const std::string &name) {
  if (kernels.empty())
    throw DriverError("no kernels to bundle");
  const fs::path base = fs::path(dir) / name;
  const std::string obj = base.string() + ".o";
  const std::string tmp = obj + ".tmp." + std::to_string(::getpid());
  std::vector<std::string> link = cCompiler();
  for (const char *a : {"-r", "-nostdlib", "-o"})
    link.push_back(a);
  link.push_back(tmp);
  for (const GeneratedKernel &k : kernels)
    link.push_back(k.objectPath);
  try {
    runTool(link, "bundling the kernel objects into " + obj);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  std::error_code ec;
  fs::rename(tmp, obj, ec);
  if (ec)
    throw DriverError("cannot move " + tmp + " to " + obj);
  std::string guard = "MHAGEN_BUNDLE_" + upper(name) + "_H";
  for (char &c : guard)
    if (!std::isalnum(static_cast<unsigned char>(c)))
      c = '_';
  std::string h = "/* Generated by mhagen " MHAGEN_VERSION
                  ". Do not edit. The kernels of bundle " +
                  name + ". */\n#ifndef " + guard + "\n#define " + guard +
                  "\n\n";
  for (const GeneratedKernel &k : kernels)
    h += "#include \"" + fs::path(k.headerPath).filename().string() + "\"\n";
  h += "\n#endif\n";
  writeFileAtomic(base.string() + ".h", h);
}

void linkSharedLibrary(const std::vector<GeneratedKernel> &kernels,
                       const std::string &path) {
  TempDir dir("mhagen-so");
  std::string decls, list;
  for (const GeneratedKernel &k : kernels) {
    decls += "extern const mhagen_kernel_desc " + k.symbol + "_desc;\n";
    list += "    &" + k.symbol + "_desc,\n";
  }
  const std::string indexC = dir.file("index.c");
  writeFile(indexC, fillTemplate(templateText("library_index.c.in"),
                                 {{"MHAGEN_VERSION", MHAGEN_VERSION},
                                  {"DESC_DECLS", decls},
                                  {"DESC_LIST", list}}));
  std::vector<std::string> cc = cCompiler();
  std::vector<std::string> compile = cc;
  for (const char *a : {"-std=c11", "-O2", "-fPIC", "-c"})
    compile.push_back(a);
  compile.push_back("-I" + runtimeIncludeDir());
  compile.push_back(indexC);
  compile.push_back("-o");
  compile.push_back(dir.file("index.o"));
  runTool(compile, "compiling the library index");
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::vector<std::string> link = cc;
  link.push_back("-shared");
  link.push_back("-o");
  link.push_back(tmp);
  for (const GeneratedKernel &k : kernels)
    link.push_back(k.objectPath);
  link.push_back(dir.file("index.o"));
  const std::string libDir = runtimeLibraryDir();
  link.push_back("-L" + libDir);
  link.push_back("-Wl,-rpath," + libDir);
  link.push_back("-lmhagen_runtime");
#ifdef MHAGEN_OPENMP_LIBRARY
  // MLIR kernels run their parallel loops on LLVM's OpenMP runtime.
  for (const GeneratedKernel &k : kernels)
    if (k.spec.backend == Backend::Mlir) {
      const std::string omp = MHAGEN_OPENMP_LIBRARY;
      link.push_back(omp);
      link.push_back("-Wl,-rpath," + fs::path(omp).parent_path().string());
      break;
    }
#endif
  link.push_back("-lpthread");
  link.push_back("-ldl");
  link.push_back("-lm");
  try {
    runTool(link, "linking the shared library " + path);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw DriverError("cannot move " + tmp + " to " + path + ": " +
                      ec.message());
  }
}

} // namespace mhagen
