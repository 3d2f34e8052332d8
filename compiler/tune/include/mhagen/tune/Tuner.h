// `mhagen tune`: searches a spec's schedule space by measuring candidates
// for real. Each candidate is one trial (mhagen/eval/Trial.h), run by a
// TrialRunner -- by default in a child process (tools/mhagen-trial): it is
// generated, checked against the reference
// first -- a wrong-but-fast schedule can never win -- and then timed
// (warm-up, several repetitions, median). A crash, a hang (time limit) or
// running out of memory (address-space limit) in a child is recorded as a
// failed trial and the search goes on. Compilation and measurement are
// sequential: on a 2-core machine a compile running beside a measurement
// would steal one of the measured threads. The best few are measured again
// with more repetitions at the end, and that decides the winner.
#ifndef MHAGEN_TUNE_TUNER_H
#define MHAGEN_TUNE_TUNER_H

#include "mhagen/spec/AttentionSpec.h"
#include "mhagen/tune/ScheduleSearch.h"
#include "mhagen/tune/TrialRunner.h"
#include "mhagen/tune/TuningDb.h"

#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>

namespace mhagen {

struct TuneOptions {
  AttentionSpec spec; ///< target resolved
  std::string dbPath;
  SearchOptions search;
  double timeLimitSeconds = 0; ///< 0 = budget only
  int64_t B = 1, T = 512, Tkv = 0;
  int threads = 0; ///< 0 = the runtime's default
  int reps = 5;
  int remeasureTop = 3, remeasureReps = 15;
  double trialTimeoutSeconds = 300;
  size_t trialMemoryLimitBytes = size_t(16) << 30;
  /// Runs the trials; null: a ProcessTrialRunner on
  /// defaultTrialExecutable().
  std::shared_ptr<TrialRunner> runner;
  std::ostream *progress = nullptr;
};

struct TuneSummary {
  int trials = 0;  ///< measured in this run
  int resumed = 0; ///< found in the database from an earlier run
  int ok = 0, failed = 0;
  std::optional<TrialRecord> best;     ///< after re-measurement
  std::optional<TrialRecord> baseline; ///< the default schedule
  int remeasured = 0;                  ///< re-measurements run at the end
  bool stoppedByTime = false; ///< --time ended the search or re-measuring
  double seconds = 0;         ///< wall time of this run
  /// Torn database lines, and signs of a busy machine: the same schedule
  /// measured far apart, or a load average above the CPU count.
  std::vector<std::string> warnings;
};

TuneSummary runTuning(const TuneOptions &options);

/// Measures one point (exposed for tests).
TrialRecord runTrial(const TuneOptions &options, const ScheduleParams &p,
                     const std::string &phase, int reps, int index);

} // namespace mhagen

#endif
