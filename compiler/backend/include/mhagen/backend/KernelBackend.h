// The backend interface: what every code generator offers the driver and
// the tuner. A backend turns an AttentionSpec (whose target carries its
// machine model) into a BackendResult; nothing outside the backend's own
// directory includes its internals, the registry (BackendRegistry.h) hands
// backends out by the spec's `backend` field.
#ifndef MHAGEN_BACKEND_KERNELBACKEND_H
#define MHAGEN_BACKEND_KERNELBACKEND_H

#include "mhagen/spec/AttentionSpec.h"
#include "mhagen/spec/BackendResult.h"
#include "mhagen/spec/ScheduleParams.h"

#include <functional>
#include <set>
#include <string>
#include <vector>

namespace mhagen {

class KernelBackend {
public:
  virtual ~KernelBackend() = default;
  virtual Backend id() const = 0;
  /// "" if this backend builds the spec for its target; else the reason,
  /// as "field: why".
  virtual std::string unsupportedReason(const AttentionSpec &spec) const = 0;
  /// The schedule parameters with their allowed values, the rules between
  /// them, and the default point for the target's machine model.
  virtual ScheduleSpace scheduleSpace(const AttentionSpec &spec) const = 0;
  /// The IR dumps `--emit` may ask of this backend for this spec.
  virtual std::vector<std::string>
  emitKinds(const AttentionSpec &spec) const = 0;
  /// What the default schedule builds, for `mhagen explain` (tiles,
  /// threads, shared memory); "" when the backend has nothing to add.
  virtual std::string scheduleSummary(const AttentionSpec &) const {
    return "";
  }
  /// Compiles: object, C wrapper source (for the ABI wrapper generator's
  /// calling convention), CPU features, IRs. Throws BackendError.
  virtual BackendResult compile(const AttentionSpec &spec,
                                const BackendOptions &options) const = 0;
};

// Shared by the backends.

/// The space's defaults with the overrides applied; an unknown name or a
/// point the space's rules refuse is a BackendError("schedule", ...).
/// `whose` completes "unknown schedule parameter 'x' for <whose>".
ScheduleParams resolveSchedule(const ScheduleSpace &space,
                               const ScheduleParams &overrides,
                               const std::string &whose);

/// "" if `check` returns, else the BackendError's message: how a backend
/// turns its refusal checks into unsupportedReason.
std::string refusalOf(const std::function<void()> &check);

/// Throws BackendError("emit", why(kind)) for the first requested kind
/// that `allowed(kind)` refuses.
void checkEmitKinds(const std::set<std::string> &requested,
                    const std::function<bool(const std::string &)> &allowed,
                    const std::function<std::string(const std::string &)> &why);

} // namespace mhagen

#endif
