#include "HalideTargets.h"

#include "mhagen/spec/BackendResult.h"

namespace mhagen::hl {

HalideTargetInfo halideTargetInfo(const Target &t, DType dtype) {
  HalideTargetInfo info;
  // 64-bit indexing everywhere: a KV cache can exceed 2 GiB.
  const std::string common = "-large_buffers-no_runtime";
  if (t.kind == TargetKind::Host)
    throw BackendError("target", "host must be resolved before the backend "
                                 "runs (internal error)");
  const MachineModel &m = machineOf(t);
  info.machine = &m;
  info.llcCpu = m.llvmCpu;
  info.llcAttrs = m.llvmFeatures;
  info.cpuFeatures = m.cpuFeatures;
  info.vectorWidth = m.f32Lanes;
  info.gpu = m.isGpu();
  switch (t.kind) {
  case TargetKind::Avx2:
    info.halideTarget = "x86-64-linux-sse41-avx-avx2-fma-f16c" + common;
    break;
  case TargetKind::Avx512:
    info.halideTarget =
        "x86-64-linux-sse41-avx-avx2-fma-f16c-avx512-avx512_skylake" + common;
    break;
  case TargetKind::Avx512Bf16:
  case TargetKind::Avx512Amx: // Halide 14 has no usable AMX path
    // Halide selects vdpbf16ps only with avx512 + sapphirerapids features;
    // llc then compiles for the model's CPU (Cooper Lake: AVX-512 + BF16
    // + VNNI, no FP16).
    info.halideTarget = "x86-64-linux-sse41-avx-avx2-fma-f16c-avx512-"
                        "avx512_skylake-avx512_cannonlake-"
                        "avx512_sapphirerapids" +
                        common;
    break;
  case TargetKind::Neon:
    // FP16 arithmetic and the int8 dot product (Armv8.2-A); llc takes the
    // model's core (Neoverse N1 for the preset).
    info.halideTarget = "arm-64-linux-arm_dot_prod-arm_fp16" + common;
    break;
  case TargetKind::Cuda: {
    // Halide 14's newest capability flag is 8.6; its PTX assembles for
    // newer GPUs (sm_90) too. Host code runs on any x86-64.
    // Only the capabilities Halide 14 emits are accepted, so a kernel's
    // name says what its PTX targets (cuda_sm86 PTX also runs on sm_90:
    // the driver compiles PTX for newer GPUs).
    int cap = t.cudaCapability;
    if (cap != 50 && cap != 61 && cap != 70 && cap != 75 && cap != 80 &&
        cap != 86)
      throw BackendError(
          "target",
          t.str() + ": the halide backend (Halide 14) emits PTX for sm_50, "
                    "sm_61, sm_70, sm_75, sm_80 and sm_86 only; for a newer "
                    "GPU (e.g. sm_90) use cuda_sm86, whose PTX the driver "
                    "compiles for it");
    std::string flag = "cuda_capability_" + std::to_string(cap);
    info.halideTarget = "x86-64-linux-cuda-" + flag + common;
    break;
  }
  case TargetKind::OpenCL:
    info.halideTarget = std::string("x86-64-linux-opencl") +
                        (dtype == DType::F16 ? "-cl_half" : "") + common;
    break;
  case TargetKind::Host:
    break; // refused above
  }
  return info;
}

} // namespace mhagen::hl
