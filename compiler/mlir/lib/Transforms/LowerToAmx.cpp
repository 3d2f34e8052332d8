//===- LowerToAmx.cpp - bf16 attention on AMX tiles -----------------------===//
//
// mha-lower-to-amx: see its description in MhaPasses.td. The layout is
// chosen so that no per-key-tile transpose of K is needed and the online
// softmax needs no horizontal reductions:
//
//   S^T = K Q^T   A = 16 keys x 32 channels, read as stored;
//                 B = Q^T in the tiles' pair-interleaved (VNNI) layout,
//                 packed once per query tile;
//   softmax       queries in the vector lanes, one vector per key;
//   O += P V      A = P (queries x 32 keys, one 16x16 transpose per half);
//                 B = V with each pair of keys interleaved per channel.
//
// O stays in a stack buffer in f32: the eight tile registers cannot hold
// a 16 x dv accumulator next to its operands, and the per-row rescale of
// the online softmax needs vector registers anyway.
#include "mhagen/mlir/MhaDialect.h"
#include "mhagen/mlir/MhaPasses.h"
#include "mhagen/spec/SoftmaxNumerics.h"

#include "mlir/Dialect/AMX/AMXDialect.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

#include <cmath>

namespace mhagen::mha {
#define GEN_PASS_DEF_MHALOWERTOAMX
#include "mhagen/mlir/MhaPasses.h.inc"
} // namespace mhagen::mha

using namespace mlir;
using namespace mhagen::mha;
using mhagen::kLowestScore;
using mhagen::kTinySum;

namespace {

// Tile shapes of tdpbf16ps: 16 rows, 64 bytes per row.
constexpr int64_t kRows = 16;    // queries or keys per tile
constexpr int64_t kDepth = 32;   // bf16 elements of the product's depth
constexpr int64_t kKeyTile = 32; // keys per step of the online softmax
constexpr int64_t kOutCols = 16; // f32 columns of an accumulator tile
// Query row blocks of 16 per task: each key tile's K rows and V pairs serve
// both, and both blocks' accumulators fit the tile registers beside P, V.
constexpr int64_t kBlocks = 2;

/// The memrefs the op reads and writes, when it is the plain bf16
/// attention this lowering covers: its operands come straight from the
/// kernel's memrefs and its result goes straight into one.
struct AmxOperands {
  Value q, k, v, out;
  bufferization::MaterializeInDestinationOp store;
};

Value memrefOf(Value tensor) {
  auto t = tensor.getDefiningOp<bufferization::ToTensorOp>();
  return t ? t.getMemref() : Value();
}

std::optional<AmxOperands> amxOperands(AttentionOp op) {
  if (op.getKvLens() || op.getSinks() || op.getSlopes() ||
      op.getScaleFactor() || op.getKScales() || op.getVScales() ||
      op.getBlockTable() || op.getLseInit() || op.getSoftcap() ||
      op.getMaskOr() || op.getPerSequence())
    return std::nullopt;
  MaskAttr mask = op.getMask();
  if (mask.getPadding() || mask.getSink() > 0)
    return std::nullopt;
  auto q = cast<RankedTensorType>(op.getQuery().getType());
  auto k = cast<RankedTensorType>(op.getKey().getType());
  auto v = cast<RankedTensorType>(op.getValue().getType());
  auto o = cast<RankedTensorType>(op.getResult().getType());
  for (RankedTensorType t : {q, k, v, o})
    if (!t.getElementType().isBF16() || t.isDynamicDim(2) || t.isDynamicDim(3))
      return std::nullopt;
  if (v.getDimSize(3) % kOutCols != 0)
    return std::nullopt;
  AmxOperands r;
  r.q = memrefOf(op.getQuery());
  r.k = memrefOf(op.getKey());
  r.v = memrefOf(op.getValue());
  r.out = memrefOf(op.getInit());
  if (!r.q || !r.k || !r.v || !r.out || !op.getResult().hasOneUse())
    return std::nullopt;
  r.store = dyn_cast<bufferization::MaterializeInDestinationOp>(
      *op.getResult().getUsers().begin());
  if (!r.store || r.store.getDest() != r.out)
    return std::nullopt;
  return r;
}

/// Builds the kernel of one op; `b` inserts where the kernel goes.
class AmxAttention {
public:
  AmxAttention(ImplicitLocOpBuilder &b, AttentionOp op, const AmxOperands &m)
      : b(b), op(op), m(m) {
    auto qType = cast<MemRefType>(m.q.getType());
    auto vType = cast<MemRefType>(m.v.getType());
    heads = qType.getDimSize(2);
    dk = qType.getDimSize(3);
    depthSteps = (dk + kDepth - 1) / kDepth;
    dv = vType.getDimSize(3);
    group = heads / op.getNumKvHeads();
    bf16 = b.getBF16Type();
    f32 = b.getF32Type();
    i32 = b.getI32Type();
  }

