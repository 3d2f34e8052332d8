// The MLIR backend: an AttentionSpec in, a compiled kernel with exactly the
// ABI and manifest of the Halide backend's out. Its interface uses no MLIR
// types, so the driver needs no MLIR headers.
#ifndef MHAGEN_MLIR_MLIRBACKEND_H
#define MHAGEN_MLIR_MLIRBACKEND_H

#include "mhagen/spec/AttentionSpec.h"
#include "mhagen/spec/BackendResult.h"
#include "mhagen/spec/ScheduleParams.h"

#include <string>

namespace mhagen {

/// Compiles the spec (CPU targets). Throws BackendError for specs this
/// backend cannot build (e.g. GPU targets) or invalid schedules.
BackendResult compileWithMlir(const AttentionSpec &spec,
                              const BackendOptions &options);

/// The schedule parameters the MLIR backend declares (tile sizes, vector
/// width, register block).
ScheduleSpace mlirScheduleSpace(const AttentionSpec &spec);

/// The mha dialect module the backend starts from, as text (for tests and
/// --emit mlir.input).
std::string mlirInputModule(const AttentionSpec &spec);

} // namespace mhagen

#endif
