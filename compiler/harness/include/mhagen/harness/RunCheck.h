// One kernel run as `mhagen run` reports it: seeded inputs, a checked
// first call, timed repetitions, JSON and text. Shared by mhagen (CPU
// kernels, in process) and mhagen-run-kernel (GPU kernels, in a process
// without Halide's LLVM: PoCL's OpenCL compiler crashes next to it).
#ifndef MHAGEN_HARNESS_RUNCHECK_H
#define MHAGEN_HARNESS_RUNCHECK_H

#include "mhagen/harness/KernelHarness.h"
#include "mhagen/runtime.h"

#include <nlohmann/json.hpp>

#include <ostream>
#include <string>

namespace mhagen {

struct RunCheckOptions {
  ProblemSize size;
  int reps = 10;
  int threads = 0; ///< 0: leave the runtime's setting
  uint32_t seed = 1;
};

/// Runs kernel `k` of spec `spec`; fills `js` (median_ms, gflops_nominal,
/// gflops_useful, max_abs_err, variant, ...) and writes the text report to
/// `text`. Returns 0 when the result is within tolerance, 1 when it is
/// not; throws std::runtime_error when the kernel cannot run.
int runAndCheck(const mhagen_kernel *k, const AttentionSpec &spec,
                const RunCheckOptions &o, nlohmann::ordered_json &js,
                std::ostream &text);

/// A layer with a KV cache (kv_cache = contiguous) driven through a
/// session: a prefill of o.size.Tq tokens into an empty cache, 8 decode
/// steps of one token, then a chunk of 5, each call checked (output, lse,
/// the cache after it) against the reference on the cache as the call
/// before left it, and timed. The cache holds max(o.size.Tkv, the
/// session's tokens). Fills `js` as runAndCheck does for the prefill, plus
/// "steps"; returns 0 when every call is within tolerance.
int runLayerSession(const mhagen_kernel *k, const AttentionSpec &spec,
                    const RunCheckOptions &o, nlohmann::ordered_json &js,
                    std::ostream &text);

/// The spec a loaded kernel was generated from (its manifest's canonical
/// text, parsed).
AttentionSpec specOfKernel(const mhagen_kernel *k);

} // namespace mhagen

#endif
