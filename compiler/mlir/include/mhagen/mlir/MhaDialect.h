// The mha dialect: ops and attributes (generated from MhaOps.td).
#ifndef MHAGEN_MLIR_MHADIALECT_H
#define MHAGEN_MLIR_MHADIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "mhagen/mlir/MhaOpsDialect.h.inc"

#define GET_ATTRDEF_CLASSES
#include "mhagen/mlir/MhaAttrs.h.inc"

#define GET_OP_CLASSES
#include "mhagen/mlir/MhaOps.h.inc"

#endif
