// What a backend hands to the driver: everything in memory, nothing
// written yet. The driver compiles the ABI wrapper, links the object, writes
// the header and the manifest, and renames the files into place.
#ifndef MHAGEN_SPEC_BACKENDRESULT_H
#define MHAGEN_SPEC_BACKENDRESULT_H

#include "mhagen/spec/AttentionSpec.h"
#include "mhagen/spec/ScheduleParams.h"

#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace mhagen {

/// Requests that shape a backend run.
struct BackendOptions {
  /// Symbol of the ABI entry point (the driver picks it).
  std::string symbol;
  /// IRs to keep, by name: stmt, html, llvm, asm, mlir, ptx ("mlir" also
  /// accepts per-stage dumps: the MLIR backend adds mlir.<stage> entries).
  std::set<std::string> emit;
  /// Schedule parameters that override the backend's defaults (from the
  /// command line or a tuning database); unknown names are an error.
  ScheduleParams schedule;
  /// Halide only: let this autoscheduler (Mullapudi2016, Li2018,
  /// Adams2019) schedule the algorithm instead of mhagen's schedules.
  std::string autoscheduler;
};

struct BackendResult {
  /// Relocatable object holding the kernel's code, without the wrapper.
  std::vector<char> object;
  /// C source of the ABI wrapper (entry point, descriptor, registration);
  /// compiled by the driver with wrapperIncludeDirs added.
  std::string wrapperSource;
  std::vector<std::string> wrapperIncludeDirs;
  /// CPU features the object needs (manifest names, see runtime.h).
  std::vector<std::string> cpuFeatures;
  std::string device = "cpu"; ///< cpu | cuda | opencl
  /// The schedule actually used (defaults merged with overrides).
  ScheduleParams schedule;
  /// IR dumps that were asked for, by name (stmt, html, llvm, asm, ...).
  std::map<std::string, std::string> irs;
  /// Extra files to write next to the artifact (e.g. "ptx" -> text).
  std::map<std::string, std::string> sideFiles;
  /// Seconds an autoscheduler took to schedule (0 otherwise).
  double scheduleSeconds = 0;
};

/// Thrown by a backend when a spec cannot be built by it: names the field
/// and why (e.g. "target: the mlir backend has no cuda lowering").
struct BackendError : std::runtime_error {
  BackendError(const std::string &field, const std::string &why)
      : std::runtime_error(field.empty() ? why : field + ": " + why),
        field(field) {}
  std::string field;
};

} // namespace mhagen

#endif
