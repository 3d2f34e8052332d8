// What every backend shares: applying schedule overrides, checking emit
// kinds (KernelBackend.h).
#include "mhagen/backend/KernelBackend.h"

namespace mhagen {

ScheduleParams resolveSchedule(const ScheduleSpace &space,
                               const ScheduleParams &overrides,
                               const std::string &whose) {
  ScheduleParams p = space.defaults;
  for (const auto &[k, v] : overrides) {
    if (!p.count(k)) {
      std::string known;
      for (const auto &d : space.params)
        known += (known.empty() ? "" : ", ") + d.name;
      throw BackendError("schedule", "unknown schedule parameter '" + k +
                                         "' for " + whose +
                                         "; known: " + known);
    }
    p[k] = v;
  }
  if (std::string why = space.violation ? space.violation(p) : ""; !why.empty())
    throw BackendError("schedule", why);
  return p;
}

std::string refusalOf(const std::function<void()> &check) {
  try {
    check();
  } catch (const BackendError &e) {
    return e.what();
  }
  return "";
}

void checkEmitKinds(
    const std::set<std::string> &requested,
    const std::function<bool(const std::string &)> &allowed,
    const std::function<std::string(const std::string &)> &why) {
  for (const std::string &e : requested)
    if (!allowed(e))
      throw BackendError("emit", why(e));
}

} // namespace mhagen
