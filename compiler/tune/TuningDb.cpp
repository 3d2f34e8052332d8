#include "mhagen/tune/TuningDb.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <set>
#include <stdexcept>

namespace mhagen {

using ojson = nlohmann::ordered_json;

const char *toString(TrialStatus s) {
  switch (s) {
  case TrialStatus::Ok:
    return "ok";
  case TrialStatus::Wrong:
    return "wrong";
  case TrialStatus::BuildError:
    return "build_error";
  case TrialStatus::Crash:
    return "crash";
  case TrialStatus::Timeout:
    return "timeout";
  case TrialStatus::Invalid:
    return "invalid";
  }
  return "?";
}

bool trialStatusFromString(const std::string &s, TrialStatus &out) {
  for (TrialStatus t :
       {TrialStatus::Ok, TrialStatus::Wrong, TrialStatus::BuildError,
        TrialStatus::Crash, TrialStatus::Timeout, TrialStatus::Invalid})
    if (s == toString(t)) {
      out = t;
      return true;
    }
  return false;
}

std::string TrialRecord::toJsonLine() const {
  ojson j;
  j["spec_hash"] = specHash;
  j["spec"] = specCanonical;
  j["target"] = target;
  j["cpu_model"] = cpuModel;
  if (!machineClass.empty())
    j["machine_class"] = machineClass;
  j["backend"] = backend;
  j["mhagen_version"] = mhagenVersion;
  ojson p = ojson::object();
  for (const auto &[k, v] : params)
    p[k] = v;
  j["params"] = p;
  j["status"] = toString(status);
  if (!error.empty())
    j["error"] = error;
  j["median_ms"] = medianMs;
  j["min_ms"] = minMs;
  j["times_ms"] = timesMs;
  j["reps"] = reps;
  j["max_abs_err"] = maxAbsErr;
  j["problem"] = ojson{{"B", B}, {"T", T}, {"Tkv", Tkv}};
  j["threads"] = threads;
  j["timestamp"] = timestamp;
  j["trial_id"] = trialId;
  j["phase"] = phase;
  if (!shard.empty())
    j["shard"] = shard;
  return j.dump();
}

bool TrialRecord::fromJson(const std::string &line, TrialRecord &r,
                           std::string *error) {
  try {
    ojson j = ojson::parse(line);
    r = TrialRecord{};
    r.specHash = j.at("spec_hash").get<std::string>();
    r.specCanonical = j.value("spec", "");
    r.target = j.at("target").get<std::string>();
    r.cpuModel = j.value("cpu_model", "");
    r.machineClass = j.value("machine_class", "");
    r.backend = j.at("backend").get<std::string>();
    r.mhagenVersion = j.value("mhagen_version", "");
    for (auto it = j.at("params").begin(); it != j.at("params").end(); ++it)
      r.params[it.key()] = it.value().get<int64_t>();
    if (!trialStatusFromString(j.at("status").get<std::string>(), r.status))
      throw std::runtime_error("unknown status");
    r.error = j.value("error", "");
    r.medianMs = j.value("median_ms", 0.0);
    // A correct trial's time is what generation ranks by: a time no call
    // can take (0, negative, below a nanosecond, not finite) is a forged
    // or corrupted record, not the fastest one.
    if (r.status == TrialStatus::Ok &&
        !(std::isfinite(r.medianMs) && r.medianMs >= kMinTrialMs))
      throw std::runtime_error("median_ms " + j.at("median_ms").dump() +
                               " is not a call's time (a correct trial "
                               "takes at least 1e-6 ms)");
    r.minMs = j.value("min_ms", 0.0);
    r.timesMs = j.value("times_ms", std::vector<double>{});
    r.reps = j.value("reps", 0);
    r.maxAbsErr = j.value("max_abs_err", 0.0);
    const ojson &pr = j.at("problem");
    r.B = pr.at("B").get<int64_t>();
    r.T = pr.at("T").get<int64_t>();
    r.Tkv = pr.at("Tkv").get<int64_t>();
    r.threads = j.value("threads", 0);
    r.timestamp = j.value("timestamp", "");
    r.trialId = j.value("trial_id", "");
    r.phase = j.value("phase", "");
    r.shard = j.value("shard", "");
    return true;
  } catch (const std::exception &e) {
    if (error)
      *error = e.what();
    return false;
  }
}

TuningDb::TuningDb(std::string path) : path_(std::move(path)) {
  std::ifstream in(path_, std::ios::binary);
  if (!in)
    return; // a new database
  std::string content((std::istreambuf_iterator<char>(in)),
                      std::istreambuf_iterator<char>());
  size_t lineNo = 0, pos = 0;
  while (pos < content.size()) {
    size_t nl = content.find('\n', pos);
    bool complete = nl != std::string::npos;
    std::string line =
        content.substr(pos, complete ? nl - pos : std::string::npos);
    pos = complete ? nl + 1 : content.size();
    ++lineNo;
    if (line.empty())
      continue;
    TrialRecord r;
    std::string err;
    if (!complete || !TrialRecord::fromJson(line, r, &err)) {
      warnings_.push_back(path_ + ":" + std::to_string(lineNo) +
                          ": skipped a torn or invalid record" +
                          (complete ? " (" + err + ")" : " (no newline)"));
      continue;
    }
    records_.push_back(std::move(r));
  }
}

void TuningDb::append(const TrialRecord &r) {
  std::string line = r.toJsonLine() + "\n";
  int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0)
    throw std::runtime_error("cannot open tuning database " + path_ + ": " +
                             std::strerror(errno));
  // A previous writer killed mid-line would leave no newline: start ours on
  // a fresh line so only the torn record is lost.
  off_t end = ::lseek(fd, 0, SEEK_END);
  if (end > 0) {
    char last = '\n';
    if (::pread(fd, &last, 1, end - 1) == 1 && last != '\n')
      line = "\n" + line;
  }
  ssize_t n = ::write(fd, line.data(), line.size()); // one write: atomic
  int e = errno;
  ::fsync(fd);
  ::close(fd);
  if (n != static_cast<ssize_t>(line.size()))
    throw std::runtime_error("cannot append to tuning database " + path_ +
                             ": " + std::strerror(e));
  records_.push_back(r);
}

