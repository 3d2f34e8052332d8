#include "mhagen/tune/TunedSchedule.h"

#include "mhagen/backend/KernelBackend.h"
#include "mhagen/driver/BackendRegistry.h"
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
  // A record whose parameters this mhagen's schedule space refuses (an
  // unknown parameter, a value outside the space: an edited database or
  // one from another version) is skipped with a warning, never built.
  const ScheduleSpace space = kernelBackend(s.backend).scheduleSpace(s);
  auto usable = [&](const TrialRecord &r) {
    const std::string why = refusalOf([&] {
      resolveSchedule(space, r.params,
                      std::string(toString(s.backend)) + " kernels");
    });
    if (!why.empty() && warnings)
      warnings->push_back(dbPath + ": record " + r.trialId + " skipped: " +
                          why);
    return why.empty();
  };
  auto best = db.bestFor(s.hash(), s.target.str(), toString(s.backend), want,
                         usable);
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
