#include "mhagen/tune/ScheduleSearch.h"

#include <algorithm>
#include <limits>

namespace mhagen {

bool inShard(const ScheduleParams &p, int index, int count) {
  if (count <= 1)
    return true;
  uint64_t h = 0xcbf29ce484222325ULL; // FNV-1a of the canonical JSON
  for (unsigned char c : scheduleParamsToJson(p)) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return static_cast<int>(h % static_cast<uint64_t>(count)) == index;
}

ScheduleSearch::ScheduleSearch(ScheduleSpace space, SearchOptions options)
    : space_(std::move(space)), opt_(options), rng_(options.seed) {}

bool ScheduleSearch::acceptable(const ScheduleParams &p) const {
  return space_.valid(p) && !seen_.count(scheduleParamsToJson(p)) &&
         inShard(p, opt_.shardIndex, opt_.shardCount);
}

std::optional<ScheduleParams> ScheduleSearch::randomPoint() {
  for (int attempt = 0; attempt < 5000; ++attempt) {
    ScheduleParams p;
    for (const ParamDecl &d : space_.params) {
      std::uniform_int_distribution<size_t> u(0, d.values.size() - 1);
      p[d.name] = d.values[u(rng_)];
    }
    if (acceptable(p))
      return p;
  }
  return std::nullopt;
}

std::optional<ScheduleParams>
ScheduleSearch::mutate(const ScheduleParams &parent) {
  std::uniform_real_distribution<double> coin(0, 1);
  for (int attempt = 0; attempt < 500; ++attempt) {
    ScheduleParams p = parent;
    int changes = coin(rng_) < 0.6 ? 1 : 2;
    for (int c = 0; c < changes; ++c) {
      std::uniform_int_distribution<size_t> pick(0, space_.params.size() - 1);
      const ParamDecl &d = space_.params[pick(rng_)];
      if (d.values.size() < 2)
        continue;
      auto it = std::find(d.values.begin(), d.values.end(), p[d.name]);
      size_t idx = it == d.values.end() ? 0 : it - d.values.begin();
      if (coin(rng_) < 0.2) {
        std::uniform_int_distribution<size_t> u(0, d.values.size() - 1);
        idx = u(rng_);
      } else {
        int step = coin(rng_) < 0.5 ? -1 : 1;
        if (coin(rng_) < 0.25)
          step *= 2;
        long j = static_cast<long>(idx) + step;
        j = std::clamp<long>(j, 0, static_cast<long>(d.values.size()) - 1);
        idx = static_cast<size_t>(j);
      }
      p[d.name] = d.values[idx];
    }
    if (acceptable(p))
      return p;
  }
  return std::nullopt;
}

std::optional<ScheduleParams> ScheduleSearch::next(std::string *phase) {
  auto say = [&](const char *what) {
    if (phase)
      *phase = what;
  };
  if (!defaultDone_) {
    defaultDone_ = true;
    if (acceptable(space_.defaults)) {
      say("default");
      return space_.defaults;
    }
  }
  const int randomTrials =
      std::max(4, static_cast<int>(opt_.budget * opt_.randomFraction));
  std::vector<std::pair<double, std::string>> ranked;
  for (const auto &[key, ms] : seen_)
    if (ms < std::numeric_limits<double>::infinity())
      ranked.push_back({ms, key});
  if (opt_.strategy == "evolve" && measured_ >= randomTrials &&
      !ranked.empty()) {
    std::sort(ranked.begin(), ranked.end());
    size_t top = std::min<size_t>(4, ranked.size());
    // Tournament: better parents are picked more often.
    std::uniform_int_distribution<size_t> u(0, top - 1);
    size_t a = u(rng_), b = u(rng_);
    ScheduleParams parent;
    std::string err;
    scheduleParamsFromJson(ranked[std::min(a, b)].second, parent, &err);
    if (auto p = mutate(parent)) {
      say("local");
      return p;
    }
  }
  say("random");
  return randomPoint();
}

void ScheduleSearch::report(const ScheduleParams &p, bool ok, double ms) {
  markSeen(p, ok, ms);
}

void ScheduleSearch::markSeen(const ScheduleParams &p, bool ok, double ms) {
  const std::string key = scheduleParamsToJson(p);
  double v = ok ? ms : std::numeric_limits<double>::infinity();
  auto it = seen_.find(key);
  if (it == seen_.end()) {
    seen_[key] = v;
    ++measured_;
  } else {
    it->second = std::min(it->second, v);
  }
  if (scheduleParamsToJson(space_.defaults) == key)
    defaultDone_ = true;
}

} // namespace mhagen
