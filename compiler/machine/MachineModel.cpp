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
// The neon class, as Linux's HWCAP names it: Advanced SIMD, FP16 scalar
// and vector arithmetic, and the int8 dot product (Armv8.2-A + dotprod).
const std::vector<std::string> &neonFeatures() {
  static const std::vector<std::string> f = {"asimd", "fphp", "asimdhp",
                                             "asimddp"};
  return f;
}

// An AArch64 core from its published figures. Every one has 32 128-bit
// Advanced SIMD registers; the neon kernels use no SVE, so its width does
// not enter the model.
MachineModel armCore(const std::string &name, const std::string &vendor,
                     int implementer, int part, const std::string &llvmCpu,
                     int64_t l1d, int64_t l2, int64_t l3) {
  MachineModel m;
  m.kind = TargetKind::Neon;
  m.source = "preset (" + name + ")";
  m.className = "AArch64, Armv8.2-A Advanced SIMD with FP16 and the dot "
                "product (128-bit vectors)";
  m.cpuName = name;
  m.vendor = vendor;
  m.family = implementer; // MIDR_EL1 implementer
  m.model = part;         // MIDR_EL1 part number
  m.cpuFeatures = neonFeatures();
  m.vectorBits = 128;
  m.f32Lanes = 4;
  m.vectorRegisters = 32;
  m.llvmCpu = llvmCpu;
  m.llvmTriple = "aarch64-unknown-linux-gnu";
  m.l1dBytes = l1d;
  m.l2Bytes = l2;
  m.l3Bytes = l3;
  return m;
}

// The vector facts every AVX-512 preset shares; `bf16` adds AVX512_BF16
// (and the VNNI that comes with it on every such CPU).
void setAvx512(MachineModel &m, bool bf16) {
  m.cpuFeatures = avx512Features();
  if (bf16) {
    m.cpuFeatures.push_back("avx512_vnni");
    m.cpuFeatures.push_back("avx512_bf16");
  }
  m.vectorBits = 512;
  m.vectorRegisters = 32;
  m.llvmFeatures = "-prefer-256-bit"; // keep 512-bit vectors legal
}

