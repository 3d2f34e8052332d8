#include "mhagen/tune/TunedSchedule.h"

#include "mhagen/support/Process.h"
#include "mhagen/tune/TuningDb.h"

namespace mhagen {

bool applyTuningDatabase(const AttentionSpec &spec, const std::string &dbPath,
                         GenerateOptions &options,
                         std::vector<std::string> *warnings) {
  AttentionSpec s = spec;
  s.target = resolveTarget(s.target, s.dtype);
  options.scheduleSource = ScheduleSource{};
  if (!fileExists(dbPath)) {
    options.scheduleSource.note =
        "tuning database " + dbPath + " does not exist; default schedule";
    return false;
  }
  TuningDb db(dbPath);
  if (warnings)
    warnings->insert(warnings->end(), db.warnings().begin(),
                     db.warnings().end());
  auto best = db.best(s.hash(), s.target.str(), toString(s.backend));
  if (!best) {
    options.scheduleSource.note = "no correct record for spec " + s.hash() +
                                  " on " + s.target.str() + " in " + dbPath +
                                  "; default schedule";
    return false;
  }
  options.schedule = best->params;
  options.scheduleSource.kind = "tuned";
  options.scheduleSource.database = dbPath;
  options.scheduleSource.trialId = best->trialId;
  options.scheduleSource.medianMs = best->medianMs;
  return true;
}

} // namespace mhagen
