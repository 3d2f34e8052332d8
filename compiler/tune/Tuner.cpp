#include "mhagen/tune/Tuner.h"

#include "mhagen/driver/BackendRegistry.h"
#include "mhagen/machine/MachineClass.h"
#include "mhagen/support/Process.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <thread>

#ifndef MHAGEN_VERSION
#define MHAGEN_VERSION "0.0.0"
#endif

namespace mhagen {

namespace {

ScheduleSpace spaceFor(const AttentionSpec &s) {
  return kernelBackend(s.backend).scheduleSpace(s);
}

std::string paramsCsv(const ScheduleParams &p) {
  std::string s;
  for (const auto &[k, v] : p)
    s += (s.empty() ? "" : ",") + k + "=" + std::to_string(v);
  return s;
}

std::string shortDuration(double s) {
  char buf[32];
  if (s < 60)
    std::snprintf(buf, sizeof buf, "%.0fs", s);
  else
    std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s) / 60,
                  static_cast<int>(s) % 60);
  return buf;
}

// This machine's class: records measured on another class are not
// resumed from (their times say nothing about this one).
const std::string &hostClassKey() {
  static const std::string key = MachineClass::host().key();
  return key;
}

bool sameProblem(const TrialRecord &r, const TuneOptions &o) {
  return r.machineClass == hostClassKey() && r.B == o.B && r.T == o.T &&
         r.Tkv == (o.Tkv ? o.Tkv : o.T) && r.threads == o.threads;
}

} // namespace

TrialRecord runTrial(const TuneOptions &o, const ScheduleParams &p,
                     const std::string &phase, int reps, int index) {
  TrialRecord r;
  r.specHash = o.spec.hash();
  r.specCanonical = o.spec.canonical();
  r.target = o.spec.target.str();
  r.cpuModel = cpuModelName();
  r.machineClass = hostClassKey();
  r.backend = toString(o.spec.backend);
  r.mhagenVersion = MHAGEN_VERSION;
  r.params = p;
  r.B = o.B;
  r.T = o.T;
  r.Tkv = o.Tkv ? o.Tkv : o.T;
  r.threads = o.threads;
  r.reps = reps;
  r.timestamp = utcTimestamp();
  r.phase = phase;
  if (o.search.shardCount > 1)
    r.shard = std::to_string(o.search.shardIndex) + "/" +
              std::to_string(o.search.shardCount);
  std::random_device rd;
  r.trialId = (r.shard.empty() ? std::string("0") : r.shard) + "-" +
              std::to_string(index) + "-" + std::to_string(rd() % 100000);

  TrialRequest q;
  q.spec = o.spec;
  q.schedule = p;
  q.B = o.B;
  q.T = o.T;
  q.Tkv = o.Tkv ? o.Tkv : o.T;
  q.reps = reps;
  q.threads = o.threads;
  q.seed = 1;
  std::shared_ptr<TrialRunner> runner = o.runner;
  if (!runner)
    runner = std::make_shared<ProcessTrialRunner>(defaultTrialExecutable());
  const TrialOutcome out =
      runner->run(q, o.trialTimeoutSeconds, o.trialMemoryLimitBytes);
  switch (out.kind) {
  case TrialOutcome::Kind::TimedOut:
    r.status = TrialStatus::Timeout;
    r.error = "killed after " + shortDuration(o.trialTimeoutSeconds);
    return r;
  case TrialOutcome::Kind::Crashed:
    r.status = TrialStatus::Crash;
    r.error = out.diagnostics;
    return r;
  case TrialOutcome::Kind::Finished:
    break;
  }
  const TrialResult &t = out.result;
  if (!t.error.empty()) {
    r.status = TrialStatus::BuildError;
    r.error = t.error;
    return r;
  }
  r.medianMs = t.medianMs;
  r.minMs = t.minMs;
  r.maxAbsErr = t.maxAbsErr;
  r.timesMs = {r.medianMs};
  if (!t.withinTolerance) {
    r.status = TrialStatus::Wrong;
    r.error = "disagrees with the reference: max |err| " +
              std::to_string(r.maxAbsErr);
    return r;
  }
  r.status = TrialStatus::Ok;
  return r;
}

// The 1-minute load average (0 when unknown).
static double loadAverage() {
  std::ifstream in("/proc/loadavg");
  double load = 0;
  in >> load;
  return in ? load : 0;
}

