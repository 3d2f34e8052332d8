//===- FlashTile.h - one query tile's walk over its key tiles ---*- C++ -*-===//
//
// What the flash form (mha-lower-to-linalg) and the split-KV decode form
// (mha-split-kv-decode) share: the K/V tiles of one K/V head, the key
// tiles a mask leaves to a tile of query rows (docs/design.md §2 "Tile
// skipping"), and the loop over them whose body is one online-softmax step
// (OnlineSoftmax.h). The two forms differ only in which query rows a tile
// holds -- QT tokens of one head, or every head of a GQA group for the
// call's few tokens -- which FlashTile::position says.
#ifndef MHAGEN_MLIR_TRANSFORMS_FLASHTILE_H
#define MHAGEN_MLIR_TRANSFORMS_FLASHTILE_H

#include "mhagen/mlir/MhaDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Utils/StructuredOpsUtils.h"
#include "mlir/IR/PatternMatch.h"

#include <functional>
#include <optional>

namespace mhagen::mha {

/// Index arithmetic at a builder's insertion point.
struct IndexMath {
  mlir::OpBuilder &b;
  mlir::Location loc;
  mlir::Value c(int64_t v);
  mlir::Value add(mlir::Value x, mlir::Value y);
  mlir::Value sub(mlir::Value x, mlir::Value y);
  mlir::Value mul(mlir::Value x, mlir::Value y);
  mlir::Value min(mlir::Value x, mlir::Value y);
  mlir::Value max(mlir::Value x, mlir::Value y);
  mlir::Value floorDiv(mlir::Value x, mlir::Value y);
  mlir::Value ceilDiv(mlir::Value x, mlir::Value y);
};

/// `parallel` parallel iterators followed by `reduction` reductions.
llvm::SmallVector<mlir::utils::IteratorType> iteratorTypes(int parallel,
                                                           int reduction = 0);

/// Rows [t0, t0 + rows) of head `head` of batch `batch` of a [B, T, heads,
/// width] tensor as a [full x width] tile, zero-padded past `rows`.
mlir::Value loadHeadRows(mlir::OpBuilder &b, mlir::Location loc,
                         mlir::Value src, mlir::Value batch, mlir::Value t0,
                         mlir::Value rows, mlir::Value head, int64_t full);

/// An f32 copy of a 2-D tile, optionally transposed and multiplied by the
/// f32 scalar `mul`.
mlir::Value tileToF32(mlir::OpBuilder &b, mlir::Location loc, mlir::Value t,
                      bool transpose, mlir::Value mul);

/// Entries [t0, t0 + rows) of head `head` of batch `batch` of a [B, T,
/// heads] tensor (int8 K/V row scales) as a [full] tile, zero-padded.
mlir::Value loadHeadScales(mlir::OpBuilder &b, mlir::Location loc,
                           mlir::Value src, mlir::Value batch, mlir::Value t0,
                           mlir::Value rows, mlir::Value head, int64_t full);

/// A K or V tile [KT x width] in its storage type widened to f32 (int8:
/// times its row's scale from `scales` [KT]), transposed for K^T.
mlir::Value kvTileToF32(mlir::OpBuilder &b, mlir::Location loc, mlir::Value t,
                        mlir::Value scales, bool transpose);

/// Key tiles [lo, hi) of one mask clause.
struct KeyTileRange {
  mlir::Value lo, hi;
};

/// The scale the query tile is multiplied by: the op's attribute, times
/// the call's scale_factor[0] when given (scale = runtime); null for 1.
mlir::Value queryScaleOf(mlir::OpBuilder &b, mlir::Location loc,
                         AttentionOp op);

/// The keys of `op`'s sequences: T_kv, key dimension 1, or with a paged
/// cache (block_table) the table's width times the block size.
mlir::Value keyLengthOf(mlir::OpBuilder &b, mlir::Location loc, AttentionOp op);

/// The key tile `op` is lowered with: `keyTile`, or with a paged cache
/// pagedKeyTile(keyTile, BLOCK) (MhaPasses.h), so that a key tile is one
/// slice of one block.
int64_t keyTileFor(AttentionOp op, int64_t keyTile);

/// One query tile's walk over the keys of K/V head `kvHead`.
struct FlashTile {
  /// The walk of `op`'s keys for batch `batch` (T_kv `tkv`): K/V and
  /// their scales, the batch's length, the mask and the softcap, in tiles
  /// of `rows` x `keyTile`. The caller sets kvHead, slope and position.
  static FlashTile forOp(mlir::OpBuilder &b, mlir::Location loc, AttentionOp op,
                         mlir::Value batch, mlir::Value tkv, int64_t rows,
                         int64_t keyTile);

