// The mha-dialect module of one AttentionSpec (the MLIR backend's input).
#ifndef MHAGEN_MLIR_KERNELMODULE_H
#define MHAGEN_MLIR_KERNELMODULE_H

#include "mhagen/spec/AttentionSpec.h"

#include <string>

namespace mhagen::mlirbackend {

/// MLIR text of one function `fn` on memrefs with the mhagen ABI's shapes
/// and strides (see KernelModule.cpp for the exact signature).
std::string kernelModuleText(const AttentionSpec &spec, const std::string &fn);

} // namespace mhagen::mlirbackend

#endif
