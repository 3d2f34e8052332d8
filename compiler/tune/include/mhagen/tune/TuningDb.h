// The tuning database: JSON lines, one record per trial. Appends are one
// write(2) of a whole line to a file opened O_APPEND, so concurrent tuners
// and a killed run never interleave or leave half a record that parses; a
// torn line (from a crash mid-write, or a file edited elsewhere) is
// skipped with a warning. Databases from several machines concatenate.
#ifndef MHAGEN_TUNE_TUNINGDB_H
#define MHAGEN_TUNE_TUNINGDB_H

#include "mhagen/machine/MachineClass.h"
#include "mhagen/spec/AttentionSpec.h"
#include "mhagen/spec/ScheduleParams.h"

#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace mhagen {

/// How a trial ended.
/// The shortest median a correct trial may record (1 ns): a kernel call
/// takes longer, so a smaller time is a corrupted record.
constexpr double kMinTrialMs = 1e-6;

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
  /// MachineClass::key() of the machine that measured it ("" in records
  /// older than machine classes).
  std::string machineClass;
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
  /// records when a tuning run finished, else among all), whatever machine
  /// class measured it.
  std::optional<TrialRecord> best(const std::string &specHash,
                                  const std::string &target,
                                  const std::string &backend) const;

  /// What bestFor() chose, and from which machine class.
  struct Choice {
    TrialRecord record;
    std::string machineClass; ///< the record's class key ("" if unknown)
    double distance = 0;      ///< machineClassDistance to the wanted class
    bool sameClass() const { return distance == 0; }
    /// "measured on this machine class" / "nearest class ...".
    std::string describe() const;
  };
  /// The fastest correct record measured on the machine class `want`,
  /// else on the nearest class that has one (machineClassDistance;
  /// records without a class come last). Records `usable` refuses are
  /// left out.
  std::optional<Choice>
  bestFor(const std::string &specHash, const std::string &target,
          const std::string &backend, const MachineClass &want,
          const std::function<bool(const TrialRecord &)> &usable = {}) const;
  /// The machine classes of the records, in first-seen order.
  std::vector<std::string> machineClasses() const;

private:
  std::string path_;
  std::vector<TrialRecord> records_;
  std::vector<std::string> warnings_;
};

/// What mergeTuningDatabases did.
struct TuningDbMerge {
  int64_t records = 0;    ///< written
  int64_t duplicates = 0; ///< identical records dropped
  /// Records per machine class key ("" = unrecorded), in output order.
  std::vector<std::pair<std::string, int64_t>> perClass;
  std::vector<std::string> warnings; ///< torn lines skipped in the inputs
};

/// Merges databases into `output` (which may be one of the inputs): every
/// valid record once (a record that appears twice, byte for byte after
/// parsing, is kept once), grouped by machine class in first-seen order,
/// each group in input order. Written to a temporary file and renamed, so
/// a reader sees the old file or the whole new one. Throws if an input
/// does not exist or the output cannot be written.
TuningDbMerge mergeTuningDatabases(const std::vector<std::string> &inputs,
                                   const std::string &output);

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
