// The constants the cuda backend's translation unit gives the kernel
// template (compiler/cuda/CudaBackend.cpp, translationUnit), as template
// arguments: the emulator tests and the fake driver instantiate the kernel
// with these. A change to the generated struct Spec is made here too.
#ifndef MHAGEN_TEST_EMULATEDSPEC_H
#define MHAGEN_TEST_EMULATEDSPEC_H

template <class T_, int DK_, int H_, int G_, int WARPS_, int BN_, bool CAUSAL_,
          long long WINDOW_, bool PADDING_, bool LSE_>
struct EmulatedSpec {
  using T = T_;
  static constexpr int DK = DK_, HEADS = H_, GROUP = G_;
  static constexpr int WARPS = WARPS_, BM = 16 * WARPS_, BN = BN_;
  static constexpr bool CAUSAL = CAUSAL_, PADDING = PADDING_;
  static constexpr long long WINDOW = WINDOW_;
  static constexpr bool LSE = LSE_;
  // The default scale 1/sqrt(dk), in log2 units.
  static constexpr float SCALE_LOG2 =
      static_cast<float>((DK == 64    ? 0.125
                          : DK == 256 ? 0.0625
                                      : 0.08838834764831843) /
                         0.6931471805599453);
};

#endif
