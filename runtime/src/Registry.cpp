// The kernel registry: linked-in kernels register from static constructors,
// shared libraries register when opened. Lookups pick the best variant the
// CPU supports; calls are checked (ABI, CPU, device, arguments) and then run.
#include "mhagen/runtime.h"

#include "RuntimeInternal.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

struct mhagen_kernel {
  const mhagen_kernel_desc *desc = nullptr;
  mhagen::KernelManifest manifest;
  // Cached result of the CPU/device check (the machine does not change;
  // the testing override of CPU features does, so it is keyed by epoch).
  mutable std::atomic<int> usableCode{-1};
  mutable std::atomic<int> usableEpoch{-1};
  mutable std::string usableWhy;
  mutable std::mutex usableMu;
};

struct mhagen_library {
  std::string path;
  void *handle = nullptr;
  std::vector<const mhagen_kernel *> kernels;
};

namespace mhagen::rt {

// ---- errors ----
namespace {
thread_local std::string tlsError;
std::atomic<bool> verbose{false};
std::atomic<int> featureEpoch{0};
} // namespace

int fail(int code, const std::string &message) {
  tlsError = message;
  if (verbose.load())
    std::fprintf(stderr, "mhagen: %s\n", message.c_str());
  return code;
}

void clearError() { tlsError.clear(); }

// ---- registry ----
namespace {

struct Registry {
  std::shared_mutex mu;
  std::vector<std::unique_ptr<mhagen_kernel>> kernels;
  std::unordered_map<const mhagen_kernel_desc *, mhagen_kernel *> byDesc;
  std::vector<std::unique_ptr<mhagen_library>> libraries;
};

Registry &registry() {
  static Registry *r = new Registry(); // never destroyed: kernels may run
  return *r;                           // from other static destructors
}

// Parses and checks a descriptor; on success returns a new kernel object.
int makeKernel(const mhagen_kernel_desc *desc,
               std::unique_ptr<mhagen_kernel> &out) {
  if (!desc)
    return fail(MHAGEN_ERR_INVALID_ARGUMENT, "kernel descriptor is NULL");
  const char *sym = desc->symbol ? desc->symbol : "(unnamed)";
  if (desc->abi_version != MHAGEN_ABI_VERSION)
    return fail(MHAGEN_ERR_ABI_MISMATCH,
                std::string("kernel ") + sym + " was built for ABI version " +
                    std::to_string(desc->abi_version) +
                    " but this runtime speaks ABI " +
                    std::to_string(MHAGEN_ABI_VERSION) +
                    ": regenerate it with this mhagen");
  if (!desc->manifest_json || !desc->run || !desc->symbol)
    return fail(MHAGEN_ERR_LOAD_FAILED,
                std::string("kernel ") + sym +
                    " has an incomplete descriptor (manifest, run, symbol)");
  auto k = std::make_unique<mhagen_kernel>();
  k->desc = desc;
  std::string why;
  if (!KernelManifest::fromJson(desc->manifest_json, k->manifest, &why))
    return fail(MHAGEN_ERR_LOAD_FAILED,
                std::string("kernel ") + sym + ": " + why);
  if (k->manifest.abiVersion != MHAGEN_ABI_VERSION)
    return fail(MHAGEN_ERR_ABI_MISMATCH,
                std::string("kernel ") + sym + " manifest says ABI " +
                    std::to_string(k->manifest.abiVersion) +
                    ", this runtime speaks ABI " +
                    std::to_string(MHAGEN_ABI_VERSION));
  if (k->manifest.symbol != desc->symbol)
    return fail(MHAGEN_ERR_LOAD_FAILED, std::string("kernel ") + sym +
                                            " manifest names symbol '" +
                                            k->manifest.symbol +
                                            "': the manifest does not belong "
                                            "to this kernel");
  out = std::move(k);
  return MHAGEN_OK;
}

int targetRank(const std::string &t) {
  if (t == "avx512_amx")
    return 4;
  if (t == "avx512_bf16")
    return 3;
  if (t == "avx512")
    return 2;
  if (t == "avx2")
    return 1;
  return 0;
}

bool matchesKey(const mhagen_kernel &k, const std::string &key) {
  const KernelManifest &m = k.manifest;
  return key == m.symbol || key == m.kernelName || key == m.spec.hash ||
         key == m.spec.semanticKey || key == m.spec.canonical;
}

} // namespace

// ---- usability: CPU features and devices ----
static int checkUsable(const mhagen_kernel *k) {
  int epoch = featureEpoch.load();
  if (k->usableEpoch.load() == epoch) {
    int code = k->usableCode.load();
    if (code == MHAGEN_OK)
      return MHAGEN_OK;
    std::lock_guard<std::mutex> lock(k->usableMu);
    return fail(code, k->usableWhy);
  }
  std::lock_guard<std::mutex> lock(k->usableMu);
  int code = MHAGEN_OK;
  std::string why;
  const KernelManifest &m = k->manifest;
  std::string missing = missingCpuFeatures(m.cpuFeatures);
  if (!missing.empty()) {
    code = MHAGEN_ERR_UNSUPPORTED_CPU;
    why = "kernel " + m.symbol + " (target " + m.target +
          ") needs CPU features this machine lacks: " + missing;
  } else if (std::find(m.cpuFeatures.begin(), m.cpuFeatures.end(),
                       "amx_bf16") != m.cpuFeatures.end() &&
             !(why = requestAmxTiles()).empty()) {
    code = MHAGEN_ERR_UNSUPPORTED_CPU;
    why = "kernel " + m.symbol + " (target " + m.target + "): " + why;
  } else if (m.device != "cpu") {
    std::string dwhy;
    if (devicePresent(m.device, &dwhy) != MHAGEN_OK) {
      code = MHAGEN_ERR_NO_DEVICE;
      why = "kernel " + m.symbol + " runs on " + m.device + " (target " +
            m.target + "): " + dwhy;
    }
  }
  k->usableWhy = why;
  k->usableCode.store(code);
  k->usableEpoch.store(epoch);
  return code == MHAGEN_OK ? MHAGEN_OK : fail(code, why);
}

static int findImpl(const char *key, const char *target, const char *backend,
                    const mhagen_kernel **out) {
  if (!key || !out)
    return fail(MHAGEN_ERR_INVALID_ARGUMENT, "lookup key or output is NULL");
  *out = nullptr;
  std::string forced = target ? target : "";
  if (forced.empty())
    if (const char *env = std::getenv("MHAGEN_FORCE_TARGET"))
      forced = env;
  std::vector<const mhagen_kernel *> candidates;
  {
    Registry &r = registry();
    std::shared_lock<std::shared_mutex> lock(r.mu);
    for (const auto &k : r.kernels)
      if (matchesKey(*k, key) &&
          (forced.empty() || k->manifest.target == forced) &&
          (!backend || k->manifest.backend == backend))
        candidates.push_back(k.get());
  }
  if (candidates.empty())
    return fail(MHAGEN_ERR_NOT_FOUND,
                std::string("no kernel matches '") + key + "'" +
                    (forced.empty() ? "" : " with target " + forced) +
                    (backend ? std::string(" and backend ") + backend : ""));
  const mhagen_kernel *best = nullptr;
  std::string refusals;
  int lastCode = MHAGEN_ERR_UNSUPPORTED_CPU;
  for (const mhagen_kernel *k : candidates) {
    int code = checkUsable(k);
    if (code != MHAGEN_OK) {
      lastCode = code;
      refusals += std::string(refusals.empty() ? "" : "; ") + tlsError;
      continue;
    }
    if (!best ||
        targetRank(k->manifest.target) > targetRank(best->manifest.target))
      best = k;
  }
  if (!best)
    return fail(lastCode,
                "no usable variant of '" + std::string(key) + "': " + refusals);
  clearError();
  *out = best;
  return MHAGEN_OK;
}

} // namespace mhagen::rt

