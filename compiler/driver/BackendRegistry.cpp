// The backends this mhagen was built with (BackendRegistry.h).
#include "mhagen/driver/BackendRegistry.h"

#include "mhagen/cuda/CudaBackend.h"
#include "mhagen/halide/HalideBackend.h"
#ifdef MHAGEN_HAVE_MLIR
#include "mhagen/mlir/MlirBackend.h"
#endif

#include <memory>

namespace mhagen {

namespace {

const std::vector<std::unique_ptr<KernelBackend>> &registry() {
  static const std::vector<std::unique_ptr<KernelBackend>> backends = [] {
    std::vector<std::unique_ptr<KernelBackend>> b;
    b.push_back(makeHalideBackend());
#ifdef MHAGEN_HAVE_MLIR
    b.push_back(makeMlirBackend());
#endif
    b.push_back(makeCudaBackend());
    return b;
  }();
  return backends;
}

} // namespace

bool backendBuilt(Backend id) {
  for (const auto &b : registry())
    if (b->id() == id)
      return true;
  return false;
}

const KernelBackend &kernelBackend(Backend id) {
  for (const auto &b : registry())
    if (b->id() == id)
      return *b;
  throw BackendError("backend", std::string("this mhagen was built without "
                                            "the ") +
                                    toString(id) +
                                    " backend (MHAGEN_ENABLE_MLIR=OFF)");
}

std::vector<const KernelBackend *> availableBackends() {
  std::vector<const KernelBackend *> out;
  for (const auto &b : registry())
    out.push_back(b.get());
  return out;
}

} // namespace mhagen
