//===- MhaDialect.cpp - the mha dialect, its attribute and op verifier ----===//
#include "mhagen/mlir/MhaDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mhagen::mha;

#include "mhagen/mlir/MhaOpsDialect.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "mhagen/mlir/MhaAttrs.cpp.inc"

#define GET_OP_CLASSES
#include "mhagen/mlir/MhaOps.cpp.inc"

void MhaDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "mhagen/mlir/MhaOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "mhagen/mlir/MhaAttrs.cpp.inc"
      >();
}

LogicalResult MaskAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               bool causal, int64_t window, bool padding,
                               int64_t sink) {
  (void)causal;
  (void)padding;
  if (window < 0)
    return emitError() << "mask window must be >= 0 (0: no window), got "
                       << window;
  if (sink < 0)
    return emitError() << "mask sink must be >= 0 (0: no sink term), got "
                       << sink;
  return success();
}

SmallVector<MaskAttr> AttentionOp::maskClauses() {
  SmallVector<MaskAttr> all = {getMask()};
  if (std::optional<ArrayAttr> more = getMaskOr())
    for (Attribute a : *more)
      all.push_back(cast<MaskAttr>(a));
  return all;
}

int64_t AttentionOp::kvBlockSize() {
  if (!getBlockTable())
    return 0;
  return cast<RankedTensorType>(getKey().getType()).getDimSize(1);
}

