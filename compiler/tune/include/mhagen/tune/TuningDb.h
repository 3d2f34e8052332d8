// The tuning database: JSON lines, one record per trial. Appends are one
// write(2) of a whole line to a file opened O_APPEND, so concurrent tuners
// and a killed run never interleave or leave half a record that parses; a
// torn line (from a crash mid-write, or a file edited elsewhere) is
// skipped with a warning. Databases from several machines concatenate.
#ifndef MHAGEN_TUNE_TUNINGDB_H
#define MHAGEN_TUNE_TUNINGDB_H

#include "mhagen/spec/AttentionSpec.h"
#include "mhagen/spec/ScheduleParams.h"

#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace mhagen {

/// How a trial ended.
enum class TrialStatus {
  Ok,         ///< built, correct, timed
  Wrong,      ///< built and ran, but disagreed with the reference
  BuildError, ///< the backend or toolchain refused the point
  Crash,      ///< the child process died (signal) or failed to run
  Timeout,    ///< killed after the time limit
  Invalid     ///< ruled out by the search space's constraints
};
const char *toString(TrialStatus s);
bool trialStatusFromString(const std::string &s, TrialStatus &out);

struct TrialRecord {
  std::string specHash;
  std::string specCanonical;
  std::string target;
  std::string cpuModel;
  std::string backend;
  std::string mhagenVersion;
  ScheduleParams params;
  TrialStatus status = TrialStatus::Ok;
  std::string error; ///< why, when not Ok
  double medianMs = 0, minMs = 0;
  std::vector<double> timesMs; ///< per measurement round
  int reps = 0;
  double maxAbsErr = 0;
  int64_t B = 1, T = 0, Tkv = 0;
  int threads = 0;
  std::string timestamp; ///< ISO 8601, UTC
  std::string trialId;   ///< unique: <shard>-<n>-<random>
  std::string phase;     ///< default | random | local | remeasure
  std::string shard;     ///< "i/n" or ""

  std::string toJsonLine() const; ///< one line, no newline
  static bool fromJson(const std::string &line, TrialRecord &out,
                       std::string *error);
};

class TuningDb {
public:
  /// Reads every record of `path` (missing file = empty). Torn or invalid
  /// lines are skipped; warnings() says which.
  explicit TuningDb(std::string path);

  const std::vector<TrialRecord> &records() const { return records_; }
  const std::vector<std::string> &warnings() const { return warnings_; }
  const std::string &path() const { return path_; }

  /// Appends atomically (one write of the whole line) and keeps it.
  void append(const TrialRecord &r);

  /// Records of one spec (semantic hash), target and backend.
  std::vector<const TrialRecord *> matching(const std::string &specHash,
                                            const std::string &target,
                                            const std::string &backend) const;
  /// The fastest correct record for them, if any (among the re-measured
  /// records when a tuning run finished, else among all).
  std::optional<TrialRecord> best(const std::string &specHash,
                                  const std::string &target,
                                  const std::string &backend) const;

private:
  std::string path_;
  std::vector<TrialRecord> records_;
  std::vector<std::string> warnings_;
};

/// "Intel(R) Xeon(R) ..." from /proc/cpuinfo ("unknown" if absent).
/// An exclusive advisory lock (flock) on DB.lock, or on
/// DB.shard-I-of-N.lock for a shard, held for the life of the object:
/// tuners of one database (and shard) run one after the other, each
/// resuming from the records of those before it. Waits for the lock,
/// saying so on `progress` once. Released when the process dies, however
/// it dies.
class TuningDbLock {
public:
  TuningDbLock(const std::string &dbPath, int shardIndex = 0,
               int shardCount = 1, std::ostream *progress = nullptr);
  ~TuningDbLock();
  TuningDbLock(const TuningDbLock &) = delete;
  TuningDbLock &operator=(const TuningDbLock &) = delete;

private:
  int fd_ = -1;
};

std::string cpuModelName();
/// Current time as "2026-11-29T12:34:56Z".
std::string utcTimestamp();

} // namespace mhagen

#endif