using namespace mhagen::rt;

extern "C" {

const char *mhagen_last_error(void) { return tlsError.c_str(); }

void mhagen_set_verbose(int on) { verbose.store(on != 0); }

int mhagen_register_kernel(const mhagen_kernel_desc *desc) {
  std::unique_ptr<mhagen_kernel> k;
  int rc = makeKernel(desc, k);
  if (rc != MHAGEN_OK)
    return rc;
  Registry &r = registry();
  std::unique_lock<std::shared_mutex> lock(r.mu);
  if (r.byDesc.count(desc))
    return MHAGEN_OK; // registering twice is harmless
  for (const auto &other : r.kernels)
    if (other->manifest.symbol == k->manifest.symbol)
      return fail(MHAGEN_ERR_LOAD_FAILED, "a different kernel named " +
                                              k->manifest.symbol +
                                              " is already registered");
  r.byDesc[desc] = k.get();
  r.kernels.push_back(std::move(k));
  return MHAGEN_OK;
}

int mhagen_load_library(const char *path, mhagen_library **out) {
  if (!path || !out)
    return fail(MHAGEN_ERR_INVALID_ARGUMENT, "library path or output is NULL");
  *out = nullptr;
  if (int rc = checkElfLibrary(path); rc != MHAGEN_OK)
    return rc;
  // Kernels in the library register themselves from constructors while
  // dlopen runs; their list symbol tells us which ones are this library's.
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    return fail(MHAGEN_ERR_LOAD_FAILED,
                std::string("cannot open ") + path + ": " + (e ? e : "?"));
  }
  auto *list = reinterpret_cast<const mhagen_kernel_desc *const *>(
      dlsym(h, MHAGEN_LIBRARY_SYMBOL));
  if (!list) {
    dlclose(h);
    return fail(MHAGEN_ERR_LOAD_FAILED,
                std::string(path) + " is not an mhagen kernel library (no " +
                    MHAGEN_LIBRARY_SYMBOL + " symbol)");
  }
  auto lib = std::make_unique<mhagen_library>();
  lib->path = path;
  lib->handle = h;
  std::string refused;
  int refusedCode = MHAGEN_OK;
  for (int i = 0; list[i]; ++i) {
    int rc = mhagen_register_kernel(list[i]);
    if (rc != MHAGEN_OK) {
      refused += std::string(refused.empty() ? "" : "; ") + tlsError;
      // An ABI mismatch says what to do (regenerate): it wins over the
      // generic code.
      if (refusedCode != MHAGEN_ERR_ABI_MISMATCH)
        refusedCode = rc;
      continue;
    }
    Registry &r = registry();
    std::shared_lock<std::shared_mutex> lock(r.mu);
    lib->kernels.push_back(r.byDesc.at(list[i]));
  }
  if (!refused.empty())
    return fail(refusedCode, std::string(path) + ": refused " + refused);
  // The library stays open for the life of the process: its kernels stay
  // registered and may be running on other threads.
  Registry &r = registry();
  std::unique_lock<std::shared_mutex> lock(r.mu);
  r.libraries.push_back(std::move(lib));
  *out = r.libraries.back().get();
  clearError();
  return MHAGEN_OK;
}