  void build() {
    Value batch = b.create<memref::DimOp>(m.q, 0);
    tq = b.create<memref::DimOp>(m.q, 1);
    tkv = b.create<memref::DimOp>(m.k, 1);
    offset = b.create<arith::SubIOp>(tkv, tq);
    Value queryTiles = ceilDiv(tq, kBlocks * kRows);
    SmallVector<OpFoldResult> ubs = {batch, b.getIndexAttr(heads), queryTiles};
    auto forall = b.create<scf::ForallOp>(ubs, ValueRange{}, std::nullopt);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(forall.getBody()->getTerminator());
    ValueRange ivs = forall.getInductionVars();
    queryTile(ivs[0], ivs[1], ivs[2]);
  }

private:
  ImplicitLocOpBuilder &b;
  AttentionOp op;
  AmxOperands m;
  int64_t heads = 0, dk = 0, dv = 0, group = 1;
  // dk in steps of the product's depth; the last step of a dk that is not
  // a multiple of 32 (80, say) reads zeros past dk.
  int64_t depthSteps = 0;
  Type bf16, f32, i32;
  Value tq, tkv, offset;
  // Per query tile.
  Value batchIv, kvHead, head, q0;
  Value qPack, keyRows, scoresT, probsT, probs, vPack, acc, rowScale;

  Value idx(int64_t v) { return b.create<arith::ConstantIndexOp>(v); }
  Value ceilDiv(Value a, int64_t d) {
    return b.create<arith::CeilDivSIOp>(a, idx(d));
  }
  Value minIdx(Value a, Value c) { return b.create<arith::MinSIOp>(a, c); }
  Value maxIdx(Value a, Value c) { return b.create<arith::MaxSIOp>(a, c); }
  Value add(Value a, Value c) { return b.create<arith::AddIOp>(a, c); }
  Value add(Value a, int64_t c) { return add(a, idx(c)); }
  VectorType vec(ArrayRef<int64_t> shape, Type t) {
    return VectorType::get(shape, t);
  }
  Value splat(Type t, double value, int64_t lanes = kRows) {
    return b.create<arith::ConstantOp>(
        DenseElementsAttr::get(vec({lanes}, t), b.getFloatAttr(t, value)));
  }
  Value stack(ArrayRef<int64_t> shape, Type t) {
    // Cache-line aligned: every tile row and vector here is 64 bytes, and
    // an unaligned one touches two lines.
    return b.create<memref::AllocaOp>(MemRefType::get(shape, t),
                                      b.getI64IntegerAttr(64));
  }
  Value read(VectorType t, Value mem, ValueRange at, bool within = true) {
    SmallVector<bool> inBounds(t.getRank(), within);
    Type e = t.getElementType();
    Value pad = b.create<arith::ConstantOp>(b.getZeroAttr(e));
    return b.create<vector::TransferReadOp>(t, mem, at, pad,
                                            ArrayRef<bool>(inBounds));
  }
  /// An scf.for whose body `body(iv, iterArgs)` builds through `b` and
  /// returns what it yields.
  scf::ForOp forLoop(Value lb, Value ub, Value step, ValueRange init,
                     function_ref<SmallVector<Value>(Value, ValueRange)> body) {
    auto loop = b.create<scf::ForOp>(lb, ub, step, init);
    OpBuilder::InsertionGuard guard(b);
    Block *block = loop.getBody();
    if (init.empty()) {
      b.setInsertionPoint(block->getTerminator());
      body(loop.getInductionVar(), {});
    } else {
      b.setInsertionPointToEnd(block);
      b.create<scf::YieldOp>(
          body(loop.getInductionVar(), loop.getRegionIterArgs()));
    }
    return loop;
  }
  void forEach(Value lb, Value ub, int64_t step,
               function_ref<void(Value)> body) {
    forLoop(lb, ub, idx(step), ValueRange{},
            [&](Value iv, ValueRange) -> SmallVector<Value> {
              body(iv);
              return {};
            });
  }

