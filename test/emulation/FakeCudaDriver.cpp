// A fake libcuda.so.1 for the end-to-end test of the cuda backend without
// a GPU: device memory is host memory (with a NaN canary after each
// allocation, so a wrapper that sizes a tensor short reads NaN), and
// cuLaunchKernel runs the kernel in the warp emulator. Which spec's kernel
// a launch runs comes from MHAGEN_FAKE_CUDA_KERNEL (the test names it);
// the launch must use that spec's block size and shared memory, and the
// device reports MHAGEN_FAKE_CUDA_CAPABILITY (default 90) and 132 SMs.
#include "WarpEmulator.h"

#include "EmulatedSpec.h"

#include "../../templates/cuda/wgmma_attention.cuh"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

namespace {

// The specs of fake_driver.mha with their default schedules (4 warps for
// sm_80; for sm_90a, 8 consumer warps up to dk 128).
template <class T, int DK, int H, int G, int BN, bool CAUSAL, long long WINDOW,
          bool PADDING, bool LSE, int WARPS = 4>
using Spec = EmulatedSpec<T, DK, H, G, WARPS, BN, CAUSAL, WINDOW, PADDING, LSE>;

struct Kernel {
  void (*attention)(const mh_tc_params &);
  void (*combine)(const mh_tc_params &);
  unsigned threads;
  size_t shared;
};

template <class S> Kernel kernelOf() {
  return {[](const mh_tc_params &p) { mh_tc::attention<S>(p); },
          [](const mh_tc_params &p) { mh_tc::combineSplits<S>(p); },
          32 * S::WARPS, static_cast<size_t>((S::BM + 2 * S::BN) * S::DK * 2)};
}
template <class S> Kernel wgmmaKernelOf() {
  using L = mh_tc::Sm90Layout<S>;
  return {[](const mh_tc_params &p) { mh_tc::attentionSm90<S>(p); },
          [](const mh_tc_params &p) { mh_tc::combineSplits<S>(p); }, L::THREADS,
          static_cast<size_t>(L::SHARED_BYTES)};
}

const std::map<std::string, Kernel> &kernels() {
  static const std::map<std::string, Kernel> k = {
      {"fake_gqa_causal_f16",
       kernelOf<Spec<__half, 64, 4, 2, 64, true, 0, false, false>>()},
      {"fake_window_pad_lse_bf16",
       kernelOf<Spec<__nv_bfloat16, 64, 4, 1, 64, true, 24, true, true>>()},
      {"fake_decode_bf16",
       kernelOf<Spec<__nv_bfloat16, 128, 8, 4, 64, true, 0, false, true>>()},
      {"fake_sm90a_gqa_causal_bf16",
       wgmmaKernelOf<
           Spec<__nv_bfloat16, 128, 8, 4, 128, true, 0, false, true, 8>>()},
      {"fake_sm90a_pad_f16",
       wgmmaKernelOf<Spec<__half, 64, 4, 2, 128, false, 0, true, false, 8>>()}};
  return k;
}

const Kernel *selected() {
  const char *name = std::getenv("MHAGEN_FAKE_CUDA_KERNEL");
  if (!name)
    return nullptr;
  auto it = kernels().find(name);
  return it == kernels().end() ? nullptr : &it->second;
}

constexpr size_t kCanary = 64;
std::mutex allocMutex;
std::map<unsigned long long, size_t> allocations;

const char *attentionName = "mhagen_attention";
int fakeStream; // the one stream cuStreamCreate hands out
const char *combineName = "mhagen_combine";

int fail(const std::string &why) {
  std::fprintf(stderr, "fake libcuda: %s\n", why.c_str());
  return 1; // CUDA_ERROR_INVALID_VALUE
}

} // namespace

