// The backend registry: the one place that knows which backends this mhagen
// was built with (MHAGEN_ENABLE_MLIR). The driver, the tuner and the tests
// ask it for a KernelBackend by the spec's `backend` field.
#ifndef MHAGEN_DRIVER_BACKENDREGISTRY_H
#define MHAGEN_DRIVER_BACKENDREGISTRY_H

#include "mhagen/backend/KernelBackend.h"

#include <vector>

namespace mhagen {

/// The backend for `id`; BackendError("backend", ...) if this mhagen was
/// built without it.
const KernelBackend &kernelBackend(Backend id);
/// The backends this mhagen was built with.
std::vector<const KernelBackend *> availableBackends();
/// Whether this mhagen was built with the backend `id`.
bool backendBuilt(Backend id);

} // namespace mhagen

#endif
