//===- MlirBackend.cpp - AttentionSpec -> object file through MLIR --------===//
//
// spec -> mha module (KernelModule.cpp) -> the pass pipeline of
// MhaPasses.h, stage by stage -> LLVM IR -> LLVM 19 -O3 -> object code for
// the target's CPU. The ABI wrapper (templates/mlir_wrapper.c.in) turns
// mhagen_call_args into the memref descriptors of the function's C
// interface, so the artifact has exactly the ABI of a Halide kernel.
#include "mhagen/mlir/MlirBackend.h"

#include "KernelModule.h"
#include "mhagen/backend/AbiWrapper.h"
#include "mhagen/machine/MachineModel.h"
#include "mhagen/mlir/MhaDialect.h"
#include "mhagen/mlir/MhaPasses.h"
#include "mhagen/templates/Templates.h"

#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/Transforms/Utils/Cloning.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <set>

#ifndef MHAGEN_VERSION
#define MHAGEN_VERSION "0.0.0"
#endif

namespace mhagen {

namespace {

// ---- targets ---------------------------------------------------------------

// The CPU this backend compiles for: the target's machine model
// (mhagen/machine/MachineModel.h); GPU targets are refused.
const MachineModel &mlirMachine(const AttentionSpec &s) {
  switch (s.target.kind) {
  case TargetKind::Host:
    throw BackendError("target", "host must be resolved before the backend "
                                 "runs");
  case TargetKind::Cuda:
  case TargetKind::OpenCL:
    throw BackendError(
        "target", s.target.str() + ": the mlir backend generates CPU code only "
                                   "(avx2, avx512, avx512_bf16, avx512_amx, "
                                   "neon); use "
                                   "--backend halide for GPU targets");
  default:
    return machineOf(s.target);
  }
}

// ---- schedule
// ----------------------------------------------------------------

mha::PipelineOptions pipelineOptions(const ScheduleParams &p,
                                     const MachineModel &machine) {
  mha::PipelineOptions o;
  o.queryTile = p.at("query_tile");
  o.keyTile = p.at("key_tile");
  o.vectorWidth = p.at("vector_width");
  o.rows = p.at("rows");
  o.cols = p.at("cols");
  if (p.count("gemm_rows")) {
    o.gemmRows = p.at("gemm_rows");
    o.gemmCols = p.at("gemm_cols");
    o.gemmDepth = p.at("gemm_depth");
  }
  if (p.count("decode_tokens")) {
    o.decodeTokens = p.at("decode_tokens");
    // Tasks per core times the cores of the target's machine model.
    o.splitTasks = p.at("split_tasks") * machine.coresOrDefault();
    o.splitMinKeys = p.at("split_min_keys");
  }
  if (p.count("decode_key_tile"))
    o.decodeKeyTile = p.at("decode_key_tile");
  return o;
}

// ---- MLIR ------------------------------------------------------------------

void registerEverything(mlir::DialectRegistry &registry) {
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  mlir::registerAllToLLVMIRTranslations(registry);
  registry.insert<mhagen::mha::MhaDialect>();
}

std::string printModule(mlir::ModuleOp m) {
  std::string text;
  llvm::raw_string_ostream os(text);
  m.print(os);
  return text;
}

// Collects MLIR diagnostics so that a failure reports what MLIR said.
struct DiagnosticCollector {
  explicit DiagnosticCollector(mlir::MLIRContext &ctx)
      : handler(&ctx, [this](mlir::Diagnostic &d) {
          if (d.getSeverity() == mlir::DiagnosticSeverity::Error) {
            llvm::raw_string_ostream os(text);
            os << d.getLocation() << ": " << d << "\n";
            for (const mlir::Diagnostic &n : d.getNotes())
              os << "  note: " << n.str().substr(0, 400) << "\n";
          }
          return mlir::success();
        }) {}
  std::string text;
  mlir::ScopedDiagnosticHandler handler;
};

// ---- LLVM
// --------------------------------------------------------------------

std::unique_ptr<llvm::TargetMachine> targetMachine(const MachineModel &t) {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeX86TargetInfo();
    LLVMInitializeX86Target();
    LLVMInitializeX86TargetMC();
    LLVMInitializeX86AsmPrinter();
    LLVMInitializeAArch64TargetInfo();
    LLVMInitializeAArch64Target();
    LLVMInitializeAArch64TargetMC();
    LLVMInitializeAArch64AsmPrinter();
  });
  const std::string &triple = t.llvmTriple;
  std::string error;
  const llvm::Target *target =
      llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target)
    throw BackendError("",
                       "LLVM 19 has no target for " + triple + ": " + error);
  llvm::TargetOptions options;
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      triple, t.llvmCpu, t.llvmFeatures, options, llvm::Reloc::PIC_,
      std::nullopt, llvm::CodeGenOptLevel::Aggressive));
  if (!tm)
    throw BackendError("",
                       "cannot create an LLVM target machine for " + t.llvmCpu);
  return tm;
}

