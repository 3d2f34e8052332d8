#include "mhagen/spec/ScheduleParams.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace mhagen {

std::string declaredViolation(const std::vector<ParamDecl> &params,
                              const ScheduleParams &p) {
  for (const ParamDecl &decl : params) {
    auto it = p.find(decl.name);
    if (it == p.end())
      return "missing " + decl.name;
    if (std::find(decl.values.begin(), decl.values.end(), it->second) ==
        decl.values.end()) {
      std::string allowed;
      for (int64_t v : decl.values)
        allowed += (allowed.empty() ? "" : ", ") + std::to_string(v);
      return decl.name + " = " + std::to_string(it->second) +
             " is not an allowed value (allowed: " + allowed + ")";
    }
  }
  for (const auto &entry : p)
    if (std::none_of(params.begin(), params.end(),
                     [&](const ParamDecl &d) { return d.name == entry.first; }))
      return "unknown schedule parameter " + entry.first;
  return "";
}

std::string scheduleParamsToJson(const ScheduleParams &p) {
  nlohmann::json j = nlohmann::json::object(); // std::map: sorted keys
  for (const auto &[k, v] : p)
    j[k] = v;
  return j.dump();
}

bool scheduleParamsFromJson(const std::string &json, ScheduleParams &out,
                            std::string *error) {
  try {
    nlohmann::json j = nlohmann::json::parse(json);
    if (!j.is_object()) {
      if (error)
        *error = "schedule parameters must be a JSON object";
      return false;
    }
    ScheduleParams p;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!it.value().is_number_integer()) {
        if (error)
          *error = "schedule parameter '" + it.key() + "' is not an integer";
        return false;
      }
      p[it.key()] = it.value().get<int64_t>();
    }
    out = std::move(p);
    return true;
  } catch (const std::exception &e) {
    if (error)
      *error = std::string("schedule parameters: ") + e.what();
    return false;
  }
}

ScheduleParams
descendToValid(const ScheduleSpace &space, ScheduleParams start,
               const std::vector<ParamStep> &order,
               const std::function<void(ScheduleParams &)> &adjust) {
  if (space.valid(start))
    return start;
  ScheduleParams p = start;
  for (const ParamStep &step : order) {
    const ParamDecl *decl = nullptr;
    for (const ParamDecl &d : space.params)
      if (d.name == step.name)
        decl = &d;
    if (!decl || !p.count(step.name))
      continue;
    for (;;) {
      const std::vector<int64_t> &v = decl->values;
      auto it = std::find(v.begin(), v.end(), p[step.name]);
      if (it == v.end()) { // not an allowed value: the nearest one below
        auto above = std::lower_bound(v.begin(), v.end(), p[step.name]);
        it = above == v.begin() ? above : above - 1;
      } else if (step.direction < 0 && it != v.begin()) {
        --it;
      } else if (step.direction > 0 && it + 1 != v.end()) {
        ++it;
      } else {
        break; // this parameter cannot move further
      }
      p[step.name] = *it;
      if (adjust)
        adjust(p);
      if (space.valid(p))
        return p;
    }
  }
  return start;
}

std::vector<ParamDecl> splitKvParams() {
  return {{"split_tasks",
           {0, 1, 2, 4, 8, 16},
           "decode: parallel tasks per core the key-axis split aims for (0: "
           "no split)",
           true},
          {"split_min_keys",
           {64, 128, 256, 512, 1024, 2048},
           "decode: fewest keys per chunk of the split",
           true}};
}

std::vector<std::string> pinParamsUnusedAt(ScheduleSpace &space, int64_t tQ) {
  int64_t decodeTokens = 0; // the most tokens a decode variant may take
  int64_t longMin = 0;      // the fewest tokens a long-call variant may take
  for (const ParamDecl &d : space.params) {
    if (d.name == "decode_tokens" && !d.values.empty())
      decodeTokens = d.values.back();
    if (d.name == "long_min_tokens" && !d.values.empty())
      longMin = d.values.front();
  }
  const bool decodeUnused = tQ > decodeTokens;
  const bool longUnused = tQ < longMin;
  std::vector<std::string> pinned;
  for (ParamDecl &d : space.params) {
    auto it = space.defaults.find(d.name);
    const bool unused =
        (d.decodeOnly && decodeUnused) || (d.longOnly && longUnused);
    if (!unused || d.values.size() < 2 || it == space.defaults.end())
      continue;
    d.values = {it->second};
    pinned.push_back(d.name);
  }
  return pinned;
}

} // namespace mhagen
