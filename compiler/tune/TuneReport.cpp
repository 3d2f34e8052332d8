// The tuning report (TuneReport.h): a table per (spec, target, backend,
// problem) group of a database, and its plot.
#include "mhagen/tune/TuneReport.h"

#include "mhagen/spec/SpecParser.h"
#include "mhagen/support/Process.h"
#include "mhagen/templates/Templates.h"
#include "mhagen/tune/TuningDb.h"

#include <cstdio>
#include <iostream>
#include <map>

namespace mhagen {

std::string scheduleText(const ScheduleParams &p) {
  std::string s;
  for (const auto &[k, v] : p)
    s += (s.empty() ? "" : " ") + k + "=" + std::to_string(v);
  return s;
}

bool printTuningReport(const std::string &dbPath,
                       const std::vector<AttentionSpec> &only,
                       const std::string &plotPath) {
  TuningDb db(dbPath);
  for (const std::string &w : db.warnings())
    std::cerr << "warning: " << w << "\n";
  if (db.records().empty()) {
    std::cerr << "mhagen tune --report: no records in " << dbPath << "\n";
    return false;
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
    std::string key =
        r.specHash + " " + r.target + " " + r.backend + " B" +
        std::to_string(r.B) + " T" + std::to_string(r.T) + " Tkv" +
        std::to_string(r.Tkv) + " threads" + std::to_string(r.threads) + " | " +
        (r.machineClass.empty() ? "unrecorded machine class" : r.machineClass);
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
    const std::string problem = key.substr(0, key.find(" | "));
    std::printf("%s (%s)\n", kernelName.c_str(), problem.c_str());
    {
      MachineClass c;
      const std::string &cls = g.trials[0]->machineClass;
      if (MachineClass::fromKey(cls, c, nullptr))
        std::printf(
            "  machine     %s%s\n              class: %s\n", c.brief().c_str(),
            c == MachineClass::host() ? " (this machine)" : "", cls.c_str());
      else
        std::printf("  machine     unrecorded class (%s)\n",
                    g.trials[0]->cpuModel.c_str());
    }
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
      std::printf("  best params %s\n", scheduleText(winner->params).c_str());
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
  return true;
}

} // namespace mhagen
