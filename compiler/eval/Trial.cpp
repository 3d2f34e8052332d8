// One trial, in process, and its two JSON documents (Trial.h).
#include "mhagen/eval/Trial.h"

#include "mhagen/driver/Driver.h"
#include "mhagen/harness/RunCheck.h"
#include "mhagen/runtime.h"
#include "mhagen/spec/SpecParser.h"
#include "mhagen/support/Process.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <sstream>
#include <stdexcept>

namespace mhagen {

namespace {

constexpr const char *kRequestSchema = "mhagen.trial_request/1";
constexpr const char *kResultSchema = "mhagen.trial_result/1";

nlohmann::json parseObject(const std::string &text, const char *schema) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw std::runtime_error(std::string(schema) + ": not a JSON object");
  if (j.value("schema", std::string()) != schema)
    throw std::runtime_error(std::string("schema: expected \"") + schema +
                             "\", got " +
                             j.value("schema", std::string("none")));
  return j;
}

// A required member of the given JSON type.
template <typename T>
T field(const nlohmann::json &j, const char *name, const char *schema) {
  auto it = j.find(name);
  if (it == j.end())
    throw std::runtime_error(std::string(schema) + ": missing field '" + name +
                             "'");
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception &) {
    throw std::runtime_error(std::string(schema) + ": field '" + name +
                             "' has the wrong type");
  }
}

} // namespace

std::string TrialRequest::toJson() const {
  nlohmann::ordered_json j;
  j["schema"] = kRequestSchema;
  j["spec"] = spec.canonical();
  j["target_from_host"] = spec.target.machine != nullptr;
  nlohmann::ordered_json sched = nlohmann::ordered_json::object();
  for (const auto &[k, v] : schedule)
    sched[k] = v;
  j["schedule"] = sched;
  j["B"] = B;
  j["T"] = T;
  j["Tkv"] = Tkv;
  j["reps"] = reps;
  j["threads"] = threads;
  j["seed"] = seed;
  return j.dump(2) + "\n";
}

TrialRequest TrialRequest::fromJson(const std::string &text) {
  const char *S = kRequestSchema;
  nlohmann::json j = parseObject(text, S);
  TrialRequest r;
  std::vector<AttentionSpec> specs =
      parseSpecs(field<std::string>(j, "spec", S), "trial-request");
  if (specs.size() != 1)
    throw std::runtime_error(std::string(S) + ": 'spec' must hold one spec");
  r.spec = specs[0];
  if (field<bool>(j, "target_from_host", S)) {
    // The same machine resolves `host` the same way; its model is this
    // machine's, as in the process that made the request.
    const Target host = resolveTarget(Target{}, r.spec.dtype);
    if (host.kind != r.spec.target.kind)
      throw std::runtime_error("target_from_host: host resolves to " +
                               host.str() + " here, not " +
                               r.spec.target.str());
    r.spec.target = host;
  }
  const nlohmann::json sched = field<nlohmann::json>(j, "schedule", S);
  if (!sched.is_object())
    throw std::runtime_error(std::string(S) + ": 'schedule' must be an object");
  for (auto it = sched.begin(); it != sched.end(); ++it) {
    if (!it.value().is_number_integer())
      throw std::runtime_error(std::string(S) + ": schedule parameter '" +
                               it.key() + "' must be an integer");
    r.schedule[it.key()] = it.value().get<int64_t>();
  }
  r.B = field<int64_t>(j, "B", S);
  r.T = field<int64_t>(j, "T", S);
  r.Tkv = field<int64_t>(j, "Tkv", S);
  r.reps = field<int>(j, "reps", S);
  r.threads = field<int>(j, "threads", S);
  r.seed = field<uint32_t>(j, "seed", S);
  if (r.B < 1 || r.T < 1 || r.Tkv < 0 || r.reps < 1 || r.threads < 0)
    throw std::runtime_error(std::string(S) +
                             ": B, T and reps must be >= 1, Tkv and threads "
                             ">= 0");
  return r;
}

std::string TrialResult::toJson() const {
  nlohmann::ordered_json j;
  j["schema"] = kResultSchema;
  j["built"] = built;
  j["error"] = error;
  j["within_tolerance"] = withinTolerance;
  j["max_abs_err"] = maxAbsErr;
  j["median_ms"] = medianMs;
  j["min_ms"] = minMs;
  j["reps"] = reps;
  j["threads"] = threads;
  j["variant"] = variant;
  j["generate_seconds"] = generateSeconds;
  return j.dump(2) + "\n";
}

TrialResult TrialResult::fromJson(const std::string &text) {
  const char *S = kResultSchema;
  nlohmann::json j = parseObject(text, S);
  TrialResult r;
  r.built = field<bool>(j, "built", S);
  r.error = field<std::string>(j, "error", S);
  r.withinTolerance = field<bool>(j, "within_tolerance", S);
  r.maxAbsErr = field<double>(j, "max_abs_err", S);
  r.medianMs = field<double>(j, "median_ms", S);
  r.minMs = field<double>(j, "min_ms", S);
  r.reps = field<int>(j, "reps", S);
  r.threads = field<int>(j, "threads", S);
  r.variant = field<std::string>(j, "variant", S);
  r.generateSeconds = field<double>(j, "generate_seconds", S);
  return r;
}

TrialResult evaluateTrial(const TrialRequest &q) {
  TrialResult r;
  try {
    TempDir dir("mhagen-trial");
    GenerateOptions g;
    g.outDir = dir.path();
    g.schedule = q.schedule;
    g.scheduleSource.kind = "explicit";
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<GeneratedKernel> kernels = generateKernels({q.spec}, g);
    const std::string lib = dir.file("lib" + kernels.at(0).symbol + ".so");
    linkSharedLibrary(kernels, lib);
    r.generateSeconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    mhagen_library *l = nullptr;
    const mhagen_kernel *k = nullptr;
    if (mhagen_load_library(lib.c_str(), &l) != MHAGEN_OK ||
        mhagen_find(kernels[0].symbol.c_str(), &k) != MHAGEN_OK)
      throw std::runtime_error(mhagen_last_error());
    r.built = true;
    RunCheckOptions o;
    const AttentionSpec &s = q.spec;
    o.size = ProblemSize{s.B.value_or(q.B), s.T.value_or(q.T),
                         s.T_kv.value_or(q.Tkv ? q.Tkv : s.T.value_or(q.T))};
    o.reps = q.reps;
    o.threads = q.threads;
    o.seed = q.seed;
    nlohmann::ordered_json js;
    std::ostringstream text;
    runAndCheck(k, s, o, js, text);
    r.withinTolerance = js.value("within_tolerance", false);
    r.maxAbsErr = js.value("max_abs_err", 0.0);
    r.medianMs = js.value("median_ms", 0.0);
    r.minMs = js.value("min_ms", 0.0);
    r.reps = js.value("reps", 0);
    r.threads = js.value("threads", 0);
    r.variant = js.value("variant", std::string());
  } catch (const std::exception &e) {
    r.error = e.what();
  }
  return r;
}

} // namespace mhagen
