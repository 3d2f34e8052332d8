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

namespace {

/// The records of one (spec, target, backend, problem, machine class).
struct Group {
  std::string key;
  std::vector<const TrialRecord *> trials;
};

/// The database's records grouped, in the order groups first appear; only
/// the specs in `only` when it is not empty.
std::vector<Group> groupRecords(const TuningDb &db,
                                const std::vector<AttentionSpec> &only) {
  std::map<std::string, size_t> index;
  std::vector<Group> groups;
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
    auto [it, added] = index.emplace(key, groups.size());
    if (added)
      groups.push_back(Group{key, {}});
    groups[it->second].trials.push_back(&r);
  }
  return groups;
}

/// What a group's table shows.
struct GroupSummary {
  std::map<std::string, int> byStatus; ///< search trials by status
  int remeasures = 0;
  const TrialRecord *best = nullptr;   ///< fastest search trial
  const TrialRecord *bestRe = nullptr; ///< fastest re-measurement
  const TrialRecord *winner = nullptr; ///< what generate --db uses
  const TrialRecord *base = nullptr;   ///< the default point's best
  std::string kernelName;
};

GroupSummary summarize(const Group &g) {
  GroupSummary m;
  const TrialRecord *deflt = nullptr;
  for (const TrialRecord *r : g.trials) {
    if (r->phase != "remeasure")
      ++m.byStatus[toString(r->status)];
    m.remeasures += r->phase == "remeasure";
    if (r->status != TrialStatus::Ok)
      continue;
    if (r->phase == "remeasure") {
      if (!m.bestRe || r->medianMs < m.bestRe->medianMs)
        m.bestRe = r;
    } else if (!m.best || r->medianMs < m.best->medianMs) {
      m.best = r;
    }
    if (r->phase == "default" ||
        (r->phase == "remeasure" && deflt && r->params == deflt->params))
      deflt = r;
  }
  try {
    m.kernelName =
        parseSpecs(g.trials[0]->specCanonical, "db").at(0).kernelName();
  } catch (...) {
    m.kernelName = g.trials[0]->specHash;
  }
  m.winner = m.bestRe ? m.bestRe : m.best;
  // The default point's best measurement (re-measured if it was).
  for (const TrialRecord *r : g.trials)
    if (r->status == TrialStatus::Ok && deflt && r->params == deflt->params &&
        (!m.base || (r->phase == "remeasure" && m.base->phase != "remeasure")))
      m.base = r;
  return m;
}

/// Search trials and re-measurements are counted apart, as the tuner's
/// own log counts them.
void printTable(const Group &g, const GroupSummary &m) {
  const std::string problem = g.key.substr(0, g.key.find(" | "));
  std::printf("%s (%s)\n", m.kernelName.c_str(), problem.c_str());
  MachineClass c;
  const std::string &cls = g.trials[0]->machineClass;
  if (MachineClass::fromKey(cls, c, nullptr))
    std::printf(
        "  machine     %s%s\n              class: %s\n", c.brief().c_str(),
        c == MachineClass::host() ? " (this machine)" : "", cls.c_str());
  else
    std::printf("  machine     unrecorded class (%s)\n",
                g.trials[0]->cpuModel.c_str());
  std::printf("  trials      %zu (",
              g.trials.size() - static_cast<size_t>(m.remeasures));
  bool first = true;
  for (const auto &[st, n] : m.byStatus) {
    std::printf("%s%s %d", first ? "" : ", ", st.c_str(), n);
    first = false;
  }
  std::printf(") + %d re-measurements\n", m.remeasures);
  if (m.base)
    std::printf("  default     %.3f ms (%s)\n", m.base->medianMs,
                m.base->phase.c_str());
  if (m.best && m.bestRe)
    std::printf("  best trial  %.3f ms (%s, trial %s); re-measured with "
                "more repetitions below\n",
                m.best->medianMs, m.best->phase.c_str(),
                m.best->trialId.c_str());
  if (m.winner) {
    std::printf("  chosen      %.3f ms (%s, trial %s): what generate --db "
                "uses\n",
                m.winner->medianMs, m.winner->phase.c_str(),
                m.winner->trialId.c_str());
    std::printf("  best params %s\n", scheduleText(m.winner->params).c_str());
    if (m.base)
      std::printf("  speedup     %.2fx over the default schedule\n",
                  m.base->medianMs / m.winner->medianMs);
  }
}

/// The plot: search trials in order, then the re-measurements (status
/// "remeasure"), and the chosen record: the plot shows what the table
/// says.
void plotGroup(const Group &g, const GroupSummary &m, const std::string &png) {
  TempDir dir("mhagen-plot");
  std::string csv = "trial,status,median_ms\n";
  int n = 0;
  for (const TrialRecord *r : g.trials)
    if (r->phase != "remeasure")
      csv += std::to_string(++n) + "," + toString(r->status) + "," +
             std::to_string(r->medianMs) + "\n";
  for (const TrialRecord *r : g.trials)
    if (r->phase == "remeasure" && r->status == TrialStatus::Ok)
      csv += std::to_string(++n) + ",remeasure," + std::to_string(r->medianMs) +
             "\n";
  if (m.winner)
    csv += "0,chosen," + std::to_string(m.winner->medianMs) + "\n";
  writeFile(dir.file("data.csv"), csv);
  writeFile(dir.file("plot.py"), templateText("tuning_plot.py.in"));
  std::string title = m.kernelName + " on " + g.trials[0]->target + ", " +
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

} // namespace

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
  const std::vector<Group> groups = groupRecords(db, only);
  for (size_t i = 0; i < groups.size(); ++i) {
    const GroupSummary m = summarize(groups[i]);
    printTable(groups[i], m);
    // One plot per group, numbered when there are several.
    std::string png = plotPath.empty() ? dbPath + ".png" : plotPath;
    if (groups.size() > 1)
      png = png.substr(0, png.rfind(".png")) + "-" + std::to_string(i) + ".png";
    plotGroup(groups[i], m, png);
  }
  return true;
}

} // namespace mhagen
