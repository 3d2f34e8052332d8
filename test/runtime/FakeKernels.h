// Hand-made kernel descriptors for runtime tests: real manifests, a run
// function that records its calls, and broken variants (wrong ABI, bad
// manifest) that the runtime must refuse.
#ifndef MHAGEN_TEST_FAKEKERNELS_H
#define MHAGEN_TEST_FAKEKERNELS_H

#include "mhagen/abi.h"
#include "mhagen/manifest.hpp"

#include <array>
#include <atomic>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace mhagen::test {

/// A manifest for an sdpa f32 kernel h=4, kv=2, dk=dv=8 (d=32) of spec
/// `name` (its kernel name; the hash and semantic key derive from it).
KernelManifest fakeManifest(const std::string &name, const std::string &symbol,
                            const std::string &target,
                            const std::vector<std::string> &features,
                            bool padding = false);

/// Owns a descriptor and the strings it points to.
struct FakeKernel {
  FakeKernel(const KernelManifest &m, int abiVersion = MHAGEN_ABI_VERSION,
             bool fail = false);
  mhagen_kernel_desc desc;
  std::string symbol, json;
  bool fail;
  std::atomic<int> calls{0};
  /// The arguments of every call, in order (a ragged batch: one per
  /// sequence).
  std::vector<mhagen_call_args> seen;
  std::mutex seenMu;
};

} // namespace mhagen::test

#endif
