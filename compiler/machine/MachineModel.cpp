// The presets of the named targets, and the model a target resolves to.
#include "mhagen/machine/MachineModel.h"

#include "mhagen/runtime.h"

#include <algorithm>
#include <map>
#include <sstream>

namespace mhagen {

namespace {

constexpr int64_t KiB = 1024, MiB = 1024 * 1024;

// ISA feature lists, each written once: AVX-512 extends AVX2, the BF16
// target extends AVX-512.
const std::vector<std::string> &avx2Features() {
  static const std::vector<std::string> f = {"sse41", "avx", "avx2", "fma",
                                             "f16c"};
  return f;
}
std::vector<std::string> avx512Features() {
  std::vector<std::string> f = avx2Features();
  for (const char *x :
       {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"})
    f.push_back(x);
  return f;
}

// Presets model the machines this project runs on
// (bench/results/<class>/class.txt):
//   avx2        AMD Zen 3: 16 ymm, L1d 32 KiB, L2 512 KiB, L3 32 MiB
//   avx512      AMD Zen 4: 32 zmm, L1d 32 KiB, L2 1 MiB, L3 32 MiB
//   avx512_bf16 AMD Zen 4 as well (AVX512_BF16 + VNNI, no FP16), whose
//               vdpbf16ps retires 2x the FLOPs of its f32 FMA
//   cuda_smXX   48 KiB of static shared memory and 1024 threads per block
//               (the limits without opt-in on every capability)
//   opencl      the same limits, the OpenCL minimum for local memory
//               being lower (32 KiB) only on devices mhagen does not
//               target
MachineModel makePreset(TargetKind kind) {
  MachineModel m;
  m.kind = kind;
  switch (kind) {
  case TargetKind::Avx2:
    m.source = "preset (AMD Zen 3 class)";
    m.cpuFeatures = avx2Features();
    m.vectorBits = 256;
    m.vectorRegisters = 16;
    m.llvmCpu = "haswell";
    m.l1dBytes = 32 * KiB;
    m.l2Bytes = 512 * KiB;
    m.l3Bytes = 32 * MiB;
    break;
  case TargetKind::Avx512:
  case TargetKind::Avx512Bf16:
    m.source = "preset (AMD Zen 4 class)";
    m.cpuFeatures = avx512Features();
    if (kind == TargetKind::Avx512Bf16) {
      m.cpuFeatures.push_back("avx512_vnni");
      m.cpuFeatures.push_back("avx512_bf16");
      m.bf16DotPerFma = bf16DotPerFmaOf("AuthenticAMD", 25);
    }
    m.vectorBits = 512;
    m.vectorRegisters = 32;
    // Cooper Lake: AVX-512 + BF16 + VNNI and no FP16 (Zen 4 has no FP16).
    m.llvmCpu = kind == TargetKind::Avx512 ? "skylake-avx512" : "cooperlake";
    m.llvmFeatures = "-prefer-256-bit"; // keep 512-bit vectors legal
    m.l1dBytes = 32 * KiB;
    m.l2Bytes = 1 * MiB;
    m.l3Bytes = 32 * MiB;
    break;
  case TargetKind::Cuda:
  case TargetKind::OpenCL:
    m.source = "preset (GPU block limits)";
    m.llvmCpu = "x86-64"; // host code
    m.sharedMemoryPerBlock = 48 * KiB;
    m.maxThreadsPerBlock = 1024;
    break;
  case TargetKind::Host:
    break;
  }
  m.f32Lanes = m.vectorBits ? m.vectorBits / 32 : 1;
  return m;
}

std::string bytes(int64_t b) {
  if (b <= 0)
    return "unknown";
  if (b % MiB == 0)
    return std::to_string(b / MiB) + " MiB";
  return std::to_string(b / KiB) + " KiB";
}

} // namespace

// Measured with bench Peak/dpbf16 against Peak/fma_f32 (zmm, 16 independent
// accumulators each, threads started together; docs/performance.md, "bf16"):
//   AMD Zen 4 (family 25): 2x -- its FMA pipes split a zmm FMA
//     in two 256-bit halves, vdpbf16ps does twice the work per half;
//   Intel Sapphire Rapids class (family 6): 117.5 against 226.3
//     GFLOP/s per core, 0.52x -- one port runs vdpbf16ps, two run FMAs
//     (an older VM of the class: 86 against 174, the same ratio).
// Any other CPU: not measured (0), so bf16 keeps the f32 FMAs.
double bf16DotPerFmaOf(const std::string &vendor, int family) {
  if (vendor == "AuthenticAMD" && family == 25)
    return 2.0;
  if (vendor == "GenuineIntel" && family == 6)
    return 0.5;
  return 0;
}

const MachineModel &presetMachine(TargetKind kind) {
  static const std::map<TargetKind, MachineModel> presets = [] {
    std::map<TargetKind, MachineModel> p;
    for (TargetKind k :
         {TargetKind::Avx2, TargetKind::Avx512, TargetKind::Avx512Bf16,
          TargetKind::Cuda, TargetKind::OpenCL})
      p[k] = makePreset(k);
    return p;
  }();
  auto it = presets.find(kind);
  return it == presets.end() ? presets.at(TargetKind::Avx2) : it->second;
}

const MachineModel &machineOf(const Target &t) {
  return t.machine ? *t.machine : presetMachine(t.kind);
}

bool hostRuns(TargetKind kind) {
  for (const std::string &f : presetMachine(kind).cpuFeatures)
    if (!mhagen_cpu_has(f.c_str()))
      return false;
  return true;
}

std::string MachineModel::describe() const {
  std::ostringstream os;
  os << "  source        " << source << "\n";
  if (!vendor.empty())
    os << "  cpu           " << cpuName << " (" << vendor << ", family "
       << family << " model " << model << ")\n";
  if (isGpu()) {
    os << "  shared memory " << bytes(sharedMemoryPerBlock) << " per block\n";
    os << "  threads       " << maxThreadsPerBlock << " per block\n";
    return os.str();
  }
  std::string features;
  for (const std::string &f : cpuFeatures)
    features += (features.empty() ? "" : " ") + f;
  os << "  features      " << features << "\n";
  os << "  vectors       " << vectorBits << " bit (" << f32Lanes
     << " f32 lanes), " << vectorRegisters << " registers\n";
  os << "  caches        L1d " << bytes(l1dBytes) << ", L2 " << bytes(l2Bytes)
     << " per core, L3 " << bytes(l3Bytes) << "\n";
  os << "  cores         "
     << (cores > 0 ? std::to_string(cores) : std::string("unknown (preset)"))
     << "\n";
  if (std::find(cpuFeatures.begin(), cpuFeatures.end(), "avx512_bf16") !=
      cpuFeatures.end()) {
    std::ostringstream rate;
    rate << bf16DotPerFma << "x the f32 FMA's FLOPs";
    os << "  bf16 dot      "
       << (bf16DotPerFma > 0 ? rate.str() : std::string("not measured"))
       << (bf16DotPerFma > 1 ? " (bf16 attention uses it)"
                             : " (bf16 attention widens to f32)")
       << "\n";
  }
  os << "  codegen       -mcpu=" << llvmCpu
     << (llvmFeatures.empty() ? "" : " -mattr=" + llvmFeatures) << "\n";
  return os.str();
}

} // namespace mhagen
