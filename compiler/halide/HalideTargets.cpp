#include "HalideTargets.h"

#include "mhagen/spec/BackendResult.h"

namespace mhagen::hl {

HalideTargetInfo halideTargetInfo(const Target &t, DType dtype) {
  HalideTargetInfo info;
  // 64-bit indexing everywhere: a KV cache can exceed 2 GiB.
  const std::string common = "-large_buffers-no_runtime";
  const std::vector<std::string> avx2Features = {"sse41", "avx", "avx2", "fma",
                                                 "f16c"};
  std::vector<std::string> avx512Features = avx2Features;
  for (const char *f :
       {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"})
    avx512Features.push_back(f);
  switch (t.kind) {
  case TargetKind::Avx2:
    info.halideTarget = "x86-64-linux-sse41-avx-avx2-fma-f16c" + common;
    info.llcCpu = "haswell";
    info.cpuFeatures = avx2Features;
    info.vectorWidth = 8;
    break;
  case TargetKind::Avx512:
    info.halideTarget =
        "x86-64-linux-sse41-avx-avx2-fma-f16c-avx512-avx512_skylake" + common;
    info.llcCpu = "skylake-avx512";
    info.llcAttrs = "-prefer-256-bit"; // keep 512-bit vectors legal
    info.cpuFeatures = avx512Features;
    info.vectorWidth = 16;
    break;
  case TargetKind::Avx512Bf16:
    // Halide selects vdpbf16ps only with avx512 + sapphirerapids features;
    // llc then compiles for Cooper Lake (AVX-512 + BF16 + VNNI, no FP16).
    info.halideTarget = "x86-64-linux-sse41-avx-avx2-fma-f16c-avx512-"
                        "avx512_skylake-avx512_cannonlake-"
                        "avx512_sapphirerapids" +
                        common;
    info.llcCpu = "cooperlake";
    info.llcAttrs = "-prefer-256-bit";
    info.cpuFeatures = avx512Features;
    info.cpuFeatures.push_back("avx512_vnni");
    info.cpuFeatures.push_back("avx512_bf16");
    info.vectorWidth = 16;
    break;
  case TargetKind::Cuda: {
    // Halide 14's newest capability flag is 8.6; its PTX assembles for
    // newer GPUs (sm_90) too. Host code runs on any x86-64.
    int cap = t.cudaCapability;
    std::string flag = cap >= 86   ? "cuda_capability_86"
                       : cap >= 80 ? "cuda_capability_80"
                       : cap >= 75 ? "cuda_capability_75"
                       : cap >= 70 ? "cuda_capability_70"
                       : cap >= 61 ? "cuda_capability_61"
                                   : "cuda_capability_50";
    info.halideTarget = "x86-64-linux-cuda-" + flag + common;
    info.llcCpu = "x86-64";
    info.vectorWidth = 1;
    info.gpu = true;
    break;
  }
  case TargetKind::OpenCL:
    info.halideTarget = std::string("x86-64-linux-opencl") +
                        (dtype == DType::F16 ? "-cl_half" : "") + common;
    info.llcCpu = "x86-64";
    info.vectorWidth = 1;
    info.gpu = true;
    break;
  case TargetKind::Host:
    throw BackendError("target", "host must be resolved before the backend "
                                 "runs (internal error)");
  }
  return info;
}

} // namespace mhagen::hl
