//===- RowMaskedTransfers.h - partial tiles of whole rows -------*- C++ -*-===//
//
// A pattern of mha-lower-vectors for tile copies whose mask cuts only the
// leading (row) dimension: the last key tile's K/V rows, a partial query
// tile's Q rows.
#ifndef MHAGEN_MLIR_TRANSFORMS_ROWMASKEDTRANSFERS_H
#define MHAGEN_MLIR_TRANSFORMS_ROWMASKEDTRANSFERS_H

#include "mlir/IR/PatternMatch.h"

namespace mhagen::mha {

/// A tile copy -- a memref vector.transfer_read masked by
/// vector.create_mask %rows, N1, ..., Nk (every dimension but the first
/// whole) into an unmasked transfer_write of the whole tile -- becomes one
/// scf.if per row: the row copied when row < rows, the padding otherwise.
void populateRowMaskedTransferPatterns(mlir::RewritePatternSet &patterns);

} // namespace mhagen::mha

#endif
