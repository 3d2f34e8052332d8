#include "FakeKernels.h"

#include <cstdio>
#include <mutex>
#include <stdexcept>

namespace mhagen::test {

KernelManifest fakeManifest(const std::string &name, const std::string &symbol,
                            const std::string &target,
                            const std::vector<std::string> &features,
                            bool padding) {
  KernelManifest m;
  m.abiVersion = MHAGEN_ABI_VERSION;
  m.mhagenVersion = "test";
  m.symbol = symbol;
  m.kernelName = name;
  m.spec.canonical = "spec " + name + " { op = sdpa; d = 32; h = 4; kv = 2 }";
  m.spec.semanticKey = "op=sdpa;d=32;h=4;kv=2;dk=8;dv=8;" + name;
  m.spec.hash = "hash_" + name;
  m.spec.op = "sdpa";
  m.spec.d = 32;
  m.spec.h = 4;
  m.spec.d_k = 8;
  m.spec.d_v = 8;
  m.spec.n_kv = 2;
  m.spec.padding = padding;
  m.spec.dtype = "f32";
  m.spec.scale = 0.35355339059327373;
  m.target = target;
  m.backend = "halide";
  m.device = target.rfind("cuda", 0) == 0 ? "cuda"
             : target == "opencl"         ? "opencl"
                                          : "cpu";
  m.cpuFeatures = features;
  return m;
}

// A kernel's run function gets no pointer to its descriptor, so each fake
// kernel takes one of a fixed set of run functions (a slot).
constexpr int kSlots = 32;
static std::mutex gMu;
static FakeKernel *gSlots[kSlots];

template <int N>
static int slotRun(const mhagen_call_args *a, char *err, size_t errlen) {
  FakeKernel *k = gSlots[N];
  k->calls.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(k->seenMu);
    k->seen.push_back(*a);
  }
  if (k->fail) {
    std::snprintf(err, errlen, "fake kernel %s failed on purpose",
                  k->symbol.c_str());
    return 7;
  }
  static_cast<float *>(a->out)[0] = static_cast<float>(a->batch);
  return 0;
}

template <int... N>
static constexpr auto makeRuns(std::integer_sequence<int, N...>) {
  using RunFn = int (*)(const mhagen_call_args *, char *, size_t);
  return std::array<RunFn, sizeof...(N)>{slotRun<N>...};
}

FakeKernel::FakeKernel(const KernelManifest &m, int abiVersion, bool fail_)
    : symbol(m.symbol), json(m.toJson()), fail(fail_) {
  static const auto runs = makeRuns(std::make_integer_sequence<int, kSlots>{});
  std::lock_guard<std::mutex> lock(gMu);
  int slot = 0;
  while (slot < kSlots && gSlots[slot])
    ++slot;
  if (slot == kSlots)
    throw std::runtime_error("too many fake kernels");
  gSlots[slot] = this; // fake kernels live for the whole test run
  desc.abi_version = static_cast<uint32_t>(abiVersion);
  desc.symbol = symbol.c_str();
  desc.manifest_json = json.c_str();
  desc.run = runs[static_cast<size_t>(slot)];
}

} // namespace mhagen::test
