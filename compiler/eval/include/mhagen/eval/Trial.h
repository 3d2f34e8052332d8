// Evaluation as a library: one trial = one spec with one schedule,
// generated, run on seeded data, checked against the f64 reference first
// (a wrong-but-fast schedule never counts) and then timed. The tuner runs
// trials in a child process (tools/mhagen-trial, for crash and hang
// isolation) and talks to it only through the two JSON documents below;
// anything else may call evaluateTrial in process.
#ifndef MHAGEN_EVAL_TRIAL_H
#define MHAGEN_EVAL_TRIAL_H

#include "mhagen/spec/AttentionSpec.h"
#include "mhagen/spec/ScheduleParams.h"

#include <cstdint>
#include <string>

namespace mhagen {

/// What to measure. JSON schema "mhagen.trial_request/1":
///   {"schema", "spec" (spec-language text, target named),
///    "target_from_host" (bool: the target was resolved from `host`, so the
///    trial uses this machine's model too), "schedule" {name: int},
///    "B", "T", "Tkv", "reps", "threads" (0 = runtime default), "seed"}
struct TrialRequest {
  AttentionSpec spec;
  ScheduleParams schedule;
  int64_t B = 1, T = 512, Tkv = 0; ///< Tkv 0: T
  int reps = 5;
  int threads = 0;
  uint32_t seed = 1;

  std::string toJson() const;
  /// Throws std::runtime_error naming the field on any schema violation.
  static TrialRequest fromJson(const std::string &json);
};

/// What a trial found. JSON schema "mhagen.trial_result/1":
///   {"schema", "built" (bool), "error" (string; why it was not built or
///    could not run), "within_tolerance" (bool), "max_abs_err",
///    "median_ms", "min_ms", "reps", "threads", "variant",
///    "generate_seconds"}
struct TrialResult {
  bool built = false;
  std::string error;
  bool withinTolerance = false;
  double maxAbsErr = 0, medianMs = 0, minMs = 0, generateSeconds = 0;
  int reps = 0, threads = 0;
  std::string variant;

  std::string toJson() const;
  /// Throws std::runtime_error naming the field on any schema violation.
  static TrialResult fromJson(const std::string &json);
};

/// Runs one trial in this process. Errors of the spec, the schedule or
/// the kernel are results (built = false, error set), not exceptions.
TrialResult evaluateTrial(const TrialRequest &request);

} // namespace mhagen

#endif
