// mhagen list-targets: what this machine can generate for and run, and why
// a target is unavailable. mhagen inspect LIB: the manifests inside a
// kernel shared library.
#include "Commands.h"

#include "mhagen/driver/Driver.h"
#include "mhagen/machine/MachineModel.h"
#include "mhagen/manifest.hpp"
#include "mhagen/runtime.h"
#include "mhagen/spec/SpecParser.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <memory>

namespace mhagen::cli {

// The machine model as JSON (list-targets --format json).
static nlohmann::ordered_json machineJson(const MachineModel &m) {
  nlohmann::ordered_json j;
  j["class"] = m.className;
  j["source"] = m.source;
  if (!m.cpuName.empty()) {
    j["cpu"] = m.cpuName;
    j["vendor"] = m.vendor;
    j["family"] = m.family;
    j["model"] = m.model;
  }
  if (m.isGpu()) {
    j["shared_memory_per_block"] = m.sharedMemoryPerBlock;
    j["max_threads_per_block"] = m.maxThreadsPerBlock;
    return j;
  }
  j["cpu_features"] = m.cpuFeatures;
  j["vector_bits"] = m.vectorBits;
  j["f32_lanes"] = m.f32Lanes;
  j["vector_registers"] = m.vectorRegisters;
  j["l1d_bytes"] = m.l1dBytes;
  j["l2_bytes"] = m.l2Bytes;
  j["l3_bytes"] = m.l3Bytes;
  j["cores"] = m.cores;
  j["llvm_cpu"] = m.llvmCpu;
  j["llvm_features"] = m.llvmFeatures;
  j["bf16_dot_per_fma"] = m.bf16DotPerFma;
  return j;
}

static std::string gpuDeviceReason(const std::string &device) {
  if (mhagen_device_available(device.c_str()) == MHAGEN_OK)
    return "";
  return mhagen_last_error();
}

namespace {
// What each backend builds for a CUDA capability (docs/design.md §7).
std::string cudaTargetText(const Target &t) {
  const int capability = t.cudaCapability;
  const std::string sm = "sm_" + std::to_string(capability);
  if (t.cudaArchSpecific)
    return "NVIDIA GPU sm_90a (H100, H200) only: backend cuda (wgmma, TMA "
           "and warp specialisation, f16/bf16)";
  if (capability >= 90)
    return "NVIDIA GPU " + sm +
           " (H100, H200): backend cuda (mma.sync tensor cores, f16/bf16)";
  return "NVIDIA GPU " + sm +
         " and later: backend cuda (mma.sync tensor cores, f16/bf16) or "
         "halide (PTX, CUDA cores, every dtype)";
}
} // namespace

void addListTargetsCommand(CLI::App &app, int &exitCode) {
  auto *cmd = app.add_subcommand(
      "list-targets", "List targets: which this machine runs, and why not");
  auto format = std::make_shared<std::string>("text");
  addFormatOption(cmd, *format);
  auto verbosePtr = std::make_shared<bool>(false);
  cmd->add_flag("--machines", *verbosePtr,
                "also print each target's preset machine model");
  cmd->callback([format, verbosePtr, &exitCode] {
    const bool verbose = *verbosePtr;
    const char *const names[] = {
        "avx2",      "avx512",    "avx512_bf16", "avx512_amx", "neon",
        "cuda_sm80", "cuda_sm86", "cuda_sm90",   "cuda_sm90a", "opencl"};
    nlohmann::ordered_json js = nlohmann::ordered_json::array();
    std::string hostName;
    Target host;
    try {
      host = resolveTarget(Target{}, DType::F32);
      hostName = host.str();
    } catch (const std::exception &e) {
      hostName = std::string("unavailable: ") + e.what();
    }
    for (const char *name : names) {
      Target t;
      parseTarget(name, t);
      const MachineModel &preset = presetMachine(t.kind);
      std::string what = preset.className;
      if (t.kind == TargetKind::Cuda)
        what = cudaTargetText(t);
      std::string why = targetUnavailableReason(t);
      std::string run = why.empty() ? "yes" : "no";
      if (t.isGpu()) {
        // Generation never needs the device; running does.
        std::string device = t.kind == TargetKind::Cuda ? "cuda" : "opencl";
        why = gpuDeviceReason(device);
        run = why.empty() ? "yes" : "no";
      }
      nlohmann::ordered_json row;
      row["target"] = name;
      row["description"] = what;
      row["generate"] = true;
      row["run_here"] = why.empty();
      if (!why.empty())
        row["why_not"] = why;
      row["machine"] = machineJson(preset);
      if (t.kind == TargetKind::Neon) {
        row["cores"] = nlohmann::ordered_json::array();
        for (const MachineModel &core : armCores())
          row["cores"].push_back(machineJson(core));
      }
      js.push_back(row);
      if (*format != "text")
        continue;
      std::printf("%-12s generate: yes  run here: %-3s  %s%s%s\n", name,
                  run.c_str(), what.c_str(), why.empty() ? "" : " -- ",
                  why.c_str());
      if (!verbose)
        continue;
      std::printf("%s", preset.describe().c_str());
      if (t.kind == TargetKind::Neon)
        for (const MachineModel &core : armCores())
          if (core.cpuName != preset.cpuName)
            std::printf("  a host with %s takes its figures:\n%s",
                        core.cpuName.c_str(), core.describe().c_str());
    }
    if (*format == "text") {
      std::printf("host resolves to: %s (bf16 specs prefer avx512_bf16)\n"
                  "CPU features: %s\n",
                  hostName.c_str(), mhagen_cpu_features());
      if (*mhagen_cpu_class_note())
        std::printf("CPU class: %s\n", mhagen_cpu_class_note());
      if (host.machine)
        std::printf("host machine model (what schedules for host read):\n%s",
                    host.machine->describe().c_str());
    } else {
      nlohmann::ordered_json out{{"host", hostName},
                                 {"cpu_features", mhagen_cpu_features()}};
      if (host.machine)
        out["host_machine"] = machineJson(*host.machine);
      out["targets"] = js;
      std::cout << out.dump(2) << "\n";
    }
    exitCode = kExitOk;
  });
}

namespace {
// `text`, each line after `prefix`.
std::string indented(const std::string &text, const std::string &prefix) {
  std::string out;
  size_t at = 0;
  while (at < text.size()) {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos)
      nl = text.size();
    out += prefix + text.substr(at, nl - at) + "\n";
    at = nl + 1;
  }
  return out;
}
} // namespace