int mhagen_library_kernel_count(const mhagen_library *lib) {
  return lib ? static_cast<int>(lib->kernels.size()) : 0;
}

const mhagen_kernel *mhagen_library_kernel(const mhagen_library *lib, int i) {
  if (!lib || i < 0 || i >= static_cast<int>(lib->kernels.size()))
    return nullptr;
  return lib->kernels[static_cast<size_t>(i)];
}

int mhagen_kernel_count(void) {
  Registry &r = registry();
  std::shared_lock<std::shared_mutex> lock(r.mu);
  return static_cast<int>(r.kernels.size());
}

const mhagen_kernel *mhagen_kernel_at(int i) {
  Registry &r = registry();
  std::shared_lock<std::shared_mutex> lock(r.mu);
  if (i < 0 || i >= static_cast<int>(r.kernels.size()))
    return nullptr;
  return r.kernels[static_cast<size_t>(i)].get();
}

int mhagen_find(const char *key, const mhagen_kernel **out) {
  return findImpl(key, nullptr, nullptr, out);
}

int mhagen_find_variant(const char *key, const char *target,
                        const char *backend, const mhagen_kernel **out) {
  return findImpl(key, target, backend, out);
}

const char *mhagen_kernel_symbol(const mhagen_kernel *k) {
  return k ? k->manifest.symbol.c_str() : "";
}
const char *mhagen_kernel_name(const mhagen_kernel *k) {
  return k ? k->manifest.kernelName.c_str() : "";
}
const char *mhagen_kernel_target(const mhagen_kernel *k) {
  return k ? k->manifest.target.c_str() : "";
}
const char *mhagen_kernel_backend(const mhagen_kernel *k) {
  return k ? k->manifest.backend.c_str() : "";
}
const char *mhagen_kernel_hash(const mhagen_kernel *k) {
  return k ? k->manifest.spec.hash.c_str() : "";
}
const char *mhagen_kernel_manifest(const mhagen_kernel *k) {
  return k ? k->desc->manifest_json : "";
}

