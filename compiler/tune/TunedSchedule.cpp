#include "mhagen/tune/TunedSchedule.h"

#include "mhagen/support/Process.h"
#include "mhagen/tune/TuningDb.h"

namespace mhagen {

bool applyTuningDatabase(const AttentionSpec &spec, const std::string &dbPath,
                         GenerateOptions &options,
                         std::vector<std::string> *warnings,
                         const MachineClass *machine) {
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
  const MachineClass want = machine ? *machine : MachineClass::host();
  auto best = db.bestFor(s.hash(), s.target.str(), toString(s.backend), want);
  if (!best) {
    options.scheduleSource.note = "no correct record for spec " + s.hash() +
                                  " on " + s.target.str() + " in " + dbPath +
                                  "; default schedule";
    return false;
  }
  options.schedule = best->record.params;
  options.scheduleSource.kind = "tuned";
  options.scheduleSource.database = dbPath;
  options.scheduleSource.trialId = best->record.trialId;
  options.scheduleSource.medianMs = best->record.medianMs;
  options.scheduleSource.machineClass = best->machineClass;
  if (!best->sameClass())
    options.scheduleSource.note = "record " + best->record.trialId + " " +
                                  best->describe() + "; wanted " + want.brief();
  return true;
}

} // namespace mhagen
