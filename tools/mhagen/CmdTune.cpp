// mhagen tune: search a spec's schedule space on this machine, record every
// trial in a tuning database, and report (table + PNG plot, TuneReport.h).
// This file parses flags and calls the tuner library.
#include "Commands.h"
#include "SpecOptions.h"

#include "mhagen/driver/Driver.h"
#include "mhagen/spec/SpecParser.h"
#include "mhagen/support/Process.h"
#include "mhagen/tune/TuneReport.h"
#include "mhagen/tune/TuneShard.h"
#include "mhagen/tune/Tuner.h"
#include "mhagen/tune/TuningDb.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
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

// mhagen tune --merge A B ... -o OUT.
int mergeDatabases(const std::vector<std::string> &inputs,
                   const std::string &output) {
  if (inputs.empty() || output.empty()) {
    std::cerr << "error: --merge needs the databases to merge and -o, the "
                 "merged database (e.g. --merge a.jsonl b.jsonl -o "
                 "all.jsonl)\n";
    return kExitUsage;
  }
  try {
    TuningDbMerge m = mergeTuningDatabases(inputs, output);
    for (const std::string &w : m.warnings)
      std::cerr << "warning: " << w << "\n";
    std::printf("%s: %lld records from %zu databases (%lld duplicates "
                "dropped)\n",
                output.c_str(), static_cast<long long>(m.records),
                inputs.size(), static_cast<long long>(m.duplicates));
    for (const auto &[cls, n] : m.perClass) {
      MachineClass c;
      std::printf("  %6lld  %s\n", static_cast<long long>(n),
                  MachineClass::fromKey(cls, c, nullptr)
                      ? c.brief().c_str()
                      : "unrecorded machine class");
    }
    return kExitOk;
  } catch (const std::exception &e) {
    std::cerr << "mhagen tune --merge: error: " << e.what() << "\n";
    return kExitFailure;
  }
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
    int shards = 0;
    std::vector<std::string> merge;
    std::string output;
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
  cmd->add_option("--shards", o->shards,
                  "shard count for an indexed Kubernetes Job (the index comes "
                  "from JOB_COMPLETION_INDEX); under Slurm the shard comes "
                  "from SLURM_ARRAY_TASK_ID/COUNT with no flag")
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--merge", o->merge,
                  "merge these databases into -o (deduplicated, grouped by "
                  "machine class); no tuning")
      ->expected(1, -1);
  cmd->add_option("-o,--output", o->output, "the merged database (--merge)");
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
  cmd->callback([o, cmd, &exitCode] {
    if (!o->merge.empty() || !o->output.empty()) {
      // Merging reads only the databases: any tuning or spec flag would be
      // ignored, so it is refused.
      for (const CLI::Option *opt : cmd->get_options())
        if (opt->count() > 0 && opt->get_name() != "--merge" &&
            opt->get_name() != "--output" && opt->get_name() != "--help") {
          std::cerr << "error: " << opt->get_name(false, true)
                    << " does not apply to --merge, which only merges "
                       "databases into -o; drop it\n";
          exitCode = kExitUsage;
          return;
        }
      exitCode = mergeDatabases(o->merge, o->output);
      return;
    }
    std::vector<AttentionSpec> specs;
    try {
      if (!(o->report && o->spec.files().empty()))
        specs = o->spec.build();
      if (o->report) {
        bool explicitSpecs = !o->spec.files().empty();
        exitCode =
            printTuningReport(
                o->db, explicitSpecs ? specs : std::vector<AttentionSpec>{},
                o->plot)
                ? kExitOk
                : kExitFailure;
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
    TuneShard shard;
    std::string why;
    if (!resolveTuneShard(
            o->shard, o->shards,
            [](const char *name) { return std::getenv(name); }, shard, &why)) {
      std::cerr << "error: " << why << "\n";
      exitCode = kExitUsage;
      return;
    }
    t.search.shardIndex = shard.index;
    t.search.shardCount = shard.count;
    if (!shard.source.empty() && shard.source != "--shard")
      std::cerr << "shard " << shard.index << "/" << shard.count << " (from "
                << shard.source << ")\n";
    if (!o->time.empty()) {
      t.timeLimitSeconds = parseDuration(o->time);
      if (t.timeLimitSeconds <= 0) {
        std::cerr << "error: --time " << o->time
                  << ": expected a duration such as 90s, 10m or 1h\n";
        exitCode = kExitUsage;
        return;
      }
    }
    t.B = o->B;
    t.T = o->T;
    t.Tkv = o->Tkv;
    t.threads = o->threads;
    t.reps = o->reps;
    t.remeasureTop = o->remeasure;
    t.trialTimeoutSeconds = o->trialTimeout;
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
                      scheduleText(sum.best->params).c_str());
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