std::vector<char> emit(llvm::TargetMachine &tm, llvm::Module &m,
                       llvm::CodeGenFileType type) {
  llvm::SmallVector<char, 0> buffer;
  llvm::raw_svector_ostream os(buffer);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr, type))
    throw BackendError("", "LLVM cannot emit this file type");
  pm.run(m);
  return std::vector<char>(buffer.begin(), buffer.end());
}

// ---- the ABI wrapper
// ------------------------------------------------------------

std::string wrapperSource(const AttentionSpec &s, const std::string &symbol,
                          const std::string &fn) {
  const backend::MemrefCall c =
      backend::memrefCall(backend::wrapperPlan(s), fn);
  return fillTemplate(templateText("mlir_wrapper.c.in"),
                      {{"MHAGEN_VERSION", MHAGEN_VERSION},
                       {"SYMBOL", symbol},
                       {"TARGET", s.target.str()},
                       {"MLIR_DECLS", c.decls},
                       {"MLIR_CALL", c.call}});
}

void checkSpec(const AttentionSpec &s) {
  (void)mlirMachine(s); // throws for GPU and unresolved targets
}

// mlir (the input and every stage), mlir.<stage>, llvm, asm.
std::vector<std::string> mlirEmitKinds() {
  std::vector<std::string> kinds = {"mlir", "llvm", "asm"};
  for (const mha::PipelineStage &stage : mha::mhaPipelineStages({}))
    kinds.push_back("mlir." + stage.name);
  return kinds;
}

// The decode tile holds decode_tokens x h/kv rows, every head of a GQA
// group for the call's tokens.
constexpr int64_t kMaxDecodeRows = 64;

// The default decode_tokens: the most tokens (1, 2, 4 or 8) whose tile,
// tokens x h/kv rows, stays within 16 rows. mha-split-kv-decode adds a
// one-token tier below it, so a decode step never pays for padded tokens:
// S4 (B1 T_q 1 T_kv 4096 h32 kv8 dk128 f32) 1.39 ms, T_q 4 in the
// 4-token tile 2.13 ms (the flash form: 22.6 ms); a 32-row tile (8 tokens)
// ran T_q 4 in 3.16 ms (2 threads, Sapphire Rapids class).
int64_t mlirDecodeTokens(const AttentionSpec &s) {
  const int64_t heads = s.h / s.n_kv;
  int64_t tokens = 1;
  for (int64_t t : {1, 2, 4, 8})
    if (t * heads <= 16)
      tokens = t;
  return tokens * heads <= kMaxDecodeRows ? tokens : 0;
}