std::vector<const TrialRecord *>
TuningDb::matching(const std::string &specHash, const std::string &target,
                   const std::string &backend) const {
  std::vector<const TrialRecord *> out;
  for (const TrialRecord &r : records_)
    if (r.specHash == specHash && r.target == target && r.backend == backend)
      out.push_back(&r);
  return out;
}

namespace {

// The fastest correct record of `all`: among the re-measured ones (more
// repetitions) when there are any.
const TrialRecord *fastest(const std::vector<const TrialRecord *> &all) {
  const TrialRecord *best = nullptr;
  bool anyRemeasure = false;
  for (const TrialRecord *r : all)
    anyRemeasure |= r->status == TrialStatus::Ok && r->phase == "remeasure";
  for (const TrialRecord *r : all)
    if (r->status == TrialStatus::Ok && r->medianMs > 0 &&
        (!anyRemeasure || r->phase == "remeasure") &&
        (!best || r->medianMs < best->medianMs))
      best = r;
  return best;
}

// Records without a machine class (or with one that does not parse) rank
// after every known class.
constexpr double kUnknownClassDistance = 1e9;

} // namespace

std::optional<TrialRecord> TuningDb::best(const std::string &specHash,
                                          const std::string &target,
                                          const std::string &backend) const {
  const TrialRecord *b = fastest(matching(specHash, target, backend));
  if (!b)
    return std::nullopt;
  return *b;
}

std::optional<TuningDb::Choice>
TuningDb::bestFor(const std::string &specHash, const std::string &target,
                  const std::string &backend, const MachineClass &want,
                  const std::function<bool(const TrialRecord &)> &usable) const {
  std::vector<std::string> classes;
  std::vector<std::vector<const TrialRecord *>> byClass;
  for (const TrialRecord *r : matching(specHash, target, backend)) {
    if (usable && !usable(*r))
      continue;
    auto it = std::find(classes.begin(), classes.end(), r->machineClass);
    if (it == classes.end()) {
      classes.push_back(r->machineClass);
      byClass.emplace_back();
      it = classes.end() - 1;
    }
    byClass[static_cast<size_t>(it - classes.begin())].push_back(r);
  }
  std::optional<Choice> out;
  for (size_t i = 0; i < classes.size(); ++i) {
    const TrialRecord *b = fastest(byClass[i]);
    if (!b)
      continue;
    MachineClass c;
    const double d = MachineClass::fromKey(classes[i], c, nullptr)
                         ? machineClassDistance(want, c)
                         : kUnknownClassDistance;
    if (!out || d < out->distance ||
        (d == out->distance && b->medianMs < out->record.medianMs))
      out = Choice{*b, classes[i], d};
  }
  return out;
}

