// Schedule parameters: named integers (tile sizes, vector width, unroll,
// parallel split) that a backend reads when it schedules a spec. Each
// backend declares its search space next to its schedules; the tuner
// searches it and records winners, generation reads them back.
#ifndef MHAGEN_SPEC_SCHEDULEPARAMS_H
#define MHAGEN_SPEC_SCHEDULEPARAMS_H

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace mhagen {

using ScheduleParams = std::map<std::string, int64_t>;

/// One tunable parameter and the values it may take.
struct ParamDecl {
  std::string name;
  std::vector<int64_t> values; ///< allowed values, ascending
  std::string help;
  /// Read only by the decode variant, which a call runs when its T_q is at
  /// most `decode_tokens`: a call with more tokens never executes it.
  bool decodeOnly = false;
  /// Read only by the long-call variant, which a call runs when its T_q is
  /// at least `long_min_tokens`: a call with fewer tokens never executes it.
  bool longOnly = false;
};

/// A backend's search space for one spec and target: the parameters, the
/// default point, and the constraints that rule points out before anything
/// is built (divisibility, register budget, scratch within L2, ...).
struct ScheduleSpace {
  std::vector<ParamDecl> params;
  ScheduleParams defaults;
  /// "" when the point is valid, otherwise why not.
  std::function<std::string(const ScheduleParams &)> violation;

  bool valid(const ScheduleParams &p) const {
    return violation ? violation(p).empty() : true;
  }
  /// Number of points in the cross product (before constraints).
  double size() const {
    double n = 1;
    for (const auto &d : params)
      n *= static_cast<double>(d.values.size());
    return n;
  }
};

/// "" when `p` sets every declared parameter to one of its allowed values
/// and nothing else; otherwise why not. Backends' constraint functions
/// start with it.
std::string declaredViolation(const std::vector<ParamDecl> &params,
                              const ScheduleParams &p);

/// The split-KV decode parameters both CPU backends declare:
/// split_tasks (parallel tasks per core the key-axis chunks aim for, 0: no
/// split) and split_min_keys (the fewest keys per chunk).
std::vector<ParamDecl> splitKvParams();

/// The space as a tuner measuring calls of `tQ` query tokens sees it: where
/// no allowed `decode_tokens` reaches tQ, the decode variant never runs in
/// those calls, so every decodeOnly parameter is pinned to its default
/// (one allowed value); likewise every longOnly parameter where tQ is below
/// every allowed `long_min_tokens`. The budget goes to what the calls
/// execute. Returns the names pinned.
std::vector<std::string> pinParamsUnusedAt(ScheduleSpace &space, int64_t tQ);

/// One way to move a default point: a parameter and the direction
/// (-1: toward smaller allowed values, +1: toward larger ones).
struct ParamStep {
  std::string name;
  int direction = -1;
};

/// Makes `space.defaults` valid for specs where the backend's preferred
/// point is not (large head widths, odd GQA groups): each step in `order`
/// moves its parameter one allowed value at a time, calling `adjust` after
/// each move (to re-derive dependent parameters), until the point is valid;
/// then the next step is tried from there. Returns the first valid point,
/// or "" in `*why` and the unchanged start when none of the moves reaches
/// one (the property test of default schedules then reports it).
ScheduleParams
descendToValid(const ScheduleSpace &space, ScheduleParams start,
               const std::vector<ParamStep> &order,
               const std::function<void(ScheduleParams &)> &adjust = {});

/// {"a":1,"b":2} (keys sorted): deterministic text for manifests and the
/// tuning database.
std::string scheduleParamsToJson(const ScheduleParams &p);
/// Parses the text written by scheduleParamsToJson; false on bad input.
bool scheduleParamsFromJson(const std::string &json, ScheduleParams &out,
                            std::string *error);

} // namespace mhagen

#endif