namespace {

/// One tuning run: the search over one spec's space, its records in the
/// database, and the re-measurement of the best few.
class TuningRun {
public:
  TuningRun(const TuneOptions &o, TuningDb &db)
      : o_(o), db_(db), space_(spaceFor(o.spec)), log_(o.progress),
        hash_(o.spec.hash()), target_(o.spec.target.str()),
        backend_(toString(o.spec.backend)),
        shard_(o.search.shardCount > 1
                   ? std::to_string(o.search.shardIndex) + "/" +
                         std::to_string(o.search.shardCount)
                   : ""),
        start_(std::chrono::steady_clock::now()) {
    sum_.warnings = db.warnings();
    // A prefill call never runs the decode variant: its parameters would
    // only spend the budget on noise.
    if (auto pinned = pinParamsUnusedAt(space_, o.T); !pinned.empty() && log_) {
      *log_ << "T " << o.T << " never runs the decode variant: pinned";
      for (const std::string &n : pinned)
        *log_ << " " << n << "=" << space_.defaults.at(n);
      *log_ << "\n";
    }
  }

  TuneSummary run() {
    ScheduleSearch search(space_, o_.search);
    resume(search);
    searchLoop(search);
    remeasureFinalists();
    warnIfLoaded();
    sum_.seconds = elapsed();
    return sum_;
  }

private:
  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start_)
        .count();
  }
  /// --time bounds the whole run, re-measurements included: a trial starts
  /// only if it is expected (from the trials so far) to end in time.
  bool fits(double expectedSeconds) const {
    return o_.timeLimitSeconds <= 0 ||
           elapsed() + expectedSeconds <= o_.timeLimitSeconds;
  }
  /// A record of this spec, target, backend, problem and shard.
  bool ours(const TrialRecord &r) const {
    return sameProblem(r, o_) && r.shard == shard_ && r.phase != "remeasure";
  }
  void track(const TrialRecord &r) {
    if (r.status != TrialStatus::Ok) {
      ++sum_.failed;
      return;
    }
    ++sum_.ok;
    if (!sum_.best || r.medianMs < sum_.best->medianMs)
      sum_.best = r;
    if (r.params == space_.defaults &&
        (!sum_.baseline || r.medianMs < sum_.baseline->medianMs))
      sum_.baseline = r;
  }

  /// What the database already holds for this run counts toward the
  /// budget.
  void resume(ScheduleSearch &search) {
    for (const TrialRecord *r : db_.matching(hash_, target_, backend_)) {
      if (!ours(*r))
        continue;
      search.markSeen(r->params, r->status == TrialStatus::Ok, r->medianMs);
      ++sum_.resumed;
      track(*r);
    }
    index_ = sum_.resumed;
    if (log_ && sum_.resumed)
      *log_ << "resuming: " << sum_.resumed
            << " trials of this spec already in " << o_.dbPath << "\n";
  }

  void searchLoop(ScheduleSearch &search) {
    const int total = o_.search.budget;
    while (search.measured() < total) {
      if (!fits(perTrialSeconds_)) {
        if (log_)
          *log_ << "time limit: stopping after " << shortDuration(elapsed())
                << " (the next trial would end past "
                << shortDuration(o_.timeLimitSeconds) << ")\n";
        sum_.stoppedByTime = true;
        return;
      }
      std::string phase;
      std::optional<ScheduleParams> p = search.next(&phase);
      if (!p) {
        if (log_)
          *log_ << "the search space is exhausted\n";
        return;
      }
      TrialRecord r = runTrial(o_, *p, phase, o_.reps, ++index_);
      db_.append(r);
      search.report(*p, r.status == TrialStatus::Ok, r.medianMs);
      ++sum_.trials;
      track(r);
      perTrialSeconds_ = elapsed() / sum_.trials;
      if (log_)
        logTrial(search.measured(), total, phase, r, *p);
    }
  }

  void logTrial(int measured, int total, const std::string &phase,
                const TrialRecord &r, const ScheduleParams &p) {
    char line[512];
    std::snprintf(
        line, sizeof line, "[%d/%d] %-6s %-11s %9s | best %s | ETA %s | %s\n",
        measured, total, phase.c_str(), toString(r.status),
        r.status == TrialStatus::Ok
            ? (std::to_string(r.medianMs).substr(0, 7) + " ms").c_str()
            : "-",
        sum_.best
            ? (std::to_string(sum_.best->medianMs).substr(0, 7) + " ms").c_str()
            : "-",
        shortDuration(perTrialSeconds_ * (total - measured)).c_str(),
        paramsCsv(p).c_str());
    *log_ << line;
    if (r.status != TrialStatus::Ok)
      *log_ << "         " << r.error.substr(0, 200) << "\n";
    log_->flush();
  }

  /// The best few measured (and the default), fastest first.
  std::vector<ScheduleParams>
  finalists(const std::vector<const TrialRecord *> &ok) const {
    std::vector<ScheduleParams> out;
    for (size_t i = 0;
         i < ok.size() && out.size() < static_cast<size_t>(o_.remeasureTop);
         ++i)
      if (std::find(out.begin(), out.end(), ok[i]->params) == out.end())
        out.push_back(ok[i]->params);
    if (o_.remeasureTop > 0 && sum_.baseline &&
        std::find(out.begin(), out.end(), space_.defaults) == out.end())
      out.push_back(space_.defaults); // the speedup's denominator
    return out;
  }

  /// Re-measures the finalists with more repetitions; the re-measured
  /// medians decide.
  void remeasureFinalists() {
    std::vector<const TrialRecord *> ok;
    TuningDb after(o_.dbPath);
    for (const TrialRecord *r : after.matching(hash_, target_, backend_))
      if (r->status == TrialStatus::Ok && ours(*r))
        ok.push_back(r);
    std::sort(ok.begin(), ok.end(),
              [](const TrialRecord *a, const TrialRecord *b) {
                return a->medianMs < b->medianMs;
              });
    const std::vector<ScheduleParams> chosen = finalists(ok);
    std::optional<TrialRecord> best, baseline;
    const double remeasureSeconds =
        perTrialSeconds_ * std::max(1.0, static_cast<double>(o_.remeasureReps) /
                                             std::max(1, o_.reps));
    for (const ScheduleParams &p : chosen) {
      if (!fits(remeasureSeconds)) {
        if (log_)
          *log_ << "time limit: " << (chosen.size() - sum_.remeasured)
                << " re-measurements skipped\n";
        sum_.stoppedByTime = true;
        break;
      }
      TrialRecord r = runTrial(o_, p, "remeasure", o_.remeasureReps, ++index_);
      ++sum_.remeasured;
      db_.append(r);
      if (log_)
        *log_ << "re-measured " << paramsCsv(p) << ": "
              << (r.status == TrialStatus::Ok
                      ? std::to_string(r.medianMs) + " ms"
                      : toString(r.status))
              << "\n";
      if (r.status != TrialStatus::Ok)
        continue;
      if (!best || r.medianMs < best->medianMs)
        best = r;
      if (p == space_.defaults)
        baseline = r;
      warnIfNoisy(ok, p, r);
    }
    if (best)
      sum_.best = best;
    if (baseline)
      sum_.baseline = baseline;
  }

  /// The same schedule measured twice: a large gap means the machine was
  /// busy or noisy, and the ranking may not hold.
  void warnIfNoisy(const std::vector<const TrialRecord *> &ok,
                   const ScheduleParams &p, const TrialRecord &r) {
    for (const TrialRecord *first : ok)
      if (first->params == p && first->medianMs > 0) {
        double hi = std::max(first->medianMs, r.medianMs),
               lo = std::min(first->medianMs, r.medianMs);
        if (hi / lo > 1.15) {
          char w[256];
          std::snprintf(w, sizeof w,
                        "the same schedule measured %.3f ms, then %.3f ms "
                        "(%.0f%% apart): the machine was busy or noisy "
                        "while tuning",
                        first->medianMs, r.medianMs, 100.0 * (hi / lo - 1));
          sum_.warnings.push_back(w);
        }
        return;
      }
  }

  /// More runnable threads than CPUs means other work competed with the
  /// measurements.
  void warnIfLoaded() {
    if (double load = loadAverage(); load > 0) {
      const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
      if (load > cpus + 0.5) {
        char w[160];
        std::snprintf(w, sizeof w,
                      "load average %.2f on %u CPUs while tuning: other work "
                      "competed with the measurements",
                      load, cpus);
        sum_.warnings.push_back(w);
      }
    }
  }

  const TuneOptions &o_;
  TuningDb &db_;
  ScheduleSpace space_;
  std::ostream *log_;
  const std::string hash_, target_, backend_, shard_;
  const std::chrono::steady_clock::time_point start_;
  TuneSummary sum_;
  int index_ = 0;              ///< trials numbered so far, resumed included
  double perTrialSeconds_ = 0; ///< wall time per trial so far
};

} // namespace

TuneSummary runTuning(const TuneOptions &o) {
  // Temporary directories of tuners and trials killed earlier (kill -9)
  // are removed; this run's are removed on SIGTERM/SIGINT too.
  removeTempDirsOnSignals();
  if (int n = removeStaleTempDirs(); n > 0 && o.progress)
    *o.progress << "removed " << n
                << " temporary directories left by killed runs\n";
  // One tuner per database (and shard) at a time: a second one waits here
  // and then resumes from the first one's records instead of measuring the
  // same points again.
  TuningDbLock lock(o.dbPath, o.search.shardIndex, o.search.shardCount,
                    o.progress);
  TuningDb db(o.dbPath);
  return TuningRun(o, db).run();
}

} // namespace mhagen