  void write(Value v, Value mem, ValueRange at) {
    SmallVector<bool> inBounds(cast<VectorType>(v.getType()).getRank(), true);
    b.create<vector::TransferWriteOp>(v, mem, at, ArrayRef<bool>(inBounds));
  }

  /// Row `row` of a [B, T, heads, width] memref as `lanes` elements at
  /// channel `c`, or zeros when the row is past `rows`: the load is clamped
  /// to the last row, so nothing outside the tensor is read. Channels past
  /// the width read as zeros (a masked load).
  Value rowOrZero(Value mem, Value row, Value rows, Value headIdx, int64_t c,
                  int64_t lanes) {
    Value last = b.create<arith::SubIOp>(rows, idx(1));
    Value clamped = minIdx(row, last);
    Value inside =
        b.create<arith::CmpIOp>(arith::CmpIPredicate::slt, row, rows);
    const bool pastWidth =
        c + lanes > cast<MemRefType>(mem.getType()).getDimSize(3);
    Value x = read(vec({lanes}, bf16), mem, {batchIv, clamped, headIdx, idx(c)},
                   /*inBounds=*/!pastWidth);
    Value zero = b.create<arith::ConstantOp>(
        DenseElementsAttr::get(vec({lanes}, bf16), b.getZeroAttr(bf16)));
    return b.create<arith::SelectOp>(inside, x, zero);
  }

  /// Q^T of the tile in the pair-interleaved layout, one [16 channel pairs,
  /// 16 queries x 2] block per 32 channels: a 32-bit transpose of the rows.
  void packQueries(int64_t blk) {
    Value qb = add(q0, blk * kRows);
    for (int64_t c = 0; c < depthSteps; ++c) {
      Value tile = b.create<arith::ConstantOp>(DenseElementsAttr::get(
          vec({kRows, kDepth}, bf16), b.getZeroAttr(bf16)));
      for (int64_t i = 0; i < kRows; ++i) {
        Value row = rowOrZero(m.q, add(qb, i), tq, head, c * kDepth, kDepth);
        tile = b.create<vector::InsertOp>(row, tile, i);
      }
      Value words = b.create<vector::BitCastOp>(vec({kRows, kRows}, i32), tile);
      Value t = b.create<vector::TransposeOp>(words, ArrayRef<int64_t>{1, 0});
      write(b.create<vector::BitCastOp>(vec({kRows, kDepth}, bf16), t), qPack,
            {idx(blk), idx(c), idx(0), idx(0)});
    }
  }

  /// The key tile's rows as stored (zeros past T_kv): the A operand of S^T.
  void copyKeys(Value j0) {
    forEach(idx(0), idx(kKeyTile), 1, [&](Value r) {
      for (int64_t c = 0; c < depthSteps * kDepth; c += kDepth)
        write(rowOrZero(m.k, add(j0, r), tkv, kvHead, c, kDepth), keyRows,
              {r, idx(c)});
    });
  }

  /// V of the key tile with keys 2r and 2r+1 interleaved per channel: row r
  /// of block n is the B operand layout of P V for channels 16n..16n+15.
  /// (A hidden key's non-finite value reaches the rows of the tile as
  /// 0 x NaN, as in any P V product: docs/design.md §1.)
  void packValues(Value j0) {
    forEach(idx(0), idx(kKeyTile / 2), 1, [&](Value r) {
      Value even = add(j0, b.create<arith::MulIOp>(r, idx(2)));
      Value odd = add(even, 1);
      for (int64_t n = 0; n < dv / kOutCols; ++n) {
        Value a = rowOrZero(m.v, even, tkv, kvHead, n * kOutCols, kOutCols);
        Value c = rowOrZero(m.v, odd, tkv, kvHead, n * kOutCols, kOutCols);
        write(b.create<vector::InterleaveOp>(a, c), vPack, {idx(n), r, idx(0)});
      }
    });
  }