// Dimension d of two shapes agree unless one of them is dynamic.
static bool compatible(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

namespace {

// Ranks, head counts and head widths of Q, K, V and init.
LogicalResult verifyOperandShapes(AttentionOp op) {
  auto q = cast<RankedTensorType>(op.getQuery().getType());
  auto k = cast<RankedTensorType>(op.getKey().getType());
  auto v = cast<RankedTensorType>(op.getValue().getType());
  auto init = cast<RankedTensorType>(op.getInit().getType());
  auto res = cast<RankedTensorType>(op.getResult().getType());
  for (auto [name, t] : {std::pair<const char *, RankedTensorType>{"query", q},
                         {"key", k},
                         {"value", v},
                         {"init", init}})
    if (t.getRank() != 4)
      return op.emitOpError() << name
                              << " must have rank 4 ([batch, tokens, heads, "
                                 "width]), got rank "
                              << t.getRank();
  if (res != init)
    return op.emitOpError()
           << "result type " << res << " must equal the init type " << init;
  const int64_t h = op.getNumHeads(), kv = op.getNumKvHeads();
  if (h <= 0 || kv <= 0)
    return op.emitOpError() << "num_heads and num_kv_heads must be > 0, got "
                            << h << " and " << kv;
  if (h % kv != 0)
    return op.emitOpError()
           << "num_heads (" << h << ") must be divisible by num_kv_heads ("
           << kv << ")";
  if (q.getDimSize(2) != h || init.getDimSize(2) != h)
    return op.emitOpError() << "query and init must have num_heads (" << h
                            << ") as static dimension 2";
  if (k.getDimSize(2) != kv || v.getDimSize(2) != kv)
    return op.emitOpError() << "key and value must have num_kv_heads (" << kv
                            << ") as static dimension 2";
  for (auto [name, t] : {std::pair<const char *, RankedTensorType>{"query", q},
                         {"key", k},
                         {"value", v},
                         {"init", init}})
    if (ShapedType::isDynamic(t.getDimSize(3)))
      return op.emitOpError()
             << name << " head width (dimension 3) must be static";
  if (q.getDimSize(3) != k.getDimSize(3))
    return op.emitOpError()
           << "query and key head widths differ (" << q.getDimSize(3) << " vs "
           << k.getDimSize(3) << ")";
  if (v.getDimSize(3) != init.getDimSize(3))
    return op.emitOpError()
           << "value and init head widths differ (" << v.getDimSize(3) << " vs "
           << init.getDimSize(3) << ")";
  return success();
}

// Batch and token counts agree; a paged cache's block pool and table.
LogicalResult verifyBatchesAndTokens(AttentionOp op) {
  auto q = cast<RankedTensorType>(op.getQuery().getType());
  auto k = cast<RankedTensorType>(op.getKey().getType());
  auto v = cast<RankedTensorType>(op.getValue().getType());
  auto init = cast<RankedTensorType>(op.getInit().getType());
  // A paged cache's K/V are a pool of blocks: dimension 0 counts blocks,
  // not batches, and dimension 1 is the block's static token count.
  const Value table = op.getBlockTable();
  if (!compatible(q.getDimSize(0), init.getDimSize(0)) ||
      (!table && (!compatible(q.getDimSize(0), k.getDimSize(0)) ||
                  !compatible(q.getDimSize(0), v.getDimSize(0)))))
    return op.emitOpError() << "batch sizes (dimension 0) differ";
  if (table) {
    auto tt = cast<RankedTensorType>(table.getType());
    if (tt.getRank() != 2 || !tt.getElementType().isInteger(32))
      return op.emitOpError() << "block_table must be a rank-2 tensor of i32 "
                                 "([batch, blocks per sequence]), got "
                              << tt;
    if (!compatible(tt.getDimSize(0), q.getDimSize(0)))
      return op.emitOpError() << "block_table needs one row per batch";
    if (!compatible(k.getDimSize(0), v.getDimSize(0)))
      return op.emitOpError() << "key and value block counts differ";
    if (ShapedType::isDynamic(k.getDimSize(1)) || k.getDimSize(1) <= 0)
      return op.emitOpError() << "a paged key/value pool needs a static block "
                                 "size > 0 (dimension 1)";
    if (!op.getPerSequence())
      return op.emitOpError() << "block_table needs per_sequence (a paged "
                                 "sequence's queries are its last positions)";
  }
  if (!compatible(k.getDimSize(1), v.getDimSize(1)))
    return op.emitOpError() << "key and value token counts differ";
  if (!compatible(q.getDimSize(1), init.getDimSize(1)))
    return op.emitOpError() << "query and init token counts differ";
  return success();
}

// One element type for Q and init; K/V f32, bf16, f16 or int8 with
// per-row scales.
LogicalResult verifyElementTypes(AttentionOp op) {
  auto q = cast<RankedTensorType>(op.getQuery().getType());
  auto k = cast<RankedTensorType>(op.getKey().getType());
  auto v = cast<RankedTensorType>(op.getValue().getType());
  auto init = cast<RankedTensorType>(op.getInit().getType());
  Type et = q.getElementType();
  if (!et.isF32() && !et.isBF16() && !et.isF16())
    return op.emitOpError()
           << "element type must be f32, bf16 or f16, got " << et;
  if (init.getElementType() != et)
    return op.emitOpError() << "query and init must share one element type";
  // K/V: one storage type, f32/bf16/f16 or int8 with per-row scales.
  Type kvt = k.getElementType();
  if (v.getElementType() != kvt)
    return op.emitOpError() << "key and value must share one element type";
  const bool int8 = kvt.isInteger(8);
  if (!kvt.isF32() && !kvt.isBF16() && !kvt.isF16() && !int8)
    return op.emitOpError() << "key/value element type must be f32, bf16, f16 "
                               "or i8, got "
                            << kvt;
  if (int8 != static_cast<bool>(op.getKScales()))
    return op.emitOpError() << (int8 ? "i8 keys and values need kv_scales"
                                     : "kv_scales given but keys and values "
                                       "are not i8");
  for (Value sc : {op.getKScales(), op.getVScales()}) {
    if (!sc)
      continue;
    auto st = cast<RankedTensorType>(sc.getType());
    if (st.getRank() != 3 || !st.getElementType().isF32() ||
        st.getDimSize(2) != static_cast<int64_t>(op.getNumKvHeads()) ||
        !compatible(st.getDimSize(0), k.getDimSize(0)) ||
        !compatible(st.getDimSize(1), k.getDimSize(1)))
      return op.emitOpError()
             << "kv_scales must be tensor<BxTkvx" << op.getNumKvHeads()
             << "xf32> (one per key/value row), got " << st;
  }
  return success();
}

// The scale, and the operands the mask and the positions take.
LogicalResult verifyScaleAndMaskOperands(AttentionOp op) {
  auto q = cast<RankedTensorType>(op.getQuery().getType());
  if (!(op.getScale().convertToFloat() > 0.0f))
    return op.emitOpError() << "scale must be > 0";
  bool padding = false;
  for (MaskAttr m : op.maskClauses())
    padding = padding || m.getPadding();
  if (padding != static_cast<bool>(op.getKvLens()))
    return op.emitOpError()
           << (padding ? "mask has padding but no kv_lens operand"
                       : "kv_lens given but the mask has no padding");
  if (op.getPerSequence())
    for (MaskAttr m : op.maskClauses())
      if (!m.getPadding())
        return op.emitOpError() << "per_sequence positions need a padding term "
                                   "in every mask clause (keys past each "
                                   "sequence's length stay hidden)";
  if (Value f = op.getScaleFactor()) {
    auto ft = cast<RankedTensorType>(f.getType());
    if (ft.getRank() != 1 || ft.getDimSize(0) != 1 ||
        !ft.getElementType().isF32())
      return op.emitOpError()
             << "scale_factor must be a tensor<1xf32>, got " << ft;
  }
  if (Value lens = op.getKvLens()) {
    auto lt = cast<RankedTensorType>(lens.getType());
    if (lt.getRank() != 1 || !lt.getElementType().isInteger(32))
      return op.emitOpError()
             << "kv_lens must be a rank-1 tensor of i32, got " << lt;
    if (!compatible(lt.getDimSize(0), q.getDimSize(0)))
      return op.emitOpError() << "kv_lens needs one length per batch";
  }
  return success();
}

// The score modifiers and the log-sum-exp output.
LogicalResult verifyModifiersAndLse(AttentionOp op) {
  auto q = cast<RankedTensorType>(op.getQuery().getType());
  // Per-head modifiers: one f32 per query head.
  for (auto [name, t] :
       {std::pair<const char *, Value>{"sinks", op.getSinks()},
        std::pair<const char *, Value>{"slopes", op.getSlopes()}}) {
    if (!t)
      continue;
    auto tt = cast<RankedTensorType>(t.getType());
    if (tt.getRank() != 1 || !tt.getElementType().isF32() ||
        tt.getDimSize(0) != static_cast<int64_t>(op.getNumHeads()))
      return op.emitOpError()
             << name << " must be a tensor<" << op.getNumHeads()
             << "xf32> (one per query head), got " << tt;
  }
  // The log-sum-exp output: [B, Tq, h] f32, its init given exactly when
  // the op returns it.
  if (static_cast<bool>(op.getLseInit()) != static_cast<bool>(op.getLse()))
    return op.emitOpError() << "lse_init and the lse result go together";
  if (Value li = op.getLseInit()) {
    auto lt = cast<RankedTensorType>(li.getType());
    if (lt.getRank() != 3 || !lt.getElementType().isF32() ||
        lt.getDimSize(2) != static_cast<int64_t>(op.getNumHeads()) ||
        !compatible(lt.getDimSize(0), q.getDimSize(0)) ||
        !compatible(lt.getDimSize(1), q.getDimSize(1)))
      return op.emitOpError()
             << "lse_init must be a tensor<BxTqx" << op.getNumHeads()
             << "xf32> (one per query row and head), got " << lt;
    if (op.getLse().getType() != lt)
      return op.emitOpError() << "the lse result type must equal lse_init's";
  }
  if (std::optional<APFloat> cap = op.getSoftcap())
    if (!(cap->convertToFloat() > 0.0f) || !cap->isFinite())
      return op.emitOpError() << "softcap must be a finite number > 0";
  return success();
}

} // namespace

LogicalResult AttentionOp::verify() {
  AttentionOp op = *this;
  for (auto check :
       {verifyOperandShapes, verifyBatchesAndTokens, verifyElementTypes,
        verifyScaleAndMaskOperands, verifyModifiersAndLse})
    if (failed(check(op)))
      return failure();
  return success();
}
