// Stands in for mhagen-trial in tuner tests: the same protocol
// (REQUEST.json RESULT.json, mhagen/eval/Trial.h), but the "time" is a
// fixed function of the schedule (a landscape with one best point), so the
// search is deterministic and fast. Faults are injected here, in the test,
// never in the product: FAKE_TRIAL_FAULTS="key_tile=32:wrong,stage_kv=0:
// crash,task_order=1:hang" makes the trials of matching points fail so.
#include "mhagen/eval/Trial.h"
#include "mhagen/support/Process.h"

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>

namespace {

// The fault for this schedule, from FAKE_TRIAL_FAULTS ("" if none).
std::string faultFor(const mhagen::ScheduleParams &p) {
  const char *env = std::getenv("FAKE_TRIAL_FAULTS");
  if (!env)
    return "";
  std::stringstream ss(env);
  for (std::string rule; std::getline(ss, rule, ',');) {
    const size_t eq = rule.find('='), colon = rule.rfind(':');
    if (eq == std::string::npos || colon == std::string::npos || colon < eq)
      continue;
    auto it = p.find(rule.substr(0, eq));
    if (it != p.end() &&
        std::to_string(it->second) == rule.substr(eq + 1, colon - eq - 1))
      return rule.substr(colon + 1);
  }
  return "";
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 3)
    return 2;
  mhagen::TrialRequest q =
      mhagen::TrialRequest::fromJson(mhagen::readFile(argv[1]));
  mhagen::ScheduleParams &p = q.schedule;
  const std::string fault = faultFor(p);
  // Durability tests slow each trial down so that kills land mid-run.
  if (const char *ms = std::getenv("FAKE_RUNNER_SLEEP_MS"))
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atol(ms)));
  if (fault == "crash")
    std::raise(SIGSEGV);
  if (fault == "hang")
    for (;;)
      std::this_thread::sleep_for(std::chrono::seconds(1));
  // Best at key_tile 64, tokens_per_tile 16, s_keys 8, pv_chans 8.
  const double ms = 10.0 + std::fabs(std::log2(p["key_tile"] / 64.0)) * 3 +
                    std::fabs(std::log2(p["tokens_per_tile"] / 16.0)) * 2 +
                    std::fabs(p["s_keys"] - 8.0) * 0.5 +
                    std::fabs(p["pv_chans"] - 8.0) * 0.5 +
                    (p["stage_kv"] ? 0.0 : 1.0);
  mhagen::TrialResult r;
  r.built = true;
  r.variant = "fake";
  r.medianMs = ms;
  r.minMs = ms * 0.98;
  r.reps = q.reps;
  r.maxAbsErr = fault == "wrong" ? 1.0 : 1e-7;
  r.withinTolerance = fault != "wrong";
  mhagen::writeFileAtomic(argv[2], r.toJson());
  return 0;
}
