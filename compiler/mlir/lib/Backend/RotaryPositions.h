// Rotary positions (the spec's `rope`) in the MLIR layer: q or k heads
// rotated as linalg ops on tensors, before the attention op reads them
// (docs/design.md §1, "Rotary positions").
#ifndef MHAGEN_MLIR_ROTARYPOSITIONS_H
#define MHAGEN_MLIR_ROTARYPOSITIONS_H

#include "mhagen/spec/AttentionSpec.h"

#include "mlir/IR/Builders.h"

namespace mhagen::mlirbackend {

/// The cos and sin of every (token, frequency) pair of a call, [T, dim/2]
/// f32 each (times the attention factor), computed in f64 from the spec's
/// inverse frequencies: token t sits at position t, or at positions[t]
/// (positions = runtime: `positions`, [T] i32; else null). `tDyn` holds T
/// when it is dynamic.
std::pair<mlir::Value, mlir::Value>
rotaryTable(mlir::OpBuilder &b, mlir::Location l, const AttentionSpec &s,
            int64_t T, mlir::ValueRange tDyn, mlir::Value positions);

/// `heads` [1, T, count, dk] f32 with the first rope.rotated(dk) channels
/// of each head rotated by the table's angles (pairs as the spec's
/// pairing says); the rest pass through.
mlir::Value rotateHeads(mlir::OpBuilder &b, mlir::Location l,
                        const AttentionSpec &s, mlir::Value heads,
                        std::pair<mlir::Value, mlir::Value> table,
                        mlir::OpFoldResult tSize);

} // namespace mhagen::mlirbackend

#endif