  /// Whether the key tile from j0 lies inside T_kv.
  Value wholeTile(Value j0) {
    return b.create<arith::CmpIOp>(arith::CmpIPredicate::sle, add(j0, kKeyTile),
                                   tkv);
  }

  /// The key tile's rows as the A operand of S^T: read in place from K when
  /// the tile is whole, else copied with zeros past T_kv so that nothing
  /// outside K is read. A tile load's row stride is its memref's row length
  /// (MLIR 19's AMX lowering takes the last dimension's size), so the view
  /// of K is [32, token stride] from the tile's first key.
  Value keySource(Value j0) {
    MLIRContext *ctx = b.getContext();
    const int64_t dyn = ShapedType::kDynamic;
    auto type = MemRefType::get({kKeyTile, dyn}, bf16,
                                StridedLayoutAttr::get(ctx, dyn, {dyn, 1}));
    // A row of K past a dk that is not a multiple of 32 is not the tile's
    // to read (the next head's channels, or past the tensor): copied.
    if (dk % kDepth != 0) {
      copyKeys(j0);
      return b.create<memref::CastOp>(type, keyRows);
    }
    auto choice = b.create<scf::IfOp>(TypeRange{type}, wholeTile(j0),
                                      /*withElseRegion=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(choice.thenBlock());
    auto meta = b.create<memref::ExtractStridedMetadataOp>(m.k);
    ValueRange strides = meta.getStrides();
    Value start = meta.getOffset();
    start = add(start, b.create<arith::MulIOp>(batchIv, strides[0]));
    start = add(start, b.create<arith::MulIOp>(j0, strides[1]));
    start = add(start, b.create<arith::MulIOp>(kvHead, strides[2]));
    Value view = b.create<memref::ReinterpretCastOp>(
        type, meta.getBaseBuffer(), OpFoldResult(start),
        ArrayRef<OpFoldResult>{b.getIndexAttr(kKeyTile), strides[1]},
        ArrayRef<OpFoldResult>{strides[1], b.getIndexAttr(1)});
    b.create<scf::YieldOp>(ValueRange{view});
    b.setInsertionPointToStart(choice.elseBlock());
    copyKeys(j0);
    b.create<scf::YieldOp>(ValueRange{b.create<memref::CastOp>(type, keyRows)});
    return choice.getResult(0);
  }

  /// S^T = K Q^T for the tile's 32 keys and each row block, into
  /// scoresT [block, 32 keys, 16 queries]. The four products of a step
  /// (two halves of keys x two row blocks) go to four accumulators, so
  /// none waits on the latency of its own.
  void scores(Value keys) {
    auto aType = vec({kRows, kDepth}, bf16);
    auto cType = vec({kRows, kOutCols}, f32);
    const int64_t halves = kKeyTile / kRows;
    SmallVector<Value> c;
    for (int64_t i = 0; i < halves * kBlocks; ++i)
      c.push_back(b.create<amx::TileZeroOp>(cType));
    for (int64_t ch = 0; ch < depthSteps; ++ch)
      for (int64_t half = 0; half < halves; ++half) {
        Value a = b.create<amx::TileLoadOp>(
            aType, keys, ValueRange{idx(half * kRows), idx(ch * kDepth)});
        for (int64_t blk = 0; blk < kBlocks; ++blk) {
          Value qt = b.create<amx::TileLoadOp>(
              aType, qPack, ValueRange{idx(blk), idx(ch), idx(0), idx(0)});
          Value &cc = c[half * kBlocks + blk];
          cc = b.create<amx::TileMulFOp>(cType, a, qt, cc);
        }
      }
    for (int64_t half = 0; half < halves; ++half)
      for (int64_t blk = 0; blk < kBlocks; ++blk)
        b.create<amx::TileStoreOp>(
            scoresT, ValueRange{idx(blk), idx(half * kRows), idx(0)},
            c[half * kBlocks + blk]);
  }

  /// The online softmax of one key tile with the queries in the lanes;
  /// returns the new (max, sum) and leaves P in `probs` (bf16, query rows)
  /// and each query's rescale factor in `rowScale`.
  /// `poisoned` holds the lanes that have seen a non-finite score; the
  /// tile's are added to it.
  /// A tile that every query of the block sees whole (inside T_kv, before
  /// the block's first query for causal, inside the window of its last)
  /// takes a form with no visibility test: most tiles, with fewer
  /// instructions per key.
  std::pair<Value, Value> softmax(int64_t blk, Value j0, Value runMax,
                                  Value runSum, Value &poisoned) {
    MaskAttr mask = op.getMask();
    Value firstPos = add(add(q0, blk * kRows), offset);
    Value lastKey = add(j0, kKeyTile - 1);
    Value open = wholeTile(j0);
    if (mask.getCausal() || mask.getWindow() > 0)
      open = b.create<arith::AndIOp>(
          open, b.create<arith::CmpIOp>(arith::CmpIPredicate::sle, lastKey,
                                        firstPos));
    if (mask.getWindow() > 0) {
      Value lastPos = add(firstPos, kRows - 1);
      open = b.create<arith::AndIOp>(
          open, b.create<arith::CmpIOp>(arith::CmpIPredicate::sgt, j0,
                                        add(lastPos, -mask.getWindow())));
    }
    auto fv = vec({kRows}, f32);
    auto branch = b.create<scf::IfOp>(
        TypeRange{fv, fv, vec({kRows}, b.getI1Type())}, open,
        /*withElseRegion=*/true);
    OpBuilder::InsertionGuard guard(b);
    for (bool masked : {false, true}) {
      b.setInsertionPointToStart(masked ? branch.elseBlock()
                                        : branch.thenBlock());
      Value tilePoisoned = poisoned;
      auto [newMax, newSum] =
          softmaxOf(blk, j0, firstPos, runMax, runSum, tilePoisoned, masked);
      b.create<scf::YieldOp>(ValueRange{newMax, newSum, tilePoisoned});
    }
    poisoned = branch.getResult(2);
    return {branch.getResult(0), branch.getResult(1)};
  }

