// Internal interfaces shared by the runtime's source files.
#ifndef MHAGEN_RUNTIME_INTERNAL_H
#define MHAGEN_RUNTIME_INTERNAL_H

#include "mhagen/abi.h"
#include "mhagen/abi_model.hpp"
#include "mhagen/manifest.hpp"

#include <set>
#include <shared_mutex>
#include <string>
#include <vector>

namespace mhagen::rt {

/// Sets the calling thread's last error (and prints it when verbose);
/// returns `code` so callers can `return fail(...)`.
int fail(int code, const std::string &message);
void clearError();

std::set<std::string> cpuFeatures();
/// Invalidates cached usability checks (the CPU-feature override changed).
void bumpFeatureEpoch();
/// Space-separated names of required features the CPU lacks ("" if none).
std::string missingCpuFeatures(const std::vector<std::string> &required);
/// Asks the OS for the AMX tile state (once per process); the reason it was
/// refused, or "" when granted.
std::string requestAmxTiles();

/// MHAGEN_OK if a device of that kind ("cuda", "opencl") with a driver is
/// present; otherwise MHAGEN_ERR_NO_DEVICE and *why says what is missing.
int devicePresent(const std::string &device, std::string *why);

/// MHAGEN_OK if `path` is a well-formed shared object for this machine
/// whose loadable segments lie inside the file (ElfCheck.cpp); otherwise
/// MHAGEN_ERR_LOAD_FAILED with the reason. Run before dlopen.
int checkElfLibrary(const char *path);
/// "" when the dynamic section of the ELF image `bytes` (a shared object of
/// this process's class, its program headers and segments already checked
/// to lie inside the `size` bytes) is sound, else why it is not
/// (ElfDynamicCheck.cpp).
std::string checkElfDynamic(const unsigned char *bytes, uint64_t size);
/// "" when the file's bytes end in an mhagen integrity digest that matches
/// them, else why not (LibraryDigest.cpp).
std::string checkLibraryDigest(const unsigned char *bytes, uint64_t size);

/// The ABI shape (tensors, sizes, element types) a manifest describes.
abi::AbiShape abiShapeOf(const KernelManifest &m);

/// Checks every argument of a call against the manifest; MHAGEN_OK or an
/// error code with the message set.
int validateCall(const KernelManifest &m, const mhagen_call_args *a);

/// Runs a ragged batch (manifest ragged = true) on validated arguments: one
/// kernel call per run of consecutive sequences with the same query count
/// (RaggedBatch.cpp). 0, or 1 + the first sequence of the failing call
/// with err filled by the kernel.
int runRagged(const KernelManifest &m, const mhagen_kernel_desc &desc,
              const mhagen_call_args &a, char *err, size_t errlen);

/// Makes sure the shared thread pool is configured (thread count, silent
/// error handler) before the first kernel runs.
void ensureRuntimeInitialized();

// Routes Halide's scratch allocations through a per-thread cache of freed
// blocks (ScratchCache.cpp); called once, before any kernel runs.
void installScratchAllocator();

// Hands out every parallel loop's tasks highest index first, so a causal
// kernel's costliest query tiles run first (TaskOrder.cpp); called once,
// before any kernel runs.
void installTaskOrder();

/// Held (shared) while a kernel runs, so the thread pool is never rebuilt
/// under a running kernel.
std::shared_lock<std::shared_mutex> lockPoolForCall();

/// The last error the backend runtime (Halide) reported on any thread
/// ("" when none); cleared by reading.
std::string takeBackendError();

} // namespace mhagen::rt

#endif
