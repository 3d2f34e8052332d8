// Generation from a tuning database: the best valid record for the exact
// spec, target and backend, measured on the machine class the kernels are
// for (else the nearest class the database has), becomes the kernel's
// schedule.
#ifndef MHAGEN_TUNE_TUNEDSCHEDULE_H
#define MHAGEN_TUNE_TUNEDSCHEDULE_H

#include "mhagen/driver/Driver.h"
#include "mhagen/machine/MachineClass.h"

#include <string>
#include <vector>

namespace mhagen {

/// Fills options.schedule and options.scheduleSource from the database's
/// best record for the spec (target resolved here) on machine class
/// `machine` (this machine's when null), or on the nearest class that has
/// one: scheduleSource.note then says which. Returns false -- and
/// sets scheduleSource.note to say why, keeping the default schedule --
/// when the database has no usable record. Torn or invalid records the
/// database skipped are appended to *warnings (when given), so that
/// `generate --db` says so as `tune --report` does.
bool applyTuningDatabase(const AttentionSpec &spec, const std::string &dbPath,
                         GenerateOptions &options,
                         std::vector<std::string> *warnings = nullptr,
                         const MachineClass *machine = nullptr);

} // namespace mhagen

#endif