  /// The softmax of one key tile, `masked`: with the visibility of each
  /// (query, key) pair, else for a tile the block sees whole. Scores stay
  /// unscaled up to the exponent, exp((s - m) scale) as one FMA.
  /// `firstPos`: the block's first query position in key coordinates.
  std::pair<Value, Value> softmaxOf(int64_t blk, Value j0, Value firstPos,
                                    Value runMax, Value runSum, Value &poisoned,
                                    bool masked) {
    auto fv = vec({kRows}, f32);
    auto iv = vec({kRows}, i32);
    MaskAttr mask = op.getMask();
    const bool causal = mask.getCausal() || mask.getWindow() > 0;
    auto i32Splat = [&](int32_t v) {
      return b.create<arith::ConstantOp>(
          DenseElementsAttr::get(iv, b.getI32IntegerAttr(v)));
    };
    // Each lane's query position in key coordinates: firstPos + lane.
    Value pos;
    if (masked) {
      SmallVector<int32_t> lanes;
      for (int32_t i = 0; i < kRows; ++i)
        lanes.push_back(i);
      Value lane = b.create<arith::ConstantOp>(
          DenseElementsAttr::get(iv, ArrayRef<int32_t>(lanes)));
      Value first = b.create<arith::IndexCastOp>(i32, firstPos);
      pos = b.create<arith::AddIOp>(lane,
                                    b.create<vector::BroadcastOp>(iv, first));
    }
    Value scale = splat(f32, op.getScale().convertToFloat());
    Value lowest = splat(f32, kLowestScore);
    Value zero = splat(f32, 0.0);
    // A score is infinite or NaN when its magnitude's bits reach the
    // exponent mask's: the largest magnitude of the tile is tested once, on
    // the bits, which no fast-math flag can fold.
    Value magnitudeMask = i32Splat(0x7fffffff);
    Value largest = i32Splat(0);
    auto keyIndex = [&](int64_t r) {
      return b.create<arith::IndexCastOp>(i32, add(j0, r));
    };
    SmallVector<Value> s, visible;
    Value newMax = runMax;
    Value tkv32 = b.create<arith::IndexCastOp>(i32, tkv);
    for (int64_t r = 0; r < kKeyTile; ++r) {
      Value x = read(fv, scoresT, {idx(blk), idx(r), idx(0)});
      Value magnitude = b.create<arith::AndIOp>(
          b.create<arith::BitcastOp>(iv, x), magnitudeMask);
      if (masked) {
        Value j = keyIndex(r);
        Value jv = b.create<vector::BroadcastOp>(iv, j);
        Value inKeys =
            b.create<arith::CmpIOp>(arith::CmpIPredicate::slt, j, tkv32);
        Value ok =
            b.create<vector::BroadcastOp>(vec({kRows}, b.getI1Type()), inKeys);
        if (causal)
          ok = b.create<arith::AndIOp>(
              ok, b.create<arith::CmpIOp>(arith::CmpIPredicate::sle, jv, pos));
        if (mask.getWindow() > 0) {
          Value w = i32Splat(static_cast<int32_t>(mask.getWindow()));
          ok = b.create<arith::AndIOp>(
              ok, b.create<arith::CmpIOp>(arith::CmpIPredicate::sgt, jv,
                                          b.create<arith::SubIOp>(pos, w)));
        }
        magnitude = b.create<arith::SelectOp>(ok, magnitude, i32Splat(0));
        x = b.create<arith::SelectOp>(ok, x, lowest);
        visible.push_back(ok);
      }
      largest = b.create<arith::MaxUIOp>(largest, magnitude);
      newMax = b.create<arith::MaximumFOp>(newMax, x);
      s.push_back(x);
    }
    poisoned = b.create<arith::OrIOp>(
        poisoned, b.create<arith::CmpIOp>(arith::CmpIPredicate::uge, largest,
                                          i32Splat(0x7f800000)));
    Value alpha = b.create<math::ExpOp>(b.create<arith::MulFOp>(
        b.create<arith::SubFOp>(runMax, newMax), scale));
    Value shift =
        b.create<arith::NegFOp>(b.create<arith::MulFOp>(newMax, scale));
    Value sum = zero;
    for (int64_t r = 0; r < kKeyTile; ++r) {
      Value p =
          b.create<math::ExpOp>(b.create<math::FmaOp>(s[r], scale, shift));
      // A hidden key adds nothing, even while the row has seen no key (its
      // max then is the hidden score itself).
      if (masked)
        p = b.create<arith::SelectOp>(visible[r], p, zero);
      sum = b.create<arith::AddFOp>(sum, p);
      write(p, probsT, {idx(r), idx(0)});
    }
    // P^T [keys, queries] -> P [queries, keys] in bf16, one 16x16 block
    // per half of the tile.
    for (int64_t half = 0; half < kKeyTile / kRows; ++half) {
      Value block =
          read(vec({kRows, kRows}, f32), probsT, {idx(half * kRows), idx(0)});
      Value t = b.create<vector::TransposeOp>(block, ArrayRef<int64_t>{1, 0});
      write(b.create<arith::TruncFOp>(vec({kRows, kRows}, bf16), t), probs,
            {idx(blk), idx(0), idx(half * kRows)});
    }
    write(alpha, rowScale, {idx(blk), idx(0)});
    Value newSum =
        b.create<arith::AddFOp>(b.create<arith::MulFOp>(runSum, alpha), sum);
    return {newMax, newSum};
  }

