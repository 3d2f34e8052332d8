// The machine model: one description of a target machine that both
// backends, their schedule spaces and default schedules, the driver and
// `mhagen list-targets` read (docs/design.md §7). Hardware facts (ISA,
// registers, caches, cores, GPU limits) live here and nowhere else.
//
// A named target (avx2, avx512, avx512_bf16, avx512_amx, neon, cuda_smXX,
// opencl) gets a documented preset (MachineModel.cpp). `host` resolves to
// the best named target this CPU runs, and its model keeps that target's
// ISA facts but takes the caches, the core count and the CPU's identity
// from the machine itself (cpuid or MIDR_EL1, and sysfs, HostMachine.cpp).
#ifndef MHAGEN_MACHINE_MACHINEMODEL_H
#define MHAGEN_MACHINE_MACHINEMODEL_H

#include "mhagen/spec/AttentionSpec.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mhagen {

struct MachineModel {
  TargetKind kind = TargetKind::Avx2;
  /// "preset <what it models>" or "host (cpuid + sysfs)".
  std::string source;
  /// The class of machine the target's kernels run on, in one line
  /// (list-targets, explain).
  std::string className;

  // Identity (the host's; empty/0 for x86 presets). On AArch64 the family
  // is the MIDR_EL1 implementer and the model its part number.
  std::string vendor, cpuName;
  int family = 0, model = 0;

  // ISA.
  /// CPU features (runtime names, runtime.h) a kernel for this target
  /// needs; the runtime refuses to run it on a CPU that lacks one.
  std::vector<std::string> cpuFeatures;
  int vectorBits = 0;      ///< 128 (NEON), 256 (AVX2), 512 (AVX-512); 0 on GPUs
  int f32Lanes = 1;        ///< vectorBits / 32
  int vectorRegisters = 0; ///< architectural vector registers
  /// LLVM CPU model and features for code generation (never one that
  /// implies AVX512-FP16; see HalideTargets.h).
  std::string llvmCpu, llvmFeatures;
  /// The LLVM target triple of CPU code (a GPU kernel's host side
  /// included); its architecture picks the C toolchain that compiles and
  /// links the kernel's wrapper (compiler/driver/Toolchain.cpp).
  std::string llvmTriple = "x86_64-unknown-linux-gnu";
  /// True when code for this model runs on the architecture mhagen itself
  /// was built for (not a cross target).
  bool nativeArchitecture() const;
  /// The triple's architecture: x86_64, aarch64.
  std::string architecture() const;
  /// FLOPs the bf16 pair dot product (`vdpbf16ps`) retires for each FLOP
  /// of the f32 FMA (`vfmadd231ps`), both at full width with enough
  /// independent accumulators (bench Peak/dpbf16 over Peak/fma_f32); 0 where
  /// the target has no AVX512_BF16 or the rate was never measured on this
  /// class of CPU. Above 1, bf16 attention defaults to the dot product
  /// rather than widening to f32 FMAs (CpuScheduleSpace.cpp).
  double bf16DotPerFma = 0;

  // Memory.
  int64_t l1dBytes = 0, l2Bytes = 0; ///< per core
  int64_t l3Bytes = 0;               ///< shared (per package or CCX)
  int cores = 0;                     ///< cores this process may use; 0: unknown

  // GPU limits (0 on CPUs).
  int64_t sharedMemoryPerBlock = 0;
  int maxThreadsPerBlock = 0;

  bool isGpu() const { return sharedMemoryPerBlock > 0; }
  /// Bytes of per-task scratch a schedule may use: half the L2, so the
  /// streamed K/V tiles keep the other half.
  int64_t scratchBudget() const { return l2Bytes / 2; }
  /// Bytes of K/V one task may copy for all its query tiles at once: its
  /// core's share of the L3 (twice the L2 where the L3 is unknown). The
  /// copy is re-read by every query tile of the task, so it should stay
  /// in the caches, and it bounds the memory each thread allocates.
  int64_t stagedKvBudget() const {
    return l3Bytes > 0 ? l3Bytes / coresOrDefault() : 2 * l2Bytes;
  }
  /// Cores for sizing parallel work: the host's, or 2 for presets.
  int coresOrDefault() const { return cores > 0 ? cores : 2; }
  /// Multi-line description, one fact per line ("  L2 per core  1 MiB").
  std::string describe() const;
};

/// MachineModel::bf16DotPerFma of a CPU class (cpuid vendor and family),
/// as measured on it; 0 for a class never measured.
double bf16DotPerFmaOf(const std::string &vendor, int family);
/// The documented preset of a named target (not Host). neon's is the first
/// of armCores().
const MachineModel &presetMachine(TargetKind kind);
/// The AArch64 cores of the neon class mhagen has figures for, oldest
/// first; a host with one of their MIDRs takes its figures
/// (HostMachine.cpp).
const std::vector<MachineModel> &armCores();
/// The model of this machine for a target kind it runs: the kind's ISA
/// facts, the host's caches, cores and identity.
MachineModel hostMachine(TargetKind kind);
/// The model a spec's target is compiled for: the host's when the target
/// was resolved from `host`, else the preset.
const MachineModel &machineOf(const Target &t);
/// True if this CPU (as the runtime sees it, MHAGEN_CPU_CLASS included)
/// has every feature the target's kernels need.
bool hostRuns(TargetKind kind);
/// Shared memory a block may use on a CUDA GPU of this compute capability
/// once it opts in (CUDA C Programming Guide, "Compute Capabilities"):
/// 163 KiB on sm_80 and sm_87, 99 KiB on sm_86 and sm_89, 227 KiB on sm_90
/// and sm_100; 48 KiB, the limit without opting in, elsewhere.
int64_t cudaSharedMemoryPerBlockOptin(int capability);

} // namespace mhagen

#endif