  mlir::Value k, v;             ///< [B, Tkv, kv, dk] and [B, Tkv, kv, dv]
  mlir::Value kScales, vScales; ///< int8 K/V: [B, Tkv, kv] f32; else null
  /// A paged cache: [B, W] i32, and K/V (and their scales) are blocks
  /// [num_blocks, kvBlock, ...]; null for a contiguous cache.
  mlir::Value blockTable;
  int64_t kvBlock = 0;
  mlir::Value batch, kvHead; ///< the task's batch and K/V head
  mlir::Value tkv;           ///< T_kv
  mlir::Value kvLen;         ///< kv_lens[batch]; null without padding
  int64_t rows = 0, keyTile = 0;
  llvm::SmallVector<MaskAttr> clauses;
  std::optional<float> softcap;
  /// ALiBi: an f32 scalar (every row of the tile is one head) or a [rows]
  /// f32 tensor (a slope per row); null without ALiBi.
  mlir::Value slope;
  /// The sequence position of tile row `row` (an index), built inside a
  /// linalg body; keys are at their index.
  std::function<mlir::Value(mlir::OpBuilder &, mlir::Location, mlir::Value)>
      position;

  /// The key tiles each clause of the mask leaves to rows at positions
  /// [firstPos, lastPos] (docs/design.md §2 "Tile skipping"): a tile
  /// outside all of them is hidden from every row.
  llvm::SmallVector<KeyTileRange> keyTileRanges(mlir::OpBuilder &b,
                                                mlir::Location loc,
                                                mlir::Value firstPos,
                                                mlir::Value lastPos) const;

  /// scf.for over key tiles [lo, hi), carrying (acc [rows x dv], m
  /// [rows], l [rows]); with more than one range, a tile in none of them
  /// is skipped by a branch around the step. Returns (acc, m, l).
  llvm::SmallVector<mlir::Value>
  buildKeyLoop(mlir::RewriterBase &rw, mlir::Location loc, mlir::Value qTile,
               llvm::ArrayRef<KeyTileRange> ranges, mlir::Value lo,
               mlir::Value hi, mlir::ValueRange init) const;

  /// Where key tile `kt`'s K/V rows are, the same for every K/V head:
  /// its first key k0, the batch (or paged block) and the token (or slot)
  /// `from`/`t0` they start at, and how many of its keyTile rows exist.
  struct KeyTileRows {
    mlir::Value k0, from, t0, rows;
  };
  KeyTileRows locate(mlir::OpBuilder &b, mlir::Location loc,
                     mlir::Value kt) const;

  /// The step over key tile `kt` if some range holds it (one range: it
  /// does), else the state unchanged: (acc', m', l'). `located`: the
  /// tile's rows, located once by a caller that walks several heads per
  /// key tile (the split-KV form); else located here.
  llvm::SmallVector<mlir::Value>
  stepIfVisible(mlir::RewriterBase &rw, mlir::Location loc, mlir::Value qTile,
                llvm::ArrayRef<KeyTileRange> ranges, mlir::Value kt,
                mlir::ValueRange state,
                std::optional<KeyTileRows> located = std::nullopt) const;

  /// One online-softmax step over the key tile at `at`: (acc', m', l').
  llvm::SmallVector<mlir::Value> step(mlir::RewriterBase &rw,
                                      mlir::Location loc, mlir::Value qTile,
                                      const KeyTileRows &at, mlir::Value acc,
                                      mlir::Value m, mlir::Value l) const;
};

/// The hull [min lo, max hi) of a clause's ranges.
KeyTileRange hullOf(IndexMath &im, llvm::ArrayRef<KeyTileRange> ranges);

} // namespace mhagen::mha

#endif
