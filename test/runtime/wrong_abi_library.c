/* A kernel library built for another ABI version: loading it
 * must fail with MHAGEN_ERR_ABI_MISMATCH and say why, never run it. */
#include <mhagen/abi.h>

#include <stddef.h>

static int never_run(const mhagen_call_args *a, char *err, size_t errlen) {
  (void)a;
  (void)err;
  (void)errlen;
  return 1;
}

static const mhagen_kernel_desc future_kernel = {
    MHAGEN_ABI_VERSION + 1, "future_kernel_avx2", "{}", never_run};

const mhagen_kernel_desc *const mhagen_library_kernels[] = {&future_kernel,
                                                            NULL};
