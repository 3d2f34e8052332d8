// QK-norm (the spec's `qk_norm`) in the MLIR layer: the RMSNorm of q or k
// heads as linalg ops on tensors, before the rotary positions
// (docs/design.md §1, "QK-norm").
#ifndef MHAGEN_MLIR_QKNORM_H
#define MHAGEN_MLIR_QKNORM_H

#include "mhagen/spec/AttentionSpec.h"

#include "mlir/IR/Builders.h"

namespace mhagen::mlirbackend {

/// `heads` [1, T, count, dk] f32 normalised as qk_norm says: one root mean
/// square per head (head) or per token (projection), then each channel
/// times its weight (`weight`: [dk] or [count*dk] of the spec's dtype).
/// `tDyn` holds T when it is dynamic.
mlir::Value normalizeHeads(mlir::OpBuilder &b, mlir::Location l,
                           const AttentionSpec &s, mlir::Value heads,
                           mlir::Value weight, mlir::ValueRange tDyn);

} // namespace mhagen::mlirbackend

#endif
