// How the tuner runs a trial: a TrialRunner takes a TrialRequest
// (mhagen/eval/Trial.h) and reports what happened. The default runs the
// dedicated trial executable (tools/mhagen-trial) as a child with a time
// and memory limit, so a crash or a hang is one failed trial; tests give
// the tuner runners of their own (fake landscapes, injected faults).
#ifndef MHAGEN_TUNE_TRIALRUNNER_H
#define MHAGEN_TUNE_TRIALRUNNER_H

#include "mhagen/eval/Trial.h"

#include <cstddef>
#include <memory>
#include <string>

namespace mhagen {

struct TrialOutcome {
  enum class Kind {
    Finished, ///< `result` holds what the trial found
    Crashed,  ///< the trial process died or left no result
    TimedOut  ///< killed at the time limit
  };
  Kind kind = Kind::Finished;
  TrialResult result;
  std::string diagnostics; ///< the end of the child's output, for Crashed
};

class TrialRunner {
public:
  virtual ~TrialRunner() = default;
  virtual TrialOutcome run(const TrialRequest &request, double timeoutSeconds,
                           size_t memoryLimitBytes) = 0;
};

/// Runs `executable REQUEST.json RESULT.json` (the mhagen-trial protocol).
class ProcessTrialRunner : public TrialRunner {
public:
  explicit ProcessTrialRunner(std::string executable)
      : executable_(std::move(executable)) {}
  TrialOutcome run(const TrialRequest &request, double timeoutSeconds,
                   size_t memoryLimitBytes) override;

private:
  std::string executable_;
};

/// mhagen-trial next to the running executable (installed or build tree);
/// throws std::runtime_error when there is none.
std::string defaultTrialExecutable();

} // namespace mhagen

#endif
