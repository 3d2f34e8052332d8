// The share of this VM's CPU time the hypervisor gave to someone else
// while a case ran (/proc/stat "steal"): tells a slow run caused by a
// neighbour taking the vCPUs from one the kernel caused itself
// (docs/performance.md, "How to measure").
#ifndef MHAGEN_BENCH_HOSTSTEAL_H
#define MHAGEN_BENCH_HOSTSTEAL_H

#include <cstdint>

namespace mhagen::bench {

/// The system-wide CPU time counters, in clock ticks, from /proc/stat
/// (zeros where it cannot be read).
struct CpuTicks {
  uint64_t steal = 0, total = 0;
};
CpuTicks readCpuTicks();

/// Steal between two readings, in percent of all CPU time (0 when no
/// tick passed).
double stealPercent(const CpuTicks &before, const CpuTicks &after);

} // namespace mhagen::bench

#endif
