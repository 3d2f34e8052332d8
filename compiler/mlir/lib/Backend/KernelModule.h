// The mha-dialect module of one AttentionSpec (the MLIR backend's input),
// built with OpBuilder from the ABI model.
#ifndef MHAGEN_MLIR_KERNELMODULE_H
#define MHAGEN_MLIR_KERNELMODULE_H

#include "mhagen/spec/AttentionSpec.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

#include <string>

namespace mhagen::mlirbackend {

/// One function `fn` on memrefs with the mhagen ABI's shapes and strides
/// (see KernelModule.cpp for the exact signature). The context must have
/// the func, bufferization, tensor, linalg, scf, arith and mha dialects
/// loaded.
mlir::OwningOpRef<mlir::ModuleOp> buildKernelModule(mlir::MLIRContext &ctx,
                                                    const AttentionSpec &spec,
                                                    const std::string &fn);

} // namespace mhagen::mlirbackend

#endif