int mhagen_kernel_usable(const mhagen_kernel *k) {
  if (!k)
    return fail(MHAGEN_ERR_INVALID_ARGUMENT, "kernel is NULL");
  return checkUsable(k);
}

int mhagen_call(const mhagen_kernel *k, const mhagen_call_args *args) {
  if (!k)
    return fail(MHAGEN_ERR_INVALID_ARGUMENT, "kernel is NULL");
  int rc = checkUsable(k);
  if (rc != MHAGEN_OK)
    return rc;
  rc = validateCall(k->manifest, args);
  if (rc != MHAGEN_OK)
    return rc;
  auto poolLock = lockPoolForCall();
  char err[512] = {0};
  const int failed =
      k->manifest.spec.ragged
          ? runRagged(k->manifest, *k->desc, *args, err, sizeof err)
          : k->desc->run(args, err, sizeof err);
  if (failed != 0) {
    const std::string backend = takeBackendError();
    const std::string where =
        k->manifest.spec.ragged
            ? " (the call from sequence " + std::to_string(failed - 1) + ")"
            : std::string();
    std::string why = err[0] ? std::string(err) : backend;
    if (err[0] && !backend.empty())
      why += ": " + backend;
    if (why.empty())
      why = "the kernel reported an error";
    // The cuda backend's wrappers return an mhagen_status: a GPU older than
    // the kernel's target is MHAGEN_ERR_NO_DEVICE, a misaligned tensor
    // MHAGEN_ERR_INVALID_ARGUMENT.
    const int code = k->manifest.backend == "cuda" && failed > 0 &&
                             failed <= MHAGEN_ERR_KERNEL_FAILED
                         ? failed
                         : MHAGEN_ERR_KERNEL_FAILED;
    return fail(code, k->manifest.symbol + " failed" + where + ": " + why);
  }
  clearError();
  return MHAGEN_OK;
}

int mhagen_invoke(const mhagen_kernel_desc *desc, const mhagen_call_args *a) {
  const mhagen_kernel *k = nullptr;
  {
    Registry &r = registry();
    std::shared_lock<std::shared_mutex> lock(r.mu);
    auto it = r.byDesc.find(desc);
    if (it != r.byDesc.end())
      k = it->second;
  }
  if (!k) {
    int rc = mhagen_register_kernel(desc);
    if (rc != MHAGEN_OK)
      return rc;
    Registry &r = registry();
    std::shared_lock<std::shared_mutex> lock(r.mu);
    k = r.byDesc.at(desc);
  }
  return mhagen_call(k, a);
}

} // extern "C"

namespace mhagen::rt {
void bumpFeatureEpoch() { featureEpoch.fetch_add(1); }
} // namespace mhagen::rt
