// Small helpers both Halide schedules (CpuSchedule, GpuSchedule) use.
#ifndef MHAGEN_HALIDE_SCHEDULEHELPERS_H
#define MHAGEN_HALIDE_SCHEDULEHELPERS_H

#include "mhagen/spec/BackendResult.h"
#include "mhagen/spec/ScheduleParams.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace mhagen::hl {

/// A parameter of a resolved schedule (the backend checked it exists).
inline int64_t get(const ScheduleParams &p, const char *name) {
  auto it = p.find(name);
  if (it == p.end())
    throw BackendError("schedule", std::string("missing parameter ") + name);
  return it->second;
}

/// x / m rounded up: how many blocks of m cover x.
inline int64_t ceilDiv(int64_t x, int64_t m) { return (x + m - 1) / m; }

inline int64_t roundUp(int64_t x, int64_t m) { return ceilDiv(x, m) * m; }

/// Divisors of n that are <= limit, ascending.
inline std::vector<int64_t> divisorsUpTo(int64_t n, int64_t limit) {
  std::vector<int64_t> d;
  for (int64_t k = 1; k <= std::min(n, limit); ++k)
    if (n % k == 0)
      d.push_back(k);
  return d;
}

} // namespace mhagen::hl

#endif
