// The trial process protocol (TrialRunner.h).
#include "mhagen/tune/TrialRunner.h"

#include "mhagen/support/Process.h"

#include <stdexcept>

namespace mhagen {

namespace {

std::string tail(const std::string &s) {
  std::string t = s.size() > 400 ? s.substr(s.size() - 400) : s;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' '))
    t.pop_back();
  return t;
}

} // namespace

TrialOutcome ProcessTrialRunner::run(const TrialRequest &request,
                                     double timeoutSeconds,
                                     size_t memoryLimitBytes) {
  TrialOutcome out;
  TempDir dir("mhagen-trial-io");
  const std::string req = dir.file("request.json");
  const std::string res = dir.file("result.json");
  writeFile(req, request.toJson());
  ProcessResult pr =
      runProcess({executable_, req, res}, timeoutSeconds, memoryLimitBytes);
  if (pr.timedOut) {
    out.kind = TrialOutcome::Kind::TimedOut;
    return out;
  }
  if (pr.exitCode >= 128 || pr.exitCode < 0) {
    out.kind = TrialOutcome::Kind::Crashed;
    out.diagnostics = "the trial process died (status " +
                      std::to_string(pr.exitCode) + "): " + tail(pr.output);
    return out;
  }
  if (!fileExists(res)) {
    out.kind = TrialOutcome::Kind::Crashed;
    out.diagnostics = "no result from the trial process (exit " +
                      std::to_string(pr.exitCode) + "): " + tail(pr.output);
    return out;
  }
  try {
    out.result = TrialResult::fromJson(readFile(res));
  } catch (const std::exception &e) {
    out.kind = TrialOutcome::Kind::Crashed;
    out.diagnostics = std::string("unreadable trial result: ") + e.what();
  }
  return out;
}

std::string defaultTrialExecutable() {
  for (const char *rel : {"/mhagen-trial", "/../mhagen-trial/mhagen-trial"}) {
    const std::string p = executableDir() + rel;
    if (fileExists(p))
      return p;
  }
  throw std::runtime_error("mhagen-trial is not installed next to " +
                           executableDir());
}

} // namespace mhagen
