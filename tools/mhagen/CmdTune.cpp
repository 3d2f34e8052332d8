// mhagen tune: search a spec's schedule space on this machine, record every
// trial in a tuning database, and report (table + PNG plot).
#include "Commands.h"
#include "SpecOptions.h"

#include "mhagen/driver/Driver.h"
#include "mhagen/spec/SpecParser.h"
#include "mhagen/support/Process.h"
#include "mhagen/templates/Templates.h"
#include "mhagen/tune/Tuner.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

namespace mhagen::cli {

namespace {

// "90", "90s", "10m", "1h" -> seconds; -1 if malformed.
double parseDuration(const std::string &s) {
  if (s.empty())
    return -1;
  double unit = 1;
  std::string num = s;
  switch (s.back()) {
  case 's':
    num.pop_back();
    break;
  case 'm':
    unit = 60;
    num.pop_back();
    break;
  case 'h':
    unit = 3600;
    num.pop_back();
    break;
  default:
    break;
  }
  try {
    size_t used = 0;
    double v = std::stod(num, &used);
    if (used != num.size() || v <= 0)
      return -1;
    return v * unit;
  } catch (...) {
    return -1;
  }
}

std::string csvParams(const ScheduleParams &p) {
  std::string s;
  for (const auto &[k, v] : p)
    s += (s.empty() ? "" : " ") + k + "=" + std::to_string(v);
  return s;
}

// Summary table and plot of every (spec, target, backend, problem) group
// in the database.
int report(const std::string &dbPath, const std::vector<AttentionSpec> &only,
           const std::string &plotPath) {
  TuningDb db(dbPath);
  for (const std::string &w : db.warnings())
    std::cerr << "warning: " << w << "\n";
  if (db.records().empty()) {
    std::cerr << "mhagen tune --report: no records in " << dbPath << "\n";
    return kExitFailure;
  }
  struct Group {
    std::vector<const TrialRecord *> trials;
  };
  std::map<std::string, Group> groups;
  std::vector<std::string> order;
  for (const TrialRecord &r : db.records()) {
    if (!only.empty()) {
      bool wanted = false;
      for (const AttentionSpec &s : only)
        wanted |= s.hash() == r.specHash;
      if (!wanted)
        continue;
    }
    std::string key = r.specHash + " " + r.target + " " + r.backend + " B" +
                      std::to_string(r.B) + " T" + std::to_string(r.T) +
                      " Tkv" + std::to_string(r.Tkv) + " threads" +
                      std::to_string(r.threads);
    if (!groups.count(key))
      order.push_back(key);
    groups[key].trials.push_back(&r);
  }
  int plotIndex = 0;
  for (const std::string &key : order) {
    const Group &g = groups[key];
    std::map<std::string, int> byStatus;
    const TrialRecord *best = nullptr, *bestRe = nullptr, *deflt = nullptr;
    std::string kernelName;
    for (const TrialRecord *r : g.trials) {
      if (r->phase != "remeasure")
        ++byStatus[toString(r->status)];
      if (r->status != TrialStatus::Ok)
        continue;
      if (r->phase == "remeasure") {
        if (!bestRe || r->medianMs < bestRe->medianMs)
          bestRe = r;
      } else if (!best || r->medianMs < best->medianMs) {
        best = r;
      }
      if (r->phase == "default" ||
          (r->phase == "remeasure" && deflt && r->params == deflt->params))
        deflt = r;
    }
    if (!g.trials.empty()) {
      try {
        kernelName =
            parseSpecs(g.trials[0]->specCanonical, "db").at(0).kernelName();
      } catch (...) {
        kernelName = g.trials[0]->specHash;
      }
    }
    // Search trials and re-measurements are counted apart, as the tuner's
    // own log counts them.
    int remeasures = 0;
    for (const TrialRecord *r : g.trials)
      remeasures += r->phase == "remeasure";
    std::printf("%s (%s)\n", kernelName.c_str(), key.c_str());
    std::printf("  trials      %zu (",
                g.trials.size() - static_cast<size_t>(remeasures));
    bool first = true;
    for (const auto &[st, n] : byStatus) {
      std::printf("%s%s %d", first ? "" : ", ", st.c_str(), n);
      first = false;
    }
    std::printf(") + %d re-measurements\n", remeasures);
    const TrialRecord *winner = bestRe ? bestRe : best;
    // The default point's best measurement (re-measured if it was).
    const TrialRecord *base = nullptr;
    for (const TrialRecord *r : g.trials)
      if (r->status == TrialStatus::Ok && deflt && r->params == deflt->params &&
          (!base || (r->phase == "remeasure" && base->phase != "remeasure")))
        base = r;
    if (base)
      std::printf("  default     %.3f ms (%s)\n", base->medianMs,
                  base->phase.c_str());
    if (best && bestRe)
      std::printf("  best trial  %.3f ms (%s, trial %s); re-measured with "
                  "more repetitions below\n",
                  best->medianMs, best->phase.c_str(), best->trialId.c_str());
    if (winner) {
      std::printf("  chosen      %.3f ms (%s, trial %s): what generate --db "
                  "uses\n",
                  winner->medianMs, winner->phase.c_str(),
                  winner->trialId.c_str());
      std::printf("  best params %s\n", csvParams(winner->params).c_str());
      if (base)
        std::printf("  speedup     %.2fx over the default schedule\n",
                    base->medianMs / winner->medianMs);
    }
    // The plot: trials in order, best so far.
    std::string png = plotPath.empty() ? dbPath + ".png" : plotPath;
    if (order.size() > 1) {
      size_t dot = png.rfind(".png");
      png = png.substr(0, dot) + "-" + std::to_string(plotIndex) + ".png";
    }
    ++plotIndex;
    TempDir dir("mhagen-plot");
    // Search trials in order, then the re-measurements (status
    // "remeasure"), and the chosen record: the plot shows what the table
    // says.
    std::string csv = "trial,status,median_ms\n";
    int n = 0;
    for (const TrialRecord *r : g.trials)
      if (r->phase != "remeasure")
        csv += std::to_string(++n) + "," + toString(r->status) + "," +
               std::to_string(r->medianMs) + "\n";
    for (const TrialRecord *r : g.trials)
      if (r->phase == "remeasure" && r->status == TrialStatus::Ok)
        csv += std::to_string(++n) + ",remeasure," +
               std::to_string(r->medianMs) + "\n";
    if (winner)
      csv += "0,chosen," + std::to_string(winner->medianMs) + "\n";
    writeFile(dir.file("data.csv"), csv);
    writeFile(dir.file("plot.py"), templateText("tuning_plot.py.in"));
    std::string title = kernelName + " on " + g.trials[0]->target + ", " +
                        g.trials[0]->cpuModel;
    // Debian's python3 has python3-matplotlib (scripts/setup-deps.sh);
    // another python3 first on PATH may not.
    const std::string python =
        fileExists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
    ProcessResult pr = runProcess(
        {python, dir.file("plot.py"), dir.file("data.csv"), png, title}, 120);
    if (pr.exitCode == 0)
      std::printf("  plot        %s\n", png.c_str());
    else
      std::printf("  plot        not written (python3 with matplotlib is "
                  "needed): %s\n",
                  pr.output.substr(0, 200).c_str());
  }
  return kExitOk;
}

} // namespace

void addTuneCommand(CLI::App &app, int &exitCode) {
  auto *cmd = app.add_subcommand(
      "tune", "Search the schedule space of a spec on this machine");
  struct Opts {
    SpecOptions spec;
    int budget = 60;
    std::string time;
    std::string db = "mhagen-tuning.jsonl";
    std::string shard;
    std::string strategy = "evolve";
    uint32_t seed = 1;
    int64_t B = 1, T = 512, Tkv = 0;
    int threads = 0;
    int reps = 5;
    int remeasure = 3;
    double trialTimeout = 300;
    bool report = false;
    std::string plot;
    std::vector<std::string> injectFaults;
  };
  auto o = std::make_shared<Opts>();
  o->spec.addTo(*cmd);
  cmd->add_option("--budget", o->budget, "trials (the default point included)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--time", o->time,
                  "stop after this long (e.g. 90s, 10m, 1h), budget or not");
  cmd->add_option("--db", o->db, "tuning database (JSON lines)")
      ->capture_default_str();
  cmd->add_option("--shard", o->shard,
                  "i/n: measure only the i-th of n disjoint parts of the "
                  "space (databases of all shards concatenate)");
  cmd->add_option("--strategy", o->strategy, "evolve | random")
      ->capture_default_str()
      ->check(CLI::IsMember({"evolve", "random"}));
  cmd->add_option("--seed", o->seed, "search seed")->capture_default_str();
  // Every flag is checked here, before any trial runs or any record is
  // written.
  cmd->add_option("--B", o->B, "batch to tune for")
      ->capture_default_str()
      ->check(sizeRange());
  cmd->add_option("--T", o->T, "query tokens to tune for")
      ->capture_default_str()
      ->check(sizeRange());
  cmd->add_option("--Tkv", o->Tkv, "key/value tokens (default: T)")
      ->check(sizeRange());
  cmd->add_option("--threads", o->threads, "kernel threads (default: all)")
      ->check(threadRange());
  cmd->add_option("--reps", o->reps, "timed repetitions per trial")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
  cmd->add_option("--remeasure", o->remeasure,
                  "re-measure this many of the best at the end")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  cmd->add_option("--trial-timeout", o->trialTimeout,
                  "seconds before a trial is killed")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 86400.0));
  cmd->add_flag("--report", o->report,
                "print a summary of the database and plot it (no tuning)");
  cmd->add_option("--plot", o->plot, "PNG path for --report (default DB.png)");
  cmd->add_option("--inject-fault", o->injectFaults,
                  "testing: NAME=VALUE:crash|wrong|hang makes those trials "
                  "fail that way")
      ->group("");
  cmd->callback([o, &exitCode] {
    std::vector<AttentionSpec> specs;
    try {
      if (!(o->report && o->spec.files().empty()))
        specs = o->spec.build();
      if (o->report) {
        bool explicitSpecs = !o->spec.files().empty();
        exitCode =
            report(o->db, explicitSpecs ? specs : std::vector<AttentionSpec>{},
                   o->plot);
        return;
      }
    } catch (const SpecError &e) {
      std::cerr << e.what() << "\n";
      exitCode = kExitUsage;
      return;
    }
    TuneOptions t;
    t.dbPath = o->db;
    t.search.budget = o->budget;
    t.search.strategy = o->strategy;
    t.search.seed = o->seed;
    if (!o->shard.empty()) {
      int i = -1, n = 0;
      if (std::sscanf(o->shard.c_str(), "%d/%d", &i, &n) != 2 || n < 1 ||
          i < 0 || i >= n) {
        std::cerr << "error: --shard " << o->shard
                  << ": expected i/n with 0 <= i < n\n";
        exitCode = kExitUsage;
        return;
      }
      t.search.shardIndex = i;
      t.search.shardCount = n;
    }
    if (!o->time.empty()) {
      t.timeLimitSeconds = parseDuration(o->time);
      if (t.timeLimitSeconds <= 0) {
        std::cerr << "error: --time " << o->time
                  << ": expected a duration such as 90s, 10m or 1h\n";
        exitCode = kExitUsage;
        return;
      }
    }
    for (const std::string &f : o->injectFaults) {
      size_t colon = f.rfind(':');
      if (colon == std::string::npos) {
        std::cerr << "error: --inject-fault " << f
                  << ": expected NAME=VALUE:crash|wrong|hang\n";
        exitCode = kExitUsage;
        return;
      }
      t.injectFaults[f.substr(0, colon)] = f.substr(colon + 1);
    }
    t.B = o->B;
    t.T = o->T;
    t.Tkv = o->Tkv;
    t.threads = o->threads;
    t.reps = o->reps;
    t.remeasureTop = o->remeasure;
    t.trialTimeoutSeconds = o->trialTimeout;
    t.mhagenExe = executableDir() + "/mhagen";
    t.progress = &std::cerr;
    int worst = kExitOk;
    for (AttentionSpec s : specs) {
      try {
        s.target = resolveTarget(s.target, s.dtype);
        if (s.T)
          t.T = *s.T;
        if (s.T_kv)
          t.Tkv = *s.T_kv;
        if (s.B)
          t.B = *s.B;
        t.spec = s;
        std::cerr << "tuning " << s.kernelName() << " on " << s.target.str()
                  << " (" << toString(s.backend) << "), B " << t.B << ", T "
                  << t.T << ", budget " << t.search.budget << " trials, "
                  << t.search.strategy << " search, database " << t.dbPath
                  << "\n";
        TuneSummary sum = runTuning(t);
        for (const std::string &w : sum.warnings)
          std::cerr << "warning: " << w << "\n";
        std::printf("%s: %d trials (%d resumed), %d correct, %d failed\n",
                    s.kernelName().c_str(), sum.trials + sum.resumed,
                    sum.resumed, sum.ok, sum.failed);
        std::printf("  + %d re-measurements, %.1f s in all%s\n", sum.remeasured,
                    sum.seconds,
                    sum.stoppedByTime ? " (stopped by --time)" : "");
        if (sum.baseline)
          std::printf("  default schedule %.3f ms\n", sum.baseline->medianMs);
        if (sum.best) {
          std::printf("  best schedule    %.3f ms: %s\n", sum.best->medianMs,
                      csvParams(sum.best->params).c_str());
          if (sum.baseline)
            std::printf("  speedup          %.2fx\n",
                        sum.baseline->medianMs / sum.best->medianMs);
        } else {
          std::printf("  no correct schedule found\n");
          worst = kExitFailure;
        }
      } catch (const std::exception &e) {
        std::cerr << "mhagen tune: error: " << e.what() << "\n";
        worst = kExitFailure;
      }
    }
    exitCode = worst;
  });
}

} // namespace mhagen::cli
