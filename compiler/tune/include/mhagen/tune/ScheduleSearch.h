// The search over a backend's schedule space. Strategy "evolve" (the
// default): the default point first, then a seeded random sample of valid
// points (a third of the budget), then local search around the best points
// found -- a parent from the current top 4, one or two parameters moved to
// a neighbouring allowed value (sometimes a random one). Strategy "random"
// keeps sampling at random, for comparison at equal budget. Invalid points
// (constraint violations) are never proposed; neither is a point already
// measured or one belonging to another shard.
#ifndef MHAGEN_TUNE_SCHEDULESEARCH_H
#define MHAGEN_TUNE_SCHEDULESEARCH_H

#include "mhagen/spec/ScheduleParams.h"

#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace mhagen {

struct SearchOptions {
  int budget = 60;                 ///< trials, the default point included
  std::string strategy = "evolve"; ///< evolve | random
  uint32_t seed = 1;
  int shardIndex = 0, shardCount = 1; ///< --shard i/n
  double randomFraction = 1.0 / 3;    ///< of the budget, before local search
};

/// Whether a point belongs to shard i of n (stable across machines and
/// runs: a hash of the point's canonical JSON).
bool inShard(const ScheduleParams &p, int index, int count);

class ScheduleSearch {
public:
  ScheduleSearch(ScheduleSpace space, SearchOptions options);

  /// The next point to measure, or nothing when the space (or this shard
  /// of it) is exhausted. `phase` says why it was chosen.
  std::optional<ScheduleParams> next(std::string *phase = nullptr);
  /// Feeds a result back (ok = correct and timed).
  void report(const ScheduleParams &p, bool ok, double ms);
  /// A point measured earlier (resume): never proposed again.
  void markSeen(const ScheduleParams &p, bool ok, double ms);

  int measured() const { return measured_; }
  const ScheduleSpace &space() const { return space_; }

private:
  std::optional<ScheduleParams> randomPoint();
  std::optional<ScheduleParams> mutate(const ScheduleParams &parent);
  bool acceptable(const ScheduleParams &p) const;

  ScheduleSpace space_;
  SearchOptions opt_;
  std::mt19937 rng_;
  std::map<std::string, double> seen_; ///< point -> ms (infinity if failed)
  int measured_ = 0;
  bool defaultDone_ = false;
};

} // namespace mhagen

#endif
