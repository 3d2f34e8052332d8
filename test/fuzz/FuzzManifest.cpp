// libFuzzer target: the runtime's manifest reader and kernel registration.
// Arbitrary JSON is either refused with a message or accepted; an accepted
// manifest writes back to JSON that reads again to the same manifest, and
// registering a descriptor that carries it never crashes.
#include "mhagen/abi.h"
#include "mhagen/manifest.hpp"
#include "mhagen/runtime.h"

#include <cstdint>
#include <cstdlib>
#include <deque>
#include <string>

namespace {
int neverRun(const mhagen_call_args *, char *, size_t) { return 1; }
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 1 << 16)
    return 0;
  std::string text(reinterpret_cast<const char *>(data), size);
  mhagen::KernelManifest m;
  std::string err;
  if (!mhagen::KernelManifest::fromJson(text, m, &err)) {
    if (err.empty())
      std::abort(); // a refusal says why
  } else {
    mhagen::KernelManifest back;
    const std::string json = m.toJson();
    if (!mhagen::KernelManifest::fromJson(json, back, &err) ||
        back.toJson() != json)
      std::abort();
  }
  // Registration reads the manifest the same way; registered kernels live
  // for the process, so their storage does too.
  static std::deque<std::string> keep;
  keep.push_back(text);
  keep.push_back("fuzz_kernel_" + std::to_string(keep.size()));
  static std::deque<mhagen_kernel_desc> descs;
  descs.push_back(mhagen_kernel_desc{MHAGEN_ABI_VERSION, keep.back().c_str(),
                                     keep[keep.size() - 2].c_str(), neverRun});
  mhagen_register_kernel(&descs.back());
  return 0;
}
