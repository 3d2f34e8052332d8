// Which part of a schedule space one tuner measures: `--shard i/n`, or the
// index a batch system gives each task of an array job, so that `sbatch
// --array=0-N mhagen tune ...` (Slurm) or an indexed Kubernetes Job shards
// the search with no wrapper script.
#ifndef MHAGEN_TUNE_TUNESHARD_H
#define MHAGEN_TUNE_TUNESHARD_H

#include <functional>
#include <string>

namespace mhagen {

struct TuneShard {
  int index = 0, count = 1;
  std::string source; ///< "--shard", "SLURM_ARRAY_TASK_ID", ... or ""
};

/// Reads the environment variable `name` (nullptr if unset); the real
/// environment in the tool, a table in tests.
using EnvLookup = std::function<const char *(const char *name)>;

/// The shard, in this order: the `--shard i/n` flag (`flag`, "" if not
/// given); Slurm's SLURM_ARRAY_TASK_ID with SLURM_ARRAY_TASK_COUNT (ids
/// MIN..MAX[:STEP] map to 0..COUNT-1); Kubernetes' JOB_COMPLETION_INDEX
/// with `countFlag` (`--shards N`; 0 if not given); else one shard.
/// Returns false with *error naming the variable, its value and the rule
/// when they do not make a shard.
bool resolveTuneShard(const std::string &flag, int countFlag,
                      const EnvLookup &env, TuneShard &out, std::string *error);

} // namespace mhagen

#endif