// Presets model the machines this project runs on
// (bench/results/<class>/class.txt):
//   avx2        AMD Zen 3: 16 ymm, L1d 32 KiB, L2 512 KiB, L3 32 MiB
//   avx512      AMD Zen 4: 32 zmm, L1d 32 KiB, L2 1 MiB, L3 32 MiB
//   avx512_bf16 AMD Zen 4 as well (AVX512_BF16 + VNNI, no FP16), whose
//               vdpbf16ps retires 2x the FLOPs of its f32 FMA
//   avx512_amx  Intel Sapphire Rapids: AVX512_BF16 + AMX-BF16 (16x16x32
//               bf16 tile products), 2 MiB L2; vdpbf16ps retires half
//               the FLOPs of its f32 FMA, so bf16 products go to AMX
//   cuda_smXX   48 KiB of static shared memory and 1024 threads per block
//               (the limits without opt-in on every capability)
//   neon        Arm Neoverse N1 (armCores: the oldest core of the class,
//               so its code runs on all of them)
//   opencl      the same limits, the OpenCL minimum for local memory
//               being lower (32 KiB) only on devices mhagen does not
//               target
MachineModel makePreset(TargetKind kind) {
  MachineModel m;
  m.kind = kind;
  switch (kind) {
  case TargetKind::Neon:
    return armCores().front();
  case TargetKind::Avx2:
    m.source = "preset (AMD Zen 3 class)";
    m.className = "x86-64 with AVX2, FMA, F16C (256-bit vectors)";
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
    m.className = kind == TargetKind::Avx512
                      ? "AVX-512 F/CD/BW/DQ/VL (512-bit vectors)"
                      : "AVX-512 + AVX512_BF16 (vdpbf16ps for bf16)";
    setAvx512(m, kind == TargetKind::Avx512Bf16);
    if (kind == TargetKind::Avx512Bf16)
      m.bf16DotPerFma = bf16DotPerFmaOf("AuthenticAMD", 25);
    // Cooper Lake: AVX-512 + BF16 + VNNI and no FP16 (Zen 4 has no FP16).
    m.llvmCpu = kind == TargetKind::Avx512 ? "skylake-avx512" : "cooperlake";
    m.l1dBytes = 32 * KiB;
    m.l2Bytes = 1 * MiB;
    m.l3Bytes = 32 * MiB;
    break;
  case TargetKind::Avx512Amx:
    m.source = "preset (Intel Sapphire Rapids class)";
    m.className = "AVX-512 + AVX512_BF16 + AMX-BF16 (tile products for bf16)";
    setAvx512(m, /*bf16=*/true);
    m.cpuFeatures.push_back("amx_bf16");
    m.bf16DotPerFma = bf16DotPerFmaOf("GenuineIntel", 6);
    m.llvmCpu = "sapphirerapids";
    m.l1dBytes = 48 * KiB;
    m.l2Bytes = 2 * MiB;
    m.l3Bytes = 105 * MiB;
    break;
  case TargetKind::Cuda:
  case TargetKind::OpenCL:
    m.source = "preset (GPU block limits)";
    m.className = kind == TargetKind::Cuda
                      ? "NVIDIA GPU, PTX for sm_86 (assembles for sm_90)"
                      : "OpenCL 1.2 device (e.g. PoCL on the CPU)";
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

// Published figures (Arm's technical reference manuals; the caches of the
// cloud parts that carry them: AWS Graviton2, 3 and 4; Apple's M1):
//   Neoverse N1  64 KiB L1d, 1 MiB L2, 32 MiB L3 (Graviton2)
//   Neoverse V1  64 KiB L1d, 1 MiB L2, 32 MiB L3 (Graviton3)
//   Neoverse V2  64 KiB L1d, 2 MiB L2, 36 MiB L3 (Graviton4); llc-14
//                knows no neoverse-v2, so it is scheduled as a V1
//   Apple M1     128 KiB L1d; 12 MiB L2 shared by 4 performance cores,
//                modelled as each core's 3 MiB; 8 MiB system cache
// No schedule default was timed on any of them: the defaults are derived
// from these figures (CpuScheduleSpace.cpp).
const std::vector<MachineModel> &armCores() {
  static const std::vector<MachineModel> cores = {
      armCore("Arm Neoverse N1", "ARM", 0x41, 0xd0c, "neoverse-n1", 64 * KiB,
              1 * MiB, 32 * MiB),
      armCore("Arm Neoverse V1", "ARM", 0x41, 0xd40, "neoverse-v1", 64 * KiB,
              1 * MiB, 32 * MiB),
      armCore("Arm Neoverse V2", "ARM", 0x41, 0xd4f, "neoverse-v1", 64 * KiB,
              2 * MiB, 36 * MiB),
      armCore("Apple M1 (Firestorm)", "Apple", 0x61, 0x023, "apple-m1",
              128 * KiB, 3 * MiB, 8 * MiB),
  };
  return cores;
}

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
          TargetKind::Avx512Amx, TargetKind::Neon, TargetKind::Cuda,
          TargetKind::OpenCL})
      p[k] = makePreset(k);
    return p;
  }();
  auto it = presets.find(kind);
  return it == presets.end() ? presets.at(TargetKind::Avx2) : it->second;
}

std::string MachineModel::architecture() const {
  return llvmTriple.substr(0, llvmTriple.find('-'));
}

bool MachineModel::nativeArchitecture() const {
#if defined(__aarch64__)
  return architecture() == "aarch64";
#else
  return architecture() == "x86_64";
#endif
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
  os << "  class         " << className << "\n";
  os << "  source        " << source << "\n";
  if (!vendor.empty() && kind == TargetKind::Neon)
    os << "  cpu           " << cpuName << " (" << vendor
       << ", MIDR implementer 0x" << std::hex << family << " part 0x" << model
       << std::dec << ")\n";
  else if (!vendor.empty())
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
  if (std::find(cpuFeatures.begin(), cpuFeatures.end(), "amx_bf16") !=
      cpuFeatures.end())
    os << "  bf16 tiles    AMX tdpbf16ps (the MLIR backend's plain bf16 "
          "attention: mha-lower-to-amx)\n";
  os << "  codegen       " << llvmTriple << " -mcpu=" << llvmCpu
     << (llvmFeatures.empty() ? "" : " -mattr=" + llvmFeatures) << "\n";
  return os.str();
}

int64_t cudaSharedMemoryPerBlockOptin(int capability) {
  switch (capability) {
  case 80:
  case 87:
    return 163 * KiB;
  case 86:
  case 89:
    return 99 * KiB;
  case 90:
  case 100:
    return 227 * KiB;
  default:
    return 48 * KiB;
  }
}

} // namespace mhagen
