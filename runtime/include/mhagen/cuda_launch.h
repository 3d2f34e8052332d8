/* What the ABI wrappers of mhagen's CUDA kernels (backend = cuda) call: the
 * CUDA driver API, opened with dlopen when first needed, so neither the
 * runtime nor a kernel library links libcuda, and a machine without a GPU
 * gets an error code and a message instead of a failed load. Every
 * function returns 0 or writes at most errlen bytes of message to err and
 * returns an mhagen_status. Kernels run on device 0's primary context (the
 * one the CUDA runtime API uses), on the caller's stream (NULL: the
 * default stream). */
#ifndef MHAGEN_CUDA_LAUNCH_H
#define MHAGEN_CUDA_LAUNCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One kernel image (a fatbin or cubin) and the functions it holds. The
 * wrapper fills the constant part; the runtime fills the rest on first use
 * (thread-safe). */
typedef struct mhagen_cuda_module {
  const unsigned char *image;
  size_t image_size;
  int min_capability; /* e.g. 80: runs on sm_80 and later */
  int max_capability; /* 0: no upper bound; 90 for an sm_90a image */
  const char *arch;   /* named in messages: "sm_80 or later" */
  const char *attention_fn, *combine_fn;
  size_t shared_bytes; /* dynamic shared memory of attention_fn */
  /* Filled by mhagen_cuda_prepare. */
  void *state;
} mhagen_cuda_module;

/* Loads the module on the current device after checking its compute
 * capability; *sm_count receives the device's multiprocessors. */
int mhagen_cuda_prepare(mhagen_cuda_module *m, int *sm_count, char *err,
                        size_t errlen);
/* Device memory; mhagen_cuda_free(NULL) does nothing. The _async forms
 * allocate and free in the order of `stream`'s work. */
int mhagen_cuda_alloc(size_t bytes, void **dev, char *err, size_t errlen);
void mhagen_cuda_free(void *dev);
int mhagen_cuda_alloc_async(size_t bytes, void *stream, void **dev, char *err,
                            size_t errlen);
void mhagen_cuda_free_async(void *dev, void *stream);
int mhagen_cuda_copy_in(void *dev, const void *host, size_t bytes, char *err,
                        size_t errlen);
int mhagen_cuda_copy_out(void *host, const void *dev, size_t bytes, char *err,
                         size_t errlen);
/* Launches attention_fn (which = 0) or combine_fn (which = 1) of a
 * prepared module; `params` is the kernel's one by-value parameter. */
int mhagen_cuda_launch(const mhagen_cuda_module *m, int which,
                       const unsigned grid[3], unsigned threads,
                       size_t shared_bytes, void *stream, void *params,
                       char *err, size_t errlen);
/* A TMA descriptor (CUtensorMap, 128 bytes at `map`) of a 4-d tensor of
 * 16-bit elements at device address `base`: extents innermost first,
 * byte strides of dimensions 1-3, a box of box[0..3] elements, 128-byte
 * swizzled, zeros outside the tensor. */
int mhagen_cuda_tensor_map(void *map, const void *base, const uint64_t dims[4],
                           const uint64_t strides[3], const uint32_t box[4],
                           char *err, size_t errlen);
/* Waits for `stream` (NULL: everything on the device); reports a failed
 * kernel. */
int mhagen_cuda_synchronize(void *stream, char *err, size_t errlen);
/* A stream of its own (for tests and benchmarks that call with one). */
int mhagen_cuda_stream_create(void **stream, char *err, size_t errlen);
void mhagen_cuda_stream_destroy(void *stream);

#ifdef __cplusplus
}
#endif

#endif