  /// Each accumulator row times a per-query factor from `factors`.
  void scaleRows(int64_t blk, Value rows,
                 function_ref<void(Value i, Value f)> each) {
    forEach(idx(0), rows, 1, [&](Value i) {
      Value f = b.create<memref::LoadOp>(rowScale, ValueRange{idx(blk), i});
      each(i, b.create<vector::BroadcastOp>(vec({kOutCols}, f32), f));
    });
  }

  /// O = O * alpha + P V for each row block.
  void accumulate() {
    auto fv = vec({kOutCols}, f32);
    for (int64_t blk = 0; blk < kBlocks; ++blk) {
      // Once a row's maximum has settled its factor is exactly 1, and the
      // pass over the accumulator is skipped (the usual case after the
      // first key tiles).
      Value alpha = read(vec({kRows}, f32), rowScale, {idx(blk), idx(0)});
      Value below = b.create<arith::CmpFOp>(arith::CmpFPredicate::OLT, alpha,
                                            splat(f32, 1.0));
      Value any =
          b.create<vector::ReductionOp>(vector::CombiningKind::OR, below);
      auto rescale = b.create<scf::IfOp>(any, /*withElseRegion=*/false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(rescale.thenBlock()->getTerminator());
      scaleRows(blk, idx(kRows), [&](Value i, Value f) {
        for (int64_t n = 0; n < dv; n += kOutCols)
          write(
              b.create<arith::MulFOp>(read(fv, acc, {idx(blk), i, idx(n)}), f),
              acc, {idx(blk), i, idx(n)});
      });
    }
    // Per 16 channels: one V tile for both blocks' P (P0, P1, V and two
    // accumulators: 5 of the 8 tile registers).
    auto aType = vec({kRows, kDepth}, bf16);
    auto cType = vec({kRows, kOutCols}, f32);
    SmallVector<Value> p;
    for (int64_t blk = 0; blk < kBlocks; ++blk)
      p.push_back(b.create<amx::TileLoadOp>(
          aType, probs, ValueRange{idx(blk), idx(0), idx(0)}));
    for (int64_t n = 0; n < dv / kOutCols; ++n) {
      Value vt = b.create<amx::TileLoadOp>(aType, vPack,
                                           ValueRange{idx(n), idx(0), idx(0)});
      SmallVector<Value> c;
      for (int64_t blk = 0; blk < kBlocks; ++blk) {
        Value cn = b.create<amx::TileLoadOp>(
            cType, acc, ValueRange{idx(blk), idx(0), idx(n * kOutCols)});
        c.push_back(b.create<amx::TileMulFOp>(cType, p[blk], vt, cn));
      }
      for (int64_t blk = 0; blk < kBlocks; ++blk)
        b.create<amx::TileStoreOp>(
            acc, ValueRange{idx(blk), idx(0), idx(n * kOutCols)}, c[blk]);
    }
  }

  void queryTile(Value bi, Value hi, Value qt) {
    batchIv = bi;
    head = hi;
    kvHead = b.create<arith::DivUIOp>(hi, idx(group));
    q0 = b.create<arith::MulIOp>(qt, idx(kBlocks * kRows));
    qPack = stack({kBlocks, depthSteps, kRows, kDepth}, bf16);
    keyRows = stack({kKeyTile, depthSteps * kDepth}, bf16);
    scoresT = stack({kBlocks, kKeyTile, kRows}, f32);
    probsT = stack({kKeyTile, kRows}, f32);
    probs = stack({kBlocks, kRows, kKeyTile}, bf16);
    vPack = stack({dv / kOutCols, kKeyTile / 2, kOutCols * 2}, bf16);
    acc = stack({kBlocks, kRows, dv}, f32);
    rowScale = stack({kBlocks, kRows}, f32);
    for (int64_t blk = 0; blk < kBlocks; ++blk) {
      packQueries(blk);
      for (int64_t i = 0; i < kRows; ++i)
        for (int64_t n = 0; n < dv; n += kOutCols)
          write(splat(f32, 0.0), acc, {idx(blk), idx(i), idx(n)});
    }

    // The keys the tile's queries may see: all, or up to the last query's
    // position (causal), from the first query's window start.
    MaskAttr mask = op.getMask();
    Value keyEnd = tkv;
    Value keyBegin = idx(0);
    if (mask.getCausal() || mask.getWindow() > 0) {
      Value last = add(add(q0, offset), kBlocks * kRows);
      keyEnd = maxIdx(minIdx(last, tkv), idx(0));
    }
    if (mask.getWindow() > 0) {
      Value first = add(add(q0, offset), 1 - mask.getWindow());
      keyBegin = b.create<arith::MulIOp>(
          b.create<arith::DivSIOp>(maxIdx(first, idx(0)), idx(kKeyTile)),
          idx(kKeyTile));
    }
    // Per row block: the running max, the running sum and the rows that
    // saw a non-finite score.
    Value clean = b.create<arith::ConstantOp>(
        DenseElementsAttr::get(vec({kRows}, b.getI1Type()), false));
    SmallVector<Value> init;
    for (int64_t blk = 0; blk < kBlocks; ++blk)
      init.append({splat(f32, kLowestScore), splat(f32, 0.0), clean});
    scf::ForOp loop =
        forLoop(keyBegin, keyEnd, idx(kKeyTile), init,
                [&](Value j0, ValueRange state) -> SmallVector<Value> {
                  scores(keySource(j0));
                  SmallVector<Value> next;
                  for (int64_t blk = 0; blk < kBlocks; ++blk) {
                    Value poisoned = state[3 * blk + 2];
                    auto [newMax, newSum] = softmax(
                        blk, j0, state[3 * blk], state[3 * blk + 1], poisoned);
                    next.append({newMax, newSum, poisoned});
                  }
                  packValues(j0);
                  accumulate();
                  return next;
                });

    // O / sum in bf16; a row that saw no key (sum 0) is zero, one that saw
    // a non-finite score NaN.
    auto ov = vec({kOutCols}, f32);
    for (int64_t blk = 0; blk < kBlocks; ++blk) {
      Value sum = loop.getResult(3 * blk + 1);
      Value seen = b.create<arith::CmpFOp>(arith::CmpFPredicate::OGT, sum,
                                           splat(f32, kTinySum));
      Value inv = b.create<arith::SelectOp>(
          seen, b.create<arith::DivFOp>(splat(f32, 1.0), sum), splat(f32, 0.0));
      inv = b.create<arith::SelectOp>(loop.getResult(3 * blk + 2),
                                      splat(f32, std::nan("")), inv);
      write(inv, rowScale, {idx(blk), idx(0)});
      Value qb = add(q0, blk * kRows);
      Value rows =
          maxIdx(minIdx(b.create<arith::SubIOp>(tq, qb), idx(kRows)), idx(0));
      scaleRows(blk, rows, [&](Value i, Value f) {
        for (int64_t n = 0; n < dv; n += kOutCols) {
          Value o =
              b.create<arith::MulFOp>(read(ov, acc, {idx(blk), i, idx(n)}), f);
          write(b.create<arith::TruncFOp>(vec({kOutCols}, bf16), o), m.out,
                {batchIv, add(qb, i), head, idx(n)});
        }
      });
    }
  }
};

struct MhaLowerToAmxPass
    : public mhagen::mha::impl::MhaLowerToAmxBase<MhaLowerToAmxPass> {
  using MhaLowerToAmxBase::MhaLowerToAmxBase;
  void runOnOperation() override {
    SmallVector<std::pair<AttentionOp, AmxOperands>> ops;
    getOperation().walk([&](AttentionOp op) {
      if (std::optional<AmxOperands> m = amxOperands(op))
        ops.push_back({op, *m});
    });
    for (auto &[op, m] : ops) {
      // Calls of at most decodeTokens queries keep the op (the split-KV
      // decode form): a 16-row tile would be mostly padding.
      ImplicitLocOpBuilder b(op.getLoc(), m.store);
      Value tq = b.create<memref::DimOp>(m.q, 1);
      Value prefill = b.create<arith::CmpIOp>(
          arith::CmpIPredicate::sgt, tq,
          b.create<arith::ConstantIndexOp>(decodeTokens));
      auto branch = b.create<scf::IfOp>(prefill, /*withElseRegion=*/true);
      // The op and its store move into the else branch.
      Block *otherwise = branch.elseBlock();
      op->moveBefore(otherwise->getTerminator());
      m.store->moveBefore(otherwise->getTerminator());
      b.setInsertionPoint(branch.thenBlock()->getTerminator());
      AmxAttention(b, op, m).build();
    }
  }
};

} // namespace
