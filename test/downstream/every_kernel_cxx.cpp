// Compiled as C++17 with -Wall -Wextra -Werror -pedantic: every generated
// header (op x dtype x backend) must compile as C++ as well. Each entry
// point is also called once with a wrong ABI version, which every kernel
// must refuse with an error code rather than run.
#include "every_kernel_kernels.h"

#include <cstdio>

extern "C" int check_every_kernel_cxx(void) {
  using Entry = int (*)(const mhagen_call_args *);
  const Entry entries[] = {
      ev_sdpa_f32_avx2,       ev_sdpa_bf16_avx2,       ev_sdpa_f16_avx2,
      ev_layer_f32_avx2,      ev_layer_bf16_avx2,      ev_layer_f16_avx2,
      em_sdpa_f32_avx2_mlir,  em_sdpa_bf16_avx2_mlir,  em_sdpa_f16_avx2_mlir,
      em_layer_f32_avx2_mlir, em_layer_bf16_avx2_mlir, em_layer_f16_avx2_mlir,
      ev_sdpa_paged_avx2,     ev_sdpa_ragged_avx2};
  int failures = 0;
  for (Entry e : entries) {
    mhagen_call_args a{};
    a.abi_version = MHAGEN_ABI_VERSION + 1;
    if (e(&a) != MHAGEN_ERR_ABI_MISMATCH) {
      std::printf("a call with a wrong ABI version was not refused: %s\n",
                  mhagen_last_error());
      ++failures;
    }
  }
  std::printf("C++17 header check: %d entry points, %d failures\n",
              static_cast<int>(sizeof entries / sizeof entries[0]), failures);
  return failures;
}
