#include "HostSteal.h"

#include <fstream>
#include <sstream>
#include <string>

namespace mhagen::bench {

CpuTicks readCpuTicks() {
  // cpu  user nice system idle iowait irq softirq steal guest guest_nice;
  // guest time is already counted in user, so it is left out of the total.
  std::ifstream stat("/proc/stat");
  std::string line, label;
  CpuTicks t;
  if (!std::getline(stat, line))
    return t;
  std::istringstream fields(line);
  fields >> label;
  if (label != "cpu")
    return t;
  uint64_t v[8] = {};
  for (uint64_t &x : v)
    if (!(fields >> x))
      return CpuTicks{};
  for (uint64_t x : v)
    t.total += x;
  t.steal = v[7];
  return t;
}

double stealPercent(const CpuTicks &before, const CpuTicks &after) {
  if (after.total <= before.total || after.steal < before.steal)
    return 0;
  return 100.0 * static_cast<double>(after.steal - before.steal) /
         static_cast<double>(after.total - before.total);
}

} // namespace mhagen::bench
