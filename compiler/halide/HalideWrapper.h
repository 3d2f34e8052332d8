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

/// `longMinTokens`: the object also holds <symbol>_long_pipeline (the
/// long-call variant), which calls of at least that many query tokens run.
std::string wrapperSource(const AttentionSpec &s, const std::string &symbol,
                          const std::string &target, bool gpu,
                          std::optional<int64_t> longMinTokens = {});

} // namespace mhagen::hl

#endif
