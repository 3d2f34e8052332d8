// Generation from a tuning database: the best valid record for the exact
// spec, target and backend becomes the kernel's schedule.
#ifndef MHAGEN_TUNE_TUNEDSCHEDULE_H
#define MHAGEN_TUNE_TUNEDSCHEDULE_H

#include "mhagen/driver/Driver.h"

#include <string>

namespace mhagen {

/// Fills options.schedule and options.scheduleSource from the database's
/// best record for the spec (target resolved here). Returns false -- and
/// sets scheduleSource.note to say why, keeping the default schedule --
/// when the database has no usable record.
bool applyTuningDatabase(const AttentionSpec &spec, const std::string &dbPath,
                         GenerateOptions &options);

} // namespace mhagen

#endif
