// The MLIR backend (KernelBackend.h): spec -> mha module (KernelModule.cpp)
// -> the pass pipeline of MhaPasses.h -> LLVM 19 -> object code. Only the
// registry (compiler/backends) includes this header.
#ifndef MHAGEN_MLIR_MLIRBACKEND_H
#define MHAGEN_MLIR_MLIRBACKEND_H

#include "mhagen/backend/KernelBackend.h"

#include <memory>

namespace mhagen {

std::unique_ptr<KernelBackend> makeMlirBackend();

} // namespace mhagen

#endif