// The default key tile of the split-KV form: the longest of 16, 32, 64
// keys whose K and V tiles, widened to f32 for one head, fill at most half
// of the L1 data cache, so a head's tile copies stay in L1 while the
// next head's rows stream in. S4 (B1 T_q 1 T_kv 4096 h32 kv8 dk128 f32):
// 16 keys (16 KiB) 1.35 ms, 32 keys (32 KiB, over half of the 48 KiB L1)
// 1.51 ms; int8 K/V 0.89 / 1.04 ms; at dk 64 both fit and run alike
// (0.65 ms); 2 threads, Sapphire Rapids class.
// Every CPU model (preset or host) states its L1d.
int64_t mlirDecodeKeyTile(const AttentionSpec &s, const MachineModel &t) {
  const int64_t widenedRowBytes = (s.d_k + s.d_v) * int64_t(sizeof(float));
  int64_t tile = 16;
  for (int64_t kt : {32, 64})
    if (kt * widenedRowBytes <= t.l1dBytes / 2)
      tile = kt;
  return tile;
}

ScheduleSpace mlirScheduleSpace(const AttentionSpec &s) {
  const MachineModel &t = mlirMachine(s);
  ScheduleSpace space;
  // The target's own width and the narrower ones down to 8 lanes (4 on a
  // 128-bit target): wider than a register is never faster.
  std::vector<int64_t> widths;
  for (int64_t w : {4, 8, 16})
    if (w >= std::min<int64_t>(8, t.f32Lanes) && w <= t.f32Lanes)
      widths.push_back(w);
  space.params = {
      {"query_tile", {8, 16, 32, 64}, "query rows per flash tile"},
      {"key_tile", {16, 32, 64, 128}, "keys per flash tile"},
      {"vector_width", widths, "f32 lanes of a register"},
      {"rows", {1, 2, 4, 6, 8}, "rows of a matmul register block"},
      {"cols", {1, 2, 3, 4}, "vectors per register block row"},
  };
  // Defaults measured on this machine (docs/performance.md, "MLIR against
  // Halide").
  space.defaults = {{"query_tile", 64},
                    {"key_tile", 32},
                    {"vector_width", t.f32Lanes},
                    {"rows", 4},
                    {"cols", 2}};
  // The split-KV form's key tile (declared by a layer too, which has no
  // split form, so that one --schedule serves a spec file of both ops).
  space.params.push_back({"decode_key_tile",
                          {16, 32, 64},
                          "keys per tile of the split-KV decode form",
                          true});
  space.defaults["decode_key_tile"] = mlirDecodeKeyTile(s, t);
  // A paged cache: the passes walk key tiles of pagedKeyTile(tile, BLOCK),
  // one slice of one block each, so the space holds those tiles and the
  // manifest records the tile the kernel walks.
  if (s.pagedKv()) {
    for (ParamDecl &d : space.params) {
      if (d.name != "key_tile" && d.name != "decode_key_tile")
        continue;
      std::vector<int64_t> tiles;
      for (int64_t kt : d.values) {
        const int64_t g = mha::pagedKeyTile(kt, s.kv_block);
        if (std::find(tiles.begin(), tiles.end(), g) == tiles.end())
          tiles.push_back(g);
      }
      d.values = tiles;
      space.defaults[d.name] =
          mha::pagedKeyTile(space.defaults.at(d.name), s.kv_block);
    }
  }
  if (s.op == Op::Layer) {
    space.params.push_back(
        {"gemm_rows", {32, 64, 128}, "rows per parallel projection block"});
    space.params.push_back(
        {"gemm_cols", {128, 256, 512}, "columns per projection block"});
    space.params.push_back(
        {"gemm_depth", {128, 256, 512}, "reduction slice of a projection"});
    // A weight panel of gemm_depth x gemm_cols f32 is packed only when it
    // fits a stack buffer (mha::kStackBufferBytes, 64 KiB): 128 x 128.
    // Each block of gemm_rows rows reads every weight once: 128 rows read
    // them half as often as 64.
    space.defaults["gemm_rows"] = 128;
    space.defaults["gemm_cols"] = 128;
    space.defaults["gemm_depth"] = 128;
  }
  // Decode: the split-KV form of mha-split-kv-decode for calls
  // with T_q <= decode_tokens, its key axis cut into chunks so that
  // B x kv x chunks reaches split_tasks per core. sdpa only (a layer's T_kv
  // is its T_q): a layer declares decode_tokens = 0 and the split
  // parameters, as the Halide backend does, so one --schedule serves a
  // spec file of both ops.
  const bool layer = s.op == Op::Layer;
  space.params.push_back(
      {"decode_tokens",
       layer ? std::vector<int64_t>{0} : std::vector<int64_t>{0, 1, 2, 4, 8},
       "query tokens of the split-KV decode form (0: none)", true});
  for (ParamDecl &d : splitKvParams())
    space.params.push_back(std::move(d));
  space.defaults["decode_tokens"] = layer ? 0 : mlirDecodeTokens(s);
  space.defaults["split_tasks"] = 4;
  space.defaults["split_min_keys"] = 256;
  const int64_t registers = t.vectorRegisters;
  const int64_t maxWidth = t.f32Lanes;
  const std::vector<ParamDecl> decls = space.params;
  const int64_t heads = s.h / s.n_kv;
  space.violation = [registers, maxWidth, decls,
                     heads](const ScheduleParams &p) {
    if (std::string why = declaredViolation(decls, p); !why.empty())
      return why;
    auto get = [&](const char *k) {
      auto it = p.find(k);
      return it == p.end() ? int64_t(0) : it->second;
    };
    if (get("vector_width") > maxWidth)
      return std::string("vector_width ") +
             std::to_string(get("vector_width")) +
             " exceeds the target's f32 lanes (" + std::to_string(maxWidth) +
             ")";
    // Accumulators plus one broadcast and `cols` loaded vectors.
    const int64_t need = get("rows") * get("cols") + get("cols") + 1;
    if (need > registers)
      return "rows x cols register block needs " + std::to_string(need) +
             " vector registers; the target has " + std::to_string(registers);
    if (get("query_tile") < get("rows"))
      return std::string("query_tile must be at least rows");
    if (get("decode_tokens") * heads > kMaxDecodeRows)
      return "decode_tokens " + std::to_string(get("decode_tokens")) + " x " +
             std::to_string(heads) +
             " query heads per K/V head exceeds the decode tile's " +
             std::to_string(kMaxDecodeRows) + " rows";
    return std::string();
  };
  return space;
}

