// `mhagen tune --report`: what a tuning database holds, per (spec, target,
// backend, problem) group -- trials by status, the default and the chosen
// schedule, the speedup -- printed as a table, with a PNG plot of the
// trials (python3 + matplotlib, templates/tuning_plot.py.in).
#ifndef MHAGEN_TUNE_TUNEREPORT_H
#define MHAGEN_TUNE_TUNEREPORT_H

#include "mhagen/spec/AttentionSpec.h"
#include "mhagen/spec/ScheduleParams.h"

#include <string>
#include <vector>

namespace mhagen {

/// Prints the report of `dbPath` (only the specs in `only`, if any) to
/// stdout and writes the plots (`plotPath`, default DB.png; one file per
/// group when there are several). False when the database has no records.
bool printTuningReport(const std::string &dbPath,
                       const std::vector<AttentionSpec> &only,
                       const std::string &plotPath);

/// "key_tile=64 rows=4 ...": a schedule as the report prints it.
std::string scheduleText(const ScheduleParams &p);

} // namespace mhagen

#endif
