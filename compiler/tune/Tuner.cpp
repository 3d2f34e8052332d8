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

TuneSummary runTuning(const TuneOptions &o) {
  TuneSummary sum;
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
  sum.warnings = db.warnings();
  ScheduleSpace space = spaceFor(o.spec);
  std::ostream *log = o.progress;
  // A prefill call never runs the decode variant: its parameters would
  // only spend the budget on noise (S1 on a Zen 4: the "best" of 60 trials
  // differed from the default only in split_tasks, 1.08x by chance).
  if (auto pinned = pinParamsUnusedAt(space, o.T); !pinned.empty() && log) {
    *log << "T " << o.T << " never runs the decode variant: pinned";
    for (const std::string &n : pinned)
      *log << " " << n << "=" << space.defaults.at(n);
    *log << "\n";
  }
  ScheduleSearch search(space, o.search);

  // Resume: what this database already holds for the same spec, target,
  // backend, problem and shard counts toward the budget.
  const std::string hash = o.spec.hash(), target = o.spec.target.str(),
                    backend = toString(o.spec.backend);
  std::string shard = o.search.shardCount > 1
                          ? std::to_string(o.search.shardIndex) + "/" +
                                std::to_string(o.search.shardCount)
                          : "";
  auto track = [&](const TrialRecord &r) {
    if (r.status == TrialStatus::Ok) {
      ++sum.ok;
      if (!sum.best || r.medianMs < sum.best->medianMs)
        sum.best = r;
      if (r.params == space.defaults &&
          (!sum.baseline || r.medianMs < sum.baseline->medianMs))
        sum.baseline = r;
    } else {
      ++sum.failed;
    }
  };
  for (const TrialRecord *r : db.matching(hash, target, backend)) {
    if (!sameProblem(*r, o) || r->shard != shard || r->phase == "remeasure")
      continue;
    search.markSeen(r->params, r->status == TrialStatus::Ok, r->medianMs);
    ++sum.resumed;
    track(*r);
  }
  if (log && sum.resumed)
    *log << "resuming: " << sum.resumed << " trials of this spec already in "
         << o.dbPath << "\n";

  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start)
        .count();
  };
  const int total = o.search.budget;
  int index = sum.resumed;
  // --time bounds the whole run, re-measurements included: a trial starts
  // only if it is expected (from the trials so far) to end in time.
  double perTrialSeconds = 0;
  auto fits = [&](double expectedSeconds) {
    return o.timeLimitSeconds <= 0 ||
           elapsed() + expectedSeconds <= o.timeLimitSeconds;
  };
  while (search.measured() < total) {
    if (!fits(perTrialSeconds)) {
      if (log)
        *log << "time limit: stopping after " << shortDuration(elapsed())
             << " (the next trial would end past "
             << shortDuration(o.timeLimitSeconds) << ")\n";
      sum.stoppedByTime = true;
      break;
    }
    std::string phase;
    std::optional<ScheduleParams> p = search.next(&phase);
    if (!p) {
      if (log)
        *log << "the search space is exhausted\n";
      break;
    }
    ++index;
    TrialRecord r = runTrial(o, *p, phase, o.reps, index);
    db.append(r);
    search.report(*p, r.status == TrialStatus::Ok, r.medianMs);
    ++sum.trials;
    track(r);
    perTrialSeconds = elapsed() / sum.trials;
    if (log) {
      double perTrial = perTrialSeconds;
      char line[512];
      std::snprintf(
          line, sizeof line, "[%d/%d] %-6s %-11s %9s | best %s | ETA %s | %s\n",
          search.measured(), total, phase.c_str(), toString(r.status),
          r.status == TrialStatus::Ok
              ? (std::to_string(r.medianMs).substr(0, 7) + " ms").c_str()
              : "-",
          sum.best ? (std::to_string(sum.best->medianMs).substr(0, 7) + " ms")
                         .c_str()
                   : "-",
          shortDuration(perTrial * (total - search.measured())).c_str(),
          paramsCsv(*p).c_str());
      *log << line;
      if (r.status != TrialStatus::Ok)
        *log << "         " << r.error.substr(0, 200) << "\n";
      log->flush();
    }
  }

  // Re-measure the best few (and the default) with more repetitions; the
  // re-measured medians decide.
  std::vector<const TrialRecord *> ok;
  TuningDb after(o.dbPath);
  for (const TrialRecord *r : after.matching(hash, target, backend))
    if (r->status == TrialStatus::Ok && sameProblem(*r, o) &&
        r->shard == shard && r->phase != "remeasure")
      ok.push_back(r);
  std::sort(ok.begin(), ok.end(),
            [](const TrialRecord *a, const TrialRecord *b) {
              return a->medianMs < b->medianMs;
            });
  std::vector<ScheduleParams> finalists;
  for (size_t i = 0;
       i < ok.size() && finalists.size() < static_cast<size_t>(o.remeasureTop);
       ++i)
    if (std::find(finalists.begin(), finalists.end(), ok[i]->params) ==
        finalists.end())
      finalists.push_back(ok[i]->params);
  if (o.remeasureTop > 0 && sum.baseline &&
      std::find(finalists.begin(), finalists.end(), space.defaults) ==
          finalists.end())
    finalists.push_back(space.defaults); // the speedup's denominator
  std::optional<TrialRecord> best, baseline;
  const double remeasureSeconds =
      perTrialSeconds *
      std::max(1.0, static_cast<double>(o.remeasureReps) / std::max(1, o.reps));
  for (const ScheduleParams &p : finalists) {
    if (!fits(remeasureSeconds)) {
      if (log)
        *log << "time limit: " << (finalists.size() - sum.remeasured)
             << " re-measurements skipped\n";
      sum.stoppedByTime = true;
      break;
    }
    TrialRecord r = runTrial(o, p, "remeasure", o.remeasureReps, ++index);
    ++sum.remeasured;
    db.append(r);
    if (log)
      *log << "re-measured " << paramsCsv(p) << ": "
           << (r.status == TrialStatus::Ok ? std::to_string(r.medianMs) + " ms"
                                           : toString(r.status))
           << "\n";
    if (r.status != TrialStatus::Ok)
      continue;
    if (!best || r.medianMs < best->medianMs)
      best = r;
    if (p == space.defaults)
      baseline = r;
    // The same schedule measured twice: a large gap means the machine was
    // busy or noisy, and the ranking may not hold.
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
          sum.warnings.push_back(w);
        }
        break;
      }
  }
  // The load seen: more runnable threads than CPUs means other work
  // competed with the measurements.
  if (double load = loadAverage(); load > 0) {
    const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
    if (load > cpus + 0.5) {
      char w[160];
      std::snprintf(w, sizeof w,
                    "load average %.2f on %u CPUs while tuning: other work "
                    "competed with the measurements",
                    load, cpus);
      sum.warnings.push_back(w);
    }
  }
  sum.seconds = elapsed();
  if (best)
    sum.best = best;
  if (baseline)
    sum.baseline = baseline;
  return sum;
}

} // namespace mhagen