extern "C" {

int cuInit(unsigned) { return 0; }
int cuDeviceGetCount(int *n) {
  *n = 1;
  return 0;
}
int cuDeviceGet(int *d, int) {
  *d = 0;
  return 0;
}
int cuDeviceGetAttribute(int *v, int attr, int) {
  const char *cap = std::getenv("MHAGEN_FAKE_CUDA_CAPABILITY");
  const int c = cap ? std::atoi(cap) : 90;
  switch (attr) {
  case 16: // multiprocessors
    *v = 132;
    return 0;
  case 75:
    *v = c / 10;
    return 0;
  case 76:
    *v = c % 10;
    return 0;
  case 97: // shared memory per block, opted in
    *v = 227 * 1024;
    return 0;
  }
  return fail("attribute " + std::to_string(attr));
}
int cuDevicePrimaryCtxRetain(void **ctx, int) {
  static int context;
  *ctx = &context;
  return 0;
}
int cuCtxSetCurrent(void *) { return 0; }
int cuModuleLoadData(void **mod, const void *image) {
  *mod = const_cast<void *>(image);
  return image ? 0 : fail("no image");
}
int cuModuleGetFunction(void **fn, void *, const char *name) {
  if (std::strcmp(name, attentionName) == 0)
    *fn = const_cast<char *>(attentionName);
  else if (std::strcmp(name, combineName) == 0)
    *fn = const_cast<char *>(combineName);
  else
    return fail(std::string("no function ") + name);
  return 0;
}
int cuFuncSetAttribute(void *fn, int attr, int value) {
  const Kernel *k = selected();
  if (fn == attentionName && attr == 8 && k &&
      static_cast<size_t>(value) < k->shared)
    return fail("the attention kernel needs more dynamic shared memory");
  return 0;
}
int cuMemAlloc_v2(unsigned long long *p, size_t bytes) {
  auto *m = static_cast<unsigned char *>(std::malloc(bytes + kCanary));
  if (!m)
    return 2; // out of memory
  std::memset(m, 0xff, bytes + kCanary);
  *p = reinterpret_cast<unsigned long long>(m);
  std::lock_guard<std::mutex> lock(allocMutex);
  allocations[*p] = bytes;
  return 0;
}
int cuMemFree_v2(unsigned long long p) {
  std::lock_guard<std::mutex> lock(allocMutex);
  if (!allocations.erase(p))
    return fail("freeing what was not allocated");
  std::free(reinterpret_cast<void *>(p));
  return 0;
}
static int copy(void *dst, const void *src, unsigned long long dev,
                size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(allocMutex);
    auto it = allocations.find(dev);
    if (it == allocations.end() || bytes > it->second)
      return fail("a copy outside a device allocation");
  }
  std::memcpy(dst, src, bytes);
  return 0;
}
int cuMemcpyHtoD_v2(unsigned long long dst, const void *src, size_t bytes) {
  return copy(reinterpret_cast<void *>(dst), src, dst, bytes);
}
int cuMemcpyDtoH_v2(void *dst, unsigned long long src, size_t bytes) {
  return copy(dst, reinterpret_cast<const void *>(src), src, bytes);
}
int cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                   unsigned by, unsigned bz, unsigned shared, void *stream,
                   void **params, void **extra) {
  const Kernel *k = selected();
  if (!k)
    return fail("MHAGEN_FAKE_CUDA_KERNEL names no kernel of this library");
  if (by != 1 || bz != 1 || extra || !params ||
      (stream && stream != &fakeStream))
    return fail("unexpected launch arguments");
  const auto &p = *static_cast<const mh_tc_params *>(params[0]);
  const bool attention = fn == attentionName;
  if (attention && (bx != k->threads || shared != k->shared))
    return fail("launch of " + std::to_string(bx) + " threads, " +
                std::to_string(shared) + " bytes of shared memory; the " +
                "kernel was built for " + std::to_string(k->threads) + ", " +
                std::to_string(k->shared));
  const std::string why =
      emu::launch({gx, gy, gz}, bx, shared, emu::Schedule{true, true},
                  [&] { attention ? k->attention(p) : k->combine(p); });
  return why.empty() ? 0 : fail(why);
}
int cuCtxSynchronize() { return 0; }
// Kernels run when launched, so a stream is always done.
int cuStreamCreate(void **stream, unsigned) {
  *stream = &fakeStream;
  return 0;
}
int cuStreamDestroy_v2(void *stream) {
  return stream == &fakeStream ? 0 : fail("destroying an unknown stream");
}
int cuStreamSynchronize(void *stream) {
  return stream == &fakeStream ? 0 : fail("waiting on an unknown stream");
}
int cuMemAllocAsync(unsigned long long *p, size_t bytes, void *stream) {
  if (stream != &fakeStream)
    return fail("stream-ordered allocation on an unknown stream");
  return cuMemAlloc_v2(p, bytes);
}
int cuMemFreeAsync(unsigned long long p, void *stream) {
  if (stream != &fakeStream)
    return fail("stream-ordered free on an unknown stream");
  return cuMemFree_v2(p);
}
// The TMA descriptors the sm_90a wrapper encodes: the form the kernel
// uses (16-bit elements, 4 dimensions, 128-byte swizzle, no interleave,
// zeros outside) in the emulator's encoding.
int cuTensorMapEncodeTiled(void *map, int dataType, unsigned rank, void *base,
                           const uint64_t *dims, const uint64_t *strides,
                           const unsigned *box, const unsigned *elementStrides,
                           int interleave, int swizzle, int, int oobFill) {
  if (dataType != 1 || rank != 4 || interleave != 0 || swizzle != 3 ||
      oobFill != 0)
    return fail("a tensor map of another form than the kernel reads");
  for (unsigned d = 0; d < rank; ++d)
    if (elementStrides[d] != 1)
      return fail("a tensor map with element strides");
  const std::string why = emu::encodeTensorMap(map, base, dims, strides, box);
  return why.empty() ? 0 : fail("cuTensorMapEncodeTiled: " + why);
}
int cuGetErrorString(int, const char **s) {
  *s = "fake libcuda error";
  return 0;
}

} // extern "C"
