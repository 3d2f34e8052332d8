// The CUDA driver calls of mhagen's CUDA kernels (mhagen/cuda_launch.h):
// libcuda.so.1 is opened on first use, never linked.
#include "mhagen/cuda_launch.h"

#include "mhagen/abi.h"

#include <dlfcn.h>

#include <cstdio>
#include <mutex>
#include <string>

namespace {

using CUresult = int;
using CUdevice = int;
using CUcontext = void *;
using CUmodule = void *;
using CUfunction = void *;
using CUdeviceptr = unsigned long long;

// Values from cuda.h (CUDA 11 and later keep them).
constexpr int kAttrSmCount = 16;     // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
constexpr int kAttrCcMajor = 75;     // ..._COMPUTE_CAPABILITY_MAJOR
constexpr int kAttrCcMinor = 76;     // ..._COMPUTE_CAPABILITY_MINOR
constexpr int kAttrSharedOptin = 97; // ..._MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
constexpr int kFuncMaxDynamicShared =
    8; // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES

struct Driver {
  CUresult (*init)(unsigned);
  CUresult (*deviceGet)(CUdevice *, int);
  CUresult (*deviceGetCount)(int *);
  CUresult (*deviceGetAttribute)(int *, int, CUdevice);
  CUresult (*primaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*ctxSetCurrent)(CUcontext);
  CUresult (*moduleLoadData)(CUmodule *, const void *);
  CUresult (*moduleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*funcSetAttribute)(CUfunction, int, int);
  CUresult (*memAlloc)(CUdeviceptr *, size_t);
  CUresult (*memFree)(CUdeviceptr);
  CUresult (*memcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*memcpyDtoH)(void *, CUdeviceptr, size_t);
  CUresult (*launchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                           unsigned, unsigned, unsigned, void *, void **,
                           void **);
  CUresult (*ctxSynchronize)();
  CUresult (*streamSynchronize)(void *);
  CUresult (*streamCreate)(void **, unsigned);
  CUresult (*streamDestroy)(void *);
  CUresult (*memAllocAsync)(CUdeviceptr *, size_t, void *);
  CUresult (*memFreeAsync)(CUdeviceptr, void *);
  CUresult (*getErrorString)(CUresult, const char **);
  // cuTensorMapEncodeTiled (CUDA 12.0+); null in an older driver, which
  // then runs no sm_90a kernel.
  CUresult (*tensorMapEncodeTiled)(void *, int, unsigned, void *,
                                   const uint64_t *, const uint64_t *,
                                   const unsigned *, const unsigned *, int, int,
                                   int, int) = nullptr;
  CUdevice device = 0;
  CUcontext context = nullptr;
  int capability = 0, smCount = 0, sharedOptin = 0;
  int status = MHAGEN_ERR_NO_DEVICE;
  std::string why;
};

int fail(char *err, size_t errlen, int code, const std::string &msg) {
  if (err && errlen)
    std::snprintf(err, errlen, "%s", msg.c_str());
  return code;
}

std::string cudaError(const Driver &d, CUresult rc) {
  const char *s = nullptr;
  if (d.getErrorString)
    d.getErrorString(rc, &s);
  return "CUDA error " + std::to_string(rc) +
         (s ? std::string(" (") + s + ")" : std::string());
}

template <class F> bool bind(void *lib, const char *name, F &fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr;
}

// Opens the driver and makes device 0's primary context current, once.
Driver &driver() {
  static Driver d;
  static std::once_flag once;
  std::call_once(once, [] {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      d.why = "no CUDA driver (libcuda.so.1 not found)";
      return;
    }
    bool ok = bind(lib, "cuInit", d.init) &&
              bind(lib, "cuDeviceGet", d.deviceGet) &&
              bind(lib, "cuDeviceGetCount", d.deviceGetCount) &&
              bind(lib, "cuDeviceGetAttribute", d.deviceGetAttribute) &&
              bind(lib, "cuDevicePrimaryCtxRetain", d.primaryCtxRetain) &&
              bind(lib, "cuCtxSetCurrent", d.ctxSetCurrent) &&
              bind(lib, "cuModuleLoadData", d.moduleLoadData) &&
              bind(lib, "cuModuleGetFunction", d.moduleGetFunction) &&
              bind(lib, "cuFuncSetAttribute", d.funcSetAttribute) &&
              bind(lib, "cuMemAlloc_v2", d.memAlloc) &&
              bind(lib, "cuMemFree_v2", d.memFree) &&
              bind(lib, "cuMemcpyHtoD_v2", d.memcpyHtoD) &&
              bind(lib, "cuMemcpyDtoH_v2", d.memcpyDtoH) &&
              bind(lib, "cuLaunchKernel", d.launchKernel) &&
              bind(lib, "cuCtxSynchronize", d.ctxSynchronize) &&
              bind(lib, "cuStreamSynchronize", d.streamSynchronize) &&
              bind(lib, "cuStreamCreate", d.streamCreate) &&
              bind(lib, "cuStreamDestroy_v2", d.streamDestroy) &&
              bind(lib, "cuMemAllocAsync", d.memAllocAsync) &&
              bind(lib, "cuMemFreeAsync", d.memFreeAsync) &&
              bind(lib, "cuGetErrorString", d.getErrorString);
    if (!ok) {
      d.why = "libcuda.so.1 lacks a driver API function mhagen needs";
      return;
    }
    bind(lib, "cuTensorMapEncodeTiled", d.tensorMapEncodeTiled);
    CUresult rc = d.init(0);
    int n = 0;
    if (rc != 0 || d.deviceGetCount(&n) != 0 || n == 0) {
      d.why = "the CUDA driver reports no usable device";
      return;
    }
    int major = 0, minor = 0;
    if ((rc = d.deviceGet(&d.device, 0)) != 0 ||
        (rc = d.deviceGetAttribute(&major, kAttrCcMajor, d.device)) != 0 ||
        (rc = d.deviceGetAttribute(&minor, kAttrCcMinor, d.device)) != 0 ||
        (rc = d.deviceGetAttribute(&d.smCount, kAttrSmCount, d.device)) != 0 ||
        (rc = d.deviceGetAttribute(&d.sharedOptin, kAttrSharedOptin,
                                   d.device)) != 0 ||
        (rc = d.primaryCtxRetain(&d.context, d.device)) != 0) {
      d.why = "opening CUDA device 0 failed: " + cudaError(d, rc);
      return;
    }
    d.capability = 10 * major + minor;
    d.status = MHAGEN_OK;
  });
  return d;
}

