// The driver: spec -> chosen backend -> artifacts on disk. It resolves the
// `host` target, asks the backend for an in-memory kernel, compiles the
// ABI wrapper, links one relocatable object per kernel, writes the C header
// and the manifest, and renames everything into place only when all of it
// succeeded (a failed generation leaves no file behind).
#ifndef MHAGEN_DRIVER_DRIVER_H
#define MHAGEN_DRIVER_DRIVER_H

#include "mhagen/manifest.hpp"
#include "mhagen/spec/AttentionSpec.h"
#include "mhagen/spec/BackendResult.h"
#include "mhagen/spec/ScheduleParams.h"

#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace mhagen {

/// A generation failure (backend, toolchain or I/O): says what and why.
/// `inputError` marks failures caused by what the user asked for (a spec a
/// backend cannot build, an IR it does not emit, a schedule outside its
/// space), which the CLI reports with the usage exit code, as spec errors.
struct DriverError : std::runtime_error {
  explicit DriverError(const std::string &what, bool inputError = false)
      : std::runtime_error(what), inputError(inputError) {}
  bool inputError;
};

/// The best CPU target this machine runs for a dtype (bf16 prefers
/// avx512_bf16); non-host targets are returned unchanged. Throws
/// DriverError when the CPU has not even AVX2.
Target resolveTarget(const Target &t, DType dtype);

/// Why a concrete target cannot run on this machine ("" if it can).
std::string targetUnavailableReason(const Target &t);

/// The entry point symbol of a spec's variant: <kernel name>_<target>,
/// with _mlir appended for the MLIR backend.
std::string variantSymbol(const AttentionSpec &resolvedSpec);

/// Where a schedule came from, recorded in the manifest.
struct ScheduleSource {
  std::string kind = "default"; ///< default | tuned | explicit
  std::string database;         ///< tuning database path (tuned)
  std::string trialId;
  double medianMs = 0;
  std::string machineClass; ///< the record's machine class (tuned)
  std::string note; ///< e.g. why a database had no usable record, or that
                    ///< the record is from another machine class
};

struct GenerateOptions {
  std::string outDir = ".";
  std::set<std::string> emit; ///< stmt, html, llvm, asm, mlir, ptx
  ScheduleParams schedule;    ///< overrides of the backend's defaults
  ScheduleSource scheduleSource;
  std::string autoscheduler; ///< Halide autoscheduler instead (comparison)
};

struct GeneratedKernel {
  AttentionSpec spec; ///< with the target resolved
  std::string symbol;
  std::string objectPath, headerPath, manifestPath;
  std::map<std::string, std::string> irPaths; ///< emitted IR files by name
  KernelManifest manifest;
};

/// The manifest for a spec compiled by a backend.
KernelManifest makeManifest(const AttentionSpec &resolvedSpec,
                            const std::string &symbol,
                            const BackendResult &result,
                            const ScheduleSource &source);

/// The C header of a kernel (deterministic: same spec and mhagen version,
/// same bytes).
std::string kernelHeader(const AttentionSpec &resolvedSpec,
                         const std::string &symbol);

/// Runs the spec's backend and returns its in-memory result.
BackendResult runBackend(const AttentionSpec &resolvedSpec,
                         const BackendOptions &options);

/// Generates every spec into options.outDir: <symbol>.o, <symbol>.h,
/// <symbol>.json (+ IR dumps). All or nothing.
std::vector<GeneratedKernel>
generateKernels(const std::vector<AttentionSpec> &specs,
                const GenerateOptions &options);

/// Links generated kernels into one loadable shared library (with the
/// index mhagen_load_library reads). Writes it atomically to `path`.
void linkSharedLibrary(const std::vector<GeneratedKernel> &kernels,
                       const std::string &path);

/// Writes dir/name.o (every kernel object merged into one relocatable
/// object, so a build links them all without knowing their names) and
/// dir/name.h (including every kernel header). Atomic like the rest.
void writeBundle(const std::vector<GeneratedKernel> &kernels,
                 const std::string &dir, const std::string &name);

/// Directories the toolchain uses (found relative to the executable when
/// installed, else the build tree).
std::string runtimeIncludeDir();
std::string runtimeLibraryDir();

} // namespace mhagen

#endif