std::string TuningDb::Choice::describe() const {
  if (sameClass())
    return "measured on this machine class";
  if (distance >= kUnknownClassDistance)
    return "measured on an unrecorded machine class (a record older than "
           "machine classes), the nearest the database has";
  MachineClass c;
  MachineClass::fromKey(machineClass, c, nullptr);
  char buf[64];
  std::snprintf(buf, sizeof buf, " (distance %.0f)", distance);
  return "measured on another machine class, the nearest the database has: " +
         c.brief() + buf;
}

std::vector<std::string> TuningDb::machineClasses() const {
  std::vector<std::string> out;
  for (const TrialRecord &r : records_)
    if (std::find(out.begin(), out.end(), r.machineClass) == out.end())
      out.push_back(r.machineClass);
  return out;
}

TuningDbMerge mergeTuningDatabases(const std::vector<std::string> &inputs,
                                   const std::string &output) {
  TuningDbMerge out;
  std::vector<std::string> classes;
  std::vector<std::vector<std::string>> lines; // per class
  std::set<std::string> seen;
  for (const std::string &path : inputs) {
    if (::access(path.c_str(), R_OK) != 0)
      throw std::runtime_error("cannot read tuning database " + path + ": " +
                               std::strerror(errno));
    TuningDb db(path);
    out.warnings.insert(out.warnings.end(), db.warnings().begin(),
                        db.warnings().end());
    for (const TrialRecord &r : db.records()) {
      std::string line = r.toJsonLine();
      if (!seen.insert(line).second) {
        ++out.duplicates;
        continue;
      }
      auto it = std::find(classes.begin(), classes.end(), r.machineClass);
      if (it == classes.end()) {
        classes.push_back(r.machineClass);
        lines.emplace_back();
        it = classes.end() - 1;
      }
      lines[static_cast<size_t>(it - classes.begin())].push_back(
          std::move(line));
    }
  }
  std::string text;
  for (size_t i = 0; i < classes.size(); ++i) {
    out.perClass.emplace_back(classes[i],
                              static_cast<int64_t>(lines[i].size()));
    out.records += static_cast<int64_t>(lines[i].size());
    for (const std::string &l : lines[i])
      text += l + "\n";
  }
  const std::string tmp = output + ".merge-" + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << text;
    f.flush();
    if (!f) {
      ::unlink(tmp.c_str());
      throw std::runtime_error("cannot write " + tmp);
    }
  }
  if (std::rename(tmp.c_str(), output.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot rename " + tmp + " to " + output + ": " +
                             std::strerror(e));
  }
  return out;
}

TuningDbLock::TuningDbLock(const std::string &dbPath, int shardIndex,
                           int shardCount, std::ostream *progress) {
  std::string path = dbPath +
                     (shardCount > 1 ? ".shard-" + std::to_string(shardIndex) +
                                           "-of-" + std::to_string(shardCount)
                                     : std::string()) +
                     ".lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw std::runtime_error("cannot open the lock file " + path + ": " +
                             std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) == 0)
    return;
  if (progress)
    *progress << "waiting for another tuner of " << dbPath << " (" << path
              << ")\n";
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno != EINTR) {
      int e = errno;
      ::close(fd_);
      throw std::runtime_error("cannot lock " + path + ": " + std::strerror(e));
    }
  }
}

TuningDbLock::~TuningDbLock() {
  if (fd_ >= 0)
    ::close(fd_); // releases the flock
}

std::string cpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string v = line.substr(colon + 1);
        while (!v.empty() && v.front() == ' ')
          v.erase(v.begin());
        return v;
      }
    }
  return "unknown";
}

std::string utcTimestamp() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

} // namespace mhagen