struct ModuleState {
  std::once_flag once;
  int status = MHAGEN_ERR_NO_DEVICE;
  std::string why;
  CUfunction fn[2] = {nullptr, nullptr};
};

std::mutex statesMutex;

} // namespace

extern "C" {

int mhagen_cuda_prepare(mhagen_cuda_module *m, int *sm_count, char *err,
                        size_t errlen) {
  Driver &d = driver();
  if (d.status != MHAGEN_OK)
    return fail(err, errlen, d.status,
                d.why + "; this kernel needs a CUDA GPU of " + m->arch);
  if (d.capability < m->min_capability ||
      (m->max_capability && d.capability > m->max_capability))
    return fail(err, errlen, MHAGEN_ERR_NO_DEVICE,
                "CUDA device 0 is sm_" + std::to_string(d.capability) +
                    "; this kernel needs " + m->arch);
  if (m->shared_bytes > static_cast<size_t>(d.sharedOptin))
    return fail(err, errlen, MHAGEN_ERR_NO_DEVICE,
                "the kernel needs " + std::to_string(m->shared_bytes) +
                    " bytes of shared memory per block; CUDA device 0 "
                    "allows " +
                    std::to_string(d.sharedOptin));
  ModuleState *s;
  {
    std::lock_guard<std::mutex> lock(statesMutex);
    if (!m->state)
      m->state = new ModuleState; // lives as long as the kernel library
    s = static_cast<ModuleState *>(m->state);
  }
  std::call_once(s->once, [&] {
    CUresult rc = d.ctxSetCurrent(d.context);
    CUmodule mod = nullptr;
    if (rc == 0)
      rc = d.moduleLoadData(&mod, m->image);
    const char *names[2] = {m->attention_fn, m->combine_fn};
    for (int i = 0; rc == 0 && i < 2; ++i)
      rc = d.moduleGetFunction(&s->fn[i], mod, names[i]);
    if (rc == 0)
      rc = d.funcSetAttribute(s->fn[0], kFuncMaxDynamicShared,
                              static_cast<int>(m->shared_bytes));
    if (rc != 0) {
      s->why = "loading the kernel image for " + std::string(m->arch) +
               " failed: " + cudaError(d, rc);
      return;
    }
    s->status = MHAGEN_OK;
  });
  if (s->status != MHAGEN_OK)
    return fail(err, errlen, s->status, s->why);
  if (d.ctxSetCurrent(d.context) != 0)
    return fail(err, errlen, MHAGEN_ERR_NO_DEVICE,
                "cannot make CUDA device 0's context current");
  if (sm_count)
    *sm_count = d.smCount;
  return MHAGEN_OK;
}

int mhagen_cuda_alloc(size_t bytes, void **dev, char *err, size_t errlen) {
  Driver &d = driver();
  if (d.status != MHAGEN_OK)
    return fail(err, errlen, d.status, d.why);
  CUdeviceptr p = 0;
  CUresult rc = d.memAlloc(&p, bytes ? bytes : 1);
  if (rc != 0)
    return fail(err, errlen, MHAGEN_ERR_KERNEL_FAILED,
                "cuMemAlloc of " + std::to_string(bytes) +
                    " bytes failed: " + cudaError(d, rc));
  *dev = reinterpret_cast<void *>(p);
  return MHAGEN_OK;
}

void mhagen_cuda_free(void *dev) {
  if (dev && driver().status == MHAGEN_OK)
    driver().memFree(reinterpret_cast<CUdeviceptr>(dev));
}

int mhagen_cuda_alloc_async(size_t bytes, void *stream, void **dev, char *err,
                            size_t errlen) {
  Driver &d = driver();
  if (d.status != MHAGEN_OK)
    return fail(err, errlen, d.status, d.why);
  CUdeviceptr p = 0;
  CUresult rc = d.memAllocAsync(&p, bytes ? bytes : 1, stream);
  if (rc != 0)
    return fail(err, errlen, MHAGEN_ERR_KERNEL_FAILED,
                "cuMemAllocAsync of " + std::to_string(bytes) +
                    " bytes failed: " + cudaError(d, rc));
  *dev = reinterpret_cast<void *>(p);
  return MHAGEN_OK;
}

void mhagen_cuda_free_async(void *dev, void *stream) {
  if (dev && driver().status == MHAGEN_OK)
    driver().memFreeAsync(reinterpret_cast<CUdeviceptr>(dev), stream);
}

int mhagen_cuda_stream_create(void **stream, char *err, size_t errlen) {
  Driver &d = driver();
  if (d.status != MHAGEN_OK)
    return fail(err, errlen, d.status, d.why);
  CUresult rc = d.ctxSetCurrent(d.context);
  if (rc == 0)
    rc = d.streamCreate(stream, 0);
  return rc == 0 ? MHAGEN_OK
                 : fail(err, errlen, MHAGEN_ERR_KERNEL_FAILED,
                        "cuStreamCreate failed: " + cudaError(d, rc));
}

void mhagen_cuda_stream_destroy(void *stream) {
  if (stream && driver().status == MHAGEN_OK)
    driver().streamDestroy(stream);
}

int mhagen_cuda_copy_in(void *dev, const void *host, size_t bytes, char *err,
                        size_t errlen) {
  Driver &d = driver();
  if (d.status != MHAGEN_OK)
    return fail(err, errlen, d.status, d.why);
  CUresult rc = d.memcpyHtoD(reinterpret_cast<CUdeviceptr>(dev), host, bytes);
  return rc == 0 ? MHAGEN_OK
                 : fail(err, errlen, MHAGEN_ERR_KERNEL_FAILED,
                        "copying to the device failed: " + cudaError(d, rc));
}

int mhagen_cuda_copy_out(void *host, const void *dev, size_t bytes, char *err,
                         size_t errlen) {
  Driver &d = driver();
  if (d.status != MHAGEN_OK)
    return fail(err, errlen, d.status, d.why);
  CUresult rc = d.memcpyDtoH(host, reinterpret_cast<CUdeviceptr>(dev), bytes);
  return rc == 0 ? MHAGEN_OK
                 : fail(err, errlen, MHAGEN_ERR_KERNEL_FAILED,
                        "copying from the device failed: " + cudaError(d, rc));
}

int mhagen_cuda_launch(const mhagen_cuda_module *m, int which,
                       const unsigned grid[3], unsigned threads,
                       size_t shared_bytes, void *stream, void *params,
                       char *err, size_t errlen) {
  Driver &d = driver();
  if (d.status != MHAGEN_OK)
    return fail(err, errlen, d.status, d.why);
  auto *s = static_cast<ModuleState *>(m->state);
  if (!s || s->status != MHAGEN_OK || which < 0 || which > 1)
    return fail(err, errlen, MHAGEN_ERR_KERNEL_FAILED,
                "launch of a CUDA module that is not prepared");
  void *args[] = {params};
  CUresult rc = d.launchKernel(s->fn[which], grid[0], grid[1], grid[2], threads,
                               1, 1, static_cast<unsigned>(shared_bytes),
                               stream, args, nullptr);
  return rc == 0 ? MHAGEN_OK
                 : fail(err, errlen, MHAGEN_ERR_KERNEL_FAILED,
                        std::string("launching ") +
                            (which ? m->combine_fn : m->attention_fn) +
                            " failed: " + cudaError(d, rc));
}

int mhagen_cuda_tensor_map(void *map, const void *base, const uint64_t dims[4],
                           const uint64_t strides[3], const uint32_t box[4],
                           char *err, size_t errlen) {
  Driver &d = driver();
  if (d.status != MHAGEN_OK)
    return fail(err, errlen, d.status, d.why);
  if (!d.tensorMapEncodeTiled)
    return fail(err, errlen, MHAGEN_ERR_NO_DEVICE,
                "the CUDA driver has no cuTensorMapEncodeTiled (CUDA 12.0 "
                "or later runs sm_90a kernels)");
  // 16-bit elements copied as they are (UINT16), no interleave, 128-byte
  // swizzle, L2 promotion to 256 bytes, out-of-bounds elements read as
  // zeros.
  constexpr int kUint16 = 1, kNoInterleave = 0, kSwizzle128 = 3,
                kL2Promotion256 = 3, kOobZeros = 0;
  const unsigned elementStrides[4] = {1, 1, 1, 1};
  CUresult rc = d.tensorMapEncodeTiled(
      map, kUint16, 4, const_cast<void *>(base), dims, strides, box,
      elementStrides, kNoInterleave, kSwizzle128, kL2Promotion256, kOobZeros);
  return rc == 0 ? MHAGEN_OK
                 : fail(err, errlen, MHAGEN_ERR_INVALID_ARGUMENT,
                        "encoding the TMA descriptor of a K/V tensor failed: " +
                            cudaError(d, rc));
}

int mhagen_cuda_synchronize(void *stream, char *err, size_t errlen) {
  Driver &d = driver();
  if (d.status != MHAGEN_OK)
    return fail(err, errlen, d.status, d.why);
  CUresult rc = stream ? d.streamSynchronize(stream) : d.ctxSynchronize();
  return rc == 0 ? MHAGEN_OK
                 : fail(err, errlen, MHAGEN_ERR_KERNEL_FAILED,
                        "the CUDA kernel failed: " + cudaError(d, rc));
}

} // extern "C"