BackendResult compileWithMlir(const AttentionSpec &s,
                              const BackendOptions &opt) {
  checkSpec(s);
  const MachineModel &t = mlirMachine(s);
  BackendResult r;
  r.schedule =
      resolveSchedule(mlirScheduleSpace(s), opt.schedule, "the mlir backend");
  r.cpuFeatures = t.cpuFeatures;
  r.device = "cpu";
  const std::string fn = opt.symbol + "_mlir_kernel";
  const bool dumpStages = opt.emit.count("mlir") > 0;
  if (!opt.autoscheduler.empty())
    throw BackendError("autoscheduler", "Halide's autoschedulers schedule "
                                        "--backend halide kernels only");
  const std::vector<std::string> kinds = mlirEmitKinds();
  checkEmitKinds(
      opt.emit,
      [&](const std::string &e) {
        return std::find(kinds.begin(), kinds.end(), e) != kinds.end();
      },
      [](const std::string &e) {
        std::string stages;
        for (const mha::PipelineStage &stage : mha::mhaPipelineStages({}))
          stages += (stages.empty() ? "" : ", ") + stage.name;
        return e +
               " is not produced by the mlir backend; it emits mlir (every "
               "stage), mlir.<stage> (" +
               stages + "), llvm and asm";
      });

  mlir::DialectRegistry registry;
  registerEverything(registry);
  mlir::MLIRContext ctx(registry, mlir::MLIRContext::Threading::DISABLED);
  ctx.loadAllAvailableDialects();
  DiagnosticCollector diags(ctx);

  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlirbackend::buildKernelModule(ctx, s, fn);
  const std::string input = printModule(*module);
  if (dumpStages)
    r.irs["mlir"] = input;
  // MHAGEN_MLIR_DUMP=<dir>: the input and every stage's IR, written as the
  // pipeline goes (for debugging a stage that fails).
  const char *dumpDir = std::getenv("MHAGEN_MLIR_DUMP");
  auto dump = [&](const std::string &name, const std::string &text) {
    if (!dumpDir || !*dumpDir)
      return;
    std::ofstream(std::string(dumpDir) + "/" + fn + "." + name + ".mlir")
        << text;
  };
  dump("input", input);

  mha::PipelineOptions pipeline = pipelineOptions(r.schedule, t);
  // Masked 8- and 16-bit loads exist with AVX-512BW; for bf16 elements
  // (the dtype or the K/V storage type) LLVM also needs the BF16
  // extension, or it scalarizes them (minutes per kernel) and calls
  // compiler-rt's __truncsfbf2, which the kernel library does not link.
  const bool bf16Data = s.dtype == DType::BF16 || s.kvType() == KvType::BF16;
  pipeline.masked16 =
      t.f32Lanes == 16 &&
      (!bf16Data || llvm::is_contained(t.cpuFeatures, "avx512_bf16"));
  pipeline.amx = s.target.kind == TargetKind::Avx512Amx;
  for (const mha::PipelineStage &stage : mha::mhaPipelineStages(pipeline)) {
    mlir::PassManager pm(&ctx);
    stage.build(pm);
    if (mlir::failed(pm.run(*module))) {
      dump(stage.name + ".failed", printModule(*module));
      throw BackendError("", "MLIR pipeline stage '" + stage.name +
                                 "' failed:\n" + diags.text);
    }
    dump(stage.name, printModule(*module));
    if (dumpStages || opt.emit.count("mlir." + stage.name))
      r.irs["mlir." + stage.name] = printModule(*module);
  }

  llvm::LLVMContext llvmCtx;
  std::unique_ptr<llvm::Module> llvmModule =
      mlir::translateModuleToLLVMIR(*module, llvmCtx, fn);
  if (!llvmModule)
    throw BackendError("", "translation to LLVM IR failed:\n" + diags.text);
  std::unique_ptr<llvm::TargetMachine> tm = targetMachine(t);
  llvmModule->setDataLayout(tm->createDataLayout());
  llvmModule->setTargetTriple(tm->getTargetTriple().str());
  auto optimize = mlir::makeOptimizingTransformer(3, 0, tm.get());
  if (llvm::Error e = optimize(llvmModule.get())) {
    std::string msg;
    llvm::raw_string_ostream os(msg);
    os << e;
    throw BackendError("", "LLVM optimization failed: " + msg);
  }
  if (opt.emit.count("llvm")) {
    std::string text;
    llvm::raw_string_ostream os(text);
    llvmModule->print(os, nullptr);
    r.irs["llvm"] = text;
  }
  if (opt.emit.count("asm")) {
    // Code generation changes the module it runs on: print a copy.
    std::unique_ptr<llvm::Module> copy = llvm::CloneModule(*llvmModule);
    std::vector<char> text =
        emit(*tm, *copy, llvm::CodeGenFileType::AssemblyFile);
    r.irs["asm"] = std::string(text.begin(), text.end());
  }
  r.object = emit(*tm, *llvmModule, llvm::CodeGenFileType::ObjectFile);
  r.wrapperSource = wrapperSource(s, opt.symbol, fn);
  return r;
}

class MlirKernelBackend final : public KernelBackend {
public:
  Backend id() const override { return Backend::Mlir; }
  std::string unsupportedReason(const AttentionSpec &s) const override {
    return refusalOf([&] { checkSpec(s); });
  }
  ScheduleSpace scheduleSpace(const AttentionSpec &s) const override {
    return mlirScheduleSpace(s);
  }
  std::vector<std::string> emitKinds(const AttentionSpec &) const override {
    return mlirEmitKinds();
  }
  BackendResult compile(const AttentionSpec &s,
                        const BackendOptions &o) const override {
    return compileWithMlir(s, o);
  }
};

} // namespace

std::unique_ptr<KernelBackend> makeMlirBackend() {
  return std::make_unique<MlirKernelBackend>();
}

} // namespace mhagen