void addInspectCommand(CLI::App &app, int &exitCode) {
  auto *cmd = app.add_subcommand(
      "inspect", "Print the manifests of the kernels in a shared library");
  struct Opts {
    std::string lib;
    std::string format = "text";
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("library", o->lib, "a library made by mhagen --shared")
      ->required()
      ->check(CLI::ExistingFile);
  addFormatOption(cmd, o->format);
  cmd->callback([o, &exitCode] {
    mhagen_library *lib = nullptr;
    if (mhagen_load_library(o->lib.c_str(), &lib) != MHAGEN_OK) {
      std::cerr << "mhagen inspect: " << mhagen_last_error() << "\n";
      exitCode = kExitFailure;
      return;
    }
    nlohmann::ordered_json all = nlohmann::ordered_json::array();
    for (int i = 0; i < mhagen_library_kernel_count(lib); ++i) {
      const mhagen_kernel *k = mhagen_library_kernel(lib, i);
      KernelManifest m;
      std::string err;
      KernelManifest::fromJson(mhagen_kernel_manifest(k), m, &err);
      if (o->format == "json") {
        all.push_back(nlohmann::ordered_json::parse(m.toJson()));
        continue;
      }
      int usable = mhagen_kernel_usable(k);
      std::cout << m.symbol << "\n"
                << "  spec      " << m.kernelName << " (hash " << m.spec.hash
                << ")\n"
                << "  op        " << m.spec.op << ", h " << m.spec.h << ", kv "
                << m.spec.n_kv << ", dk " << m.spec.d_k << ", dv " << m.spec.d_v
                << ", d " << m.spec.d << ", dtype " << m.spec.dtype << "\n"
                << "  target    " << m.target << " (" << m.backend << ", "
                << m.device << "), ABI " << m.abiVersion << ", mhagen "
                << m.mhagenVersion << "\n"
                << "  canonical (the spec it was generated from)\n"
                << indented(m.spec.canonical, "    ") << "  schedule  "
                << m.scheduleJson << "\n"
                << "  tuning    " << m.tuningJson << "\n"
                << "  runs here "
                << (usable == MHAGEN_OK
                        ? std::string("yes")
                        : std::string("no: ") + mhagen_last_error())
                << "\n";
    }
    if (o->format == "json")
      std::cout << all.dump(2) << "\n";
    exitCode = kExitOk;
  });
}

void addSealCommand(CLI::App &app, int &exitCode) {
  auto *cmd = app.add_subcommand(
      "seal", "Append the integrity digest mhagen_load_library checks (after "
              "stripping or rewriting a library mhagen made)");
  auto libs = std::make_shared<std::vector<std::string>>();
  cmd->add_option("libraries", *libs, "shared libraries to seal")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->callback([libs, &exitCode] {
    exitCode = kExitOk;
    for (const std::string &lib : *libs)
      if (mhagen_seal_library(lib.c_str()) != MHAGEN_OK) {
        std::cerr << "mhagen seal: " << mhagen_last_error() << "\n";
        exitCode = kExitFailure;
      } else {
        std::cout << "sealed " << lib << "\n";
      }
  });
}

} // namespace mhagen::cli
