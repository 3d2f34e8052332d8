// generateSpecLibrary (KernelLibrary.h).
#include "KernelLibrary.h"

#include <chrono>

namespace mhagen::cli {

SpecLibrary generateSpecLibrary(const AttentionSpec &spec, GenerateOptions g,
                                const std::string &keepDir) {
  SpecLibrary out;
  std::string dir = keepDir;
  if (dir.empty()) {
    out.tmp = std::make_unique<TempDir>("mhagen-run");
    dir = out.tmp->path();
  }
  g.outDir = dir;
  auto t0 = std::chrono::steady_clock::now();
  auto kernels = generateKernels({spec}, g);
  out.generateSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  out.path = dir + "/lib" + variantSymbol(spec) + ".so";
  linkSharedLibrary(kernels, out.path);
  return out;
}

} // namespace mhagen::cli
