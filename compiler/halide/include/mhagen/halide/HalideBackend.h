// The Halide backend: an AttentionSpec in, a compiled kernel out (object
// bytes, the C source of its ABI wrapper, IR dumps), all in memory.
#ifndef MHAGEN_HALIDE_HALIDEBACKEND_H
#define MHAGEN_HALIDE_HALIDEBACKEND_H

#include "mhagen/spec/AttentionSpec.h"
#include "mhagen/spec/BackendResult.h"
#include "mhagen/spec/ScheduleParams.h"

namespace mhagen {

/// Compiles the spec (target already resolved, not Host). Throws
/// BackendError for specs or schedules this backend cannot build.
BackendResult compileWithHalide(const AttentionSpec &spec,
                                const BackendOptions &options);

/// The schedule search space the Halide backend declares for this spec and
/// (resolved) target: what `mhagen tune` searches.
ScheduleSpace halideScheduleSpace(const AttentionSpec &spec);

/// Halide's own autoschedulers on the same algorithm, for comparison
/// (issue: tuning). name: Mullapudi2016 | Li2018 | Adams2019. Returns the
/// compiled kernel like compileWithHalide and the seconds it took to
/// schedule.
BackendResult compileWithHalideAutoscheduler(const AttentionSpec &spec,
                                             const BackendOptions &options,
                                             const std::string &name,
                                             double *scheduleSeconds);

} // namespace mhagen

#endif
