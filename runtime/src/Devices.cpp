// Is a GPU there? The runtime asks the driver libraries directly (dlopen),
// so a machine without CUDA or OpenCL needs neither to run CPU kernels, and
// a GPU kernel there is refused with a message instead of failing later.
#include "RuntimeInternal.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

namespace mhagen::rt {

namespace {

int probeCuda(std::string *why) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    *why = "no CUDA driver (libcuda.so.1 not found)";
    return MHAGEN_ERR_NO_DEVICE;
  }
  using InitFn = int (*)(unsigned);
  using CountFn = int (*)(int *);
  auto init = reinterpret_cast<InitFn>(dlsym(lib, "cuInit"));
  auto count = reinterpret_cast<CountFn>(dlsym(lib, "cuDeviceGetCount"));
  if (!init || !count) {
    *why = "libcuda.so.1 lacks cuInit/cuDeviceGetCount";
    return MHAGEN_ERR_NO_DEVICE;
  }
  int rc = init(0);
  if (rc != 0) {
    *why = "cuInit failed with CUDA error " + std::to_string(rc) +
           " (no usable CUDA device)";
    return MHAGEN_ERR_NO_DEVICE;
  }
  int n = 0;
  if (count(&n) != 0 || n == 0) {
    *why = "the CUDA driver reports no device";
    return MHAGEN_ERR_NO_DEVICE;
  }
  return MHAGEN_OK; // the library stays loaded; Halide's runtime uses it
}

int probeOpenCL(std::string *why) {
  void *lib = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    lib = dlopen("libOpenCL.so", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    *why = "no OpenCL ICD loader (libOpenCL.so.1 not found)";
    return MHAGEN_ERR_NO_DEVICE;
  }
  using PlatformsFn = int (*)(unsigned, void **, unsigned *);
  auto platforms =
      reinterpret_cast<PlatformsFn>(dlsym(lib, "clGetPlatformIDs"));
  if (!platforms) {
    *why = "libOpenCL lacks clGetPlatformIDs";
    return MHAGEN_ERR_NO_DEVICE;
  }
  unsigned n = 0;
  if (platforms(0, nullptr, &n) != 0 || n == 0) {
    *why = "no OpenCL platform is installed (e.g. pocl-opencl-icd)";
    return MHAGEN_ERR_NO_DEVICE;
  }
  return MHAGEN_OK;
}

struct Probe {
  std::once_flag once;
  int code = MHAGEN_ERR_NO_DEVICE;
  std::string why;
};

} // namespace

int devicePresent(const std::string &device, std::string *why) {
  static Probe cuda, opencl;
  Probe *p = device == "cuda" ? &cuda : device == "opencl" ? &opencl : nullptr;
  if (!p) {
    *why = "unknown device '" + device + "'";
    return MHAGEN_ERR_NO_DEVICE;
  }
  std::call_once(p->once, [&] {
    // Testing hook: MHAGEN_HIDE_DEVICES=cuda,opencl makes a machine with a
    // GPU behave like one without.
    const char *hide = std::getenv("MHAGEN_HIDE_DEVICES");
    if (hide && std::strstr(hide, device.c_str())) {
      p->code = MHAGEN_ERR_NO_DEVICE;
      p->why = device + " is hidden by MHAGEN_HIDE_DEVICES";
      return;
    }
    p->code = device == "cuda" ? probeCuda(&p->why) : probeOpenCL(&p->why);
  });
  *why = p->why;
  return p->code;
}

} // namespace mhagen::rt

extern "C" int mhagen_device_available(const char *device) {
  using namespace mhagen::rt;
  if (!device)
    return fail(MHAGEN_ERR_INVALID_ARGUMENT, "device name is NULL");
  std::string why;
  if (devicePresent(device, &why) != MHAGEN_OK)
    return fail(MHAGEN_ERR_NO_DEVICE, std::string(device) + ": " + why);
  clearError();
  return MHAGEN_OK;
}
