#include "mhagen/tune/TuneShard.h"

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>

namespace mhagen {

namespace {

// A whole decimal number in [0, INT_MAX], nothing else.
bool parseCount(const char *text, long &out) {
  if (!text || !*text)
    return false;
  errno = 0;
  char *end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (errno || *end || v < 0 || v > INT_MAX)
    return false;
  out = v;
  return true;
}

} // namespace

bool resolveTuneShard(const std::string &flag, int countFlag,
                      const EnvLookup &env, TuneShard &out,
                      std::string *error) {
  auto fail = [&](const std::string &why) {
    if (error)
      *error = why;
    return false;
  };
  auto var = [&](const char *name) -> std::string {
    const char *v = env(name);
    return v ? v : "";
  };
  if (!flag.empty()) {
    int i = -1, n = 0;
    char extra = 0;
    if (std::sscanf(flag.c_str(), "%d/%d%c", &i, &n, &extra) != 2 || n < 1 ||
        i < 0 || i >= n)
      return fail("--shard " + flag + ": expected i/n with 0 <= i < n");
    out = {i, n, "--shard"};
    return true;
  }
  if (env("SLURM_ARRAY_TASK_ID")) {
    long id = 0, count = 0, min = 0, step = 1;
    if (!parseCount(env("SLURM_ARRAY_TASK_ID"), id))
      return fail("SLURM_ARRAY_TASK_ID=" + var("SLURM_ARRAY_TASK_ID") +
                  ": expected a task index >= 0");
    if (!parseCount(env("SLURM_ARRAY_TASK_COUNT"), count) || count < 1)
      return fail("SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT=" +
                  var("SLURM_ARRAY_TASK_COUNT") +
                  " is not a task count >= 1 (run under sbatch --array)");
    if (env("SLURM_ARRAY_TASK_MIN") &&
        !parseCount(env("SLURM_ARRAY_TASK_MIN"), min))
      return fail("SLURM_ARRAY_TASK_MIN=" + var("SLURM_ARRAY_TASK_MIN") +
                  ": expected an index >= 0");
    if (env("SLURM_ARRAY_TASK_STEP") &&
        (!parseCount(env("SLURM_ARRAY_TASK_STEP"), step) || step < 1))
      return fail("SLURM_ARRAY_TASK_STEP=" + var("SLURM_ARRAY_TASK_STEP") +
                  ": expected a step >= 1");
    if (id < min || (id - min) % step || (id - min) / step >= count)
      return fail("SLURM_ARRAY_TASK_ID=" + std::to_string(id) +
                  " is not one of the " + std::to_string(count) +
                  " ids MIN + k*STEP (MIN " + std::to_string(min) + ", STEP " +
                  std::to_string(step) +
                  "): give the array as a range, e.g. --array=0-7");
    out = {static_cast<int>((id - min) / step), static_cast<int>(count),
           "SLURM_ARRAY_TASK_ID"};
    return true;
  }
  if (env("JOB_COMPLETION_INDEX")) {
    long id = 0;
    if (!parseCount(env("JOB_COMPLETION_INDEX"), id))
      return fail("JOB_COMPLETION_INDEX=" + var("JOB_COMPLETION_INDEX") +
                  ": expected an index >= 0");
    if (countFlag < 1)
      return fail("JOB_COMPLETION_INDEX is set: give the Job's completions "
                  "as --shards N");
    if (id >= countFlag)
      return fail("JOB_COMPLETION_INDEX=" + std::to_string(id) +
                  " is not below --shards " + std::to_string(countFlag));
    out = {static_cast<int>(id), countFlag, "JOB_COMPLETION_INDEX"};
    return true;
  }
  if (countFlag > 0)
    return fail("--shards " + std::to_string(countFlag) +
                " needs JOB_COMPLETION_INDEX (an indexed Kubernetes Job); "
                "elsewhere use --shard i/n");
  out = {0, 1, ""};
  return true;
}

} // namespace mhagen
