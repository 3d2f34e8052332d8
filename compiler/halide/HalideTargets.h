// How each mhagen CPU/GPU target maps onto Halide 14 and LLVM 14 codegen.
//
// Zen 4 traps (docs/design.md §7): Halide's `host` detects Sapphire Rapids
// here and LLVM then emits AVX512-FP16 (SIGILL on Zen 4); and the BF16 dot
// pattern is only lowered to Halide's own wrappers when the plain `avx512`
// feature is present. So mhagen never uses `host` inside Halide: it picks
// Halide features for instruction selection, emits bitcode, and compiles
// that with llc-14 for an explicit CPU model that never implies FP16.
#ifndef MHAGEN_HALIDE_TARGETS_H
#define MHAGEN_HALIDE_TARGETS_H

#include "mhagen/machine/MachineModel.h"
#include "mhagen/spec/AttentionSpec.h"

#include <string>
#include <vector>

namespace mhagen::hl {

/// Halide's view of a target; the hardware facts come from the target's
/// machine model (mhagen/machine/MachineModel.h).
struct HalideTargetInfo {
  std::string halideTarget; ///< Halide target string (no_runtime included)
  std::string llcCpu;       ///< -mcpu for llc-14 (the model's LLVM CPU)
  std::string llcAttrs;     ///< -mattr for llc-14
  std::vector<std::string> cpuFeatures; ///< what the object needs
  int vectorWidth = 16;                 ///< natural f32 lanes
  bool gpu = false;
  const MachineModel *machine = nullptr; ///< caches, registers, GPU limits
};

/// The target must be concrete (not Host). f16 kernels on OpenCL need the
/// device's half-precision extension (cl_khr_fp16).
HalideTargetInfo halideTargetInfo(const Target &t, DType dtype);

} // namespace mhagen::hl

#endif
