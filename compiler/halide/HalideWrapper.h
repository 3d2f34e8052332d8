// The C ABI wrapper of a Halide kernel: the ABI wrapper plan
// (mhagen/backend/AbiWrapper.h) in the halide_buffer_t convention, plus
// the GPU glue (host/device copies, CUDA device pointers).
#ifndef MHAGEN_HALIDE_HALIDEWRAPPER_H
#define MHAGEN_HALIDE_HALIDEWRAPPER_H

#include "mhagen/spec/AttentionSpec.h"

#include <cstdint>
#include <optional>
#include <string>

namespace mhagen::hl {

/// The calls that run <symbol>_long_pipeline (the long-call variant):
/// those of at least `minTokens` query tokens and, where the variant
/// copies K/V per task, at most `maxKeys` keys (its copy's memory).
struct LongCallRange {
  int64_t minTokens = 0;
  std::optional<int64_t> maxKeys;
};

/// `longCalls`: the object also holds the long-call variant.
std::string wrapperSource(const AttentionSpec &s, const std::string &symbol,
                          const std::string &target, bool gpu,
                          std::optional<LongCallRange> longCalls = {});

} // namespace mhagen::hl

#endif
