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

LogicalResult AttentionOp::verify() {
  auto q = cast<RankedTensorType>(getQuery().getType());
  auto k = cast<RankedTensorType>(getKey().getType());
  auto v = cast<RankedTensorType>(getValue().getType());
  auto init = cast<RankedTensorType>(getInit().getType());
  auto res = cast<RankedTensorType>(getResult().getType());
  for (auto [name, t] : {std::pair<const char *, RankedTensorType>{"query", q},
                         {"key", k},
                         {"value", v},
                         {"init", init}})
    if (t.getRank() != 4)
      return emitOpError() << name
                           << " must have rank 4 ([batch, tokens, heads, "
                              "width]), got rank "
                           << t.getRank();
  if (res != init)
    return emitOpError() << "result type " << res
                         << " must equal the init type " << init;
  const int64_t h = getNumHeads(), kv = getNumKvHeads();
  if (h <= 0 || kv <= 0)
    return emitOpError() << "num_heads and num_kv_heads must be > 0, got " << h
                         << " and " << kv;
  if (h % kv != 0)
    return emitOpError() << "num_heads (" << h
                         << ") must be divisible by num_kv_heads (" << kv
                         << ")";
  if (q.getDimSize(2) != h || init.getDimSize(2) != h)
    return emitOpError() << "query and init must have num_heads (" << h
                         << ") as static dimension 2";
  if (k.getDimSize(2) != kv || v.getDimSize(2) != kv)
    return emitOpError() << "key and value must have num_kv_heads (" << kv
                         << ") as static dimension 2";
  for (auto [name, t] : {std::pair<const char *, RankedTensorType>{"query", q},
                         {"key", k},
                         {"value", v},
                         {"init", init}})
    if (ShapedType::isDynamic(t.getDimSize(3)))
      return emitOpError() << name
                           << " head width (dimension 3) must be static";
  if (q.getDimSize(3) != k.getDimSize(3))
    return emitOpError() << "query and key head widths differ ("
                         << q.getDimSize(3) << " vs " << k.getDimSize(3) << ")";
  if (v.getDimSize(3) != init.getDimSize(3))
    return emitOpError() << "value and init head widths differ ("
                         << v.getDimSize(3) << " vs " << init.getDimSize(3)
                         << ")";
  // A paged cache's K/V are a pool of blocks: dimension 0 counts blocks,
  // not batches, and dimension 1 is the block's static token count.
  const Value table = getBlockTable();
  if (!compatible(q.getDimSize(0), init.getDimSize(0)) ||
      (!table && (!compatible(q.getDimSize(0), k.getDimSize(0)) ||
                  !compatible(q.getDimSize(0), v.getDimSize(0)))))
    return emitOpError() << "batch sizes (dimension 0) differ";
  if (table) {
    auto tt = cast<RankedTensorType>(table.getType());
    if (tt.getRank() != 2 || !tt.getElementType().isInteger(32))
      return emitOpError() << "block_table must be a rank-2 tensor of i32 "
                              "([batch, blocks per sequence]), got "
                           << tt;
    if (!compatible(tt.getDimSize(0), q.getDimSize(0)))
      return emitOpError() << "block_table needs one row per batch";
    if (!compatible(k.getDimSize(0), v.getDimSize(0)))
      return emitOpError() << "key and value block counts differ";
    if (ShapedType::isDynamic(k.getDimSize(1)) || k.getDimSize(1) <= 0)
      return emitOpError() << "a paged key/value pool needs a static block "
                              "size > 0 (dimension 1)";
    if (!getPerSequence())
      return emitOpError() << "block_table needs per_sequence (a paged "
                              "sequence's queries are its last positions)";
  }
  if (!compatible(k.getDimSize(1), v.getDimSize(1)))
    return emitOpError() << "key and value token counts differ";
  if (!compatible(q.getDimSize(1), init.getDimSize(1)))
    return emitOpError() << "query and init token counts differ";
  Type et = q.getElementType();
  if (!et.isF32() && !et.isBF16() && !et.isF16())
    return emitOpError() << "element type must be f32, bf16 or f16, got " << et;
  if (init.getElementType() != et)
    return emitOpError() << "query and init must share one element type";
  // K/V: one storage type, f32/bf16/f16 or int8 with per-row scales.
  Type kvt = k.getElementType();
  if (v.getElementType() != kvt)
    return emitOpError() << "key and value must share one element type";
  const bool int8 = kvt.isInteger(8);
  if (!kvt.isF32() && !kvt.isBF16() && !kvt.isF16() && !int8)
    return emitOpError() << "key/value element type must be f32, bf16, f16 "
                            "or i8, got "
                         << kvt;
  if (int8 != static_cast<bool>(getKScales()))
    return emitOpError() << (int8 ? "i8 keys and values need kv_scales"
                                  : "kv_scales given but keys and values "
                                    "are not i8");
  for (Value sc : {getKScales(), getVScales()}) {
    if (!sc)
      continue;
    auto st = cast<RankedTensorType>(sc.getType());
    if (st.getRank() != 3 || !st.getElementType().isF32() ||
        st.getDimSize(2) != getNumKvHeads() ||
        !compatible(st.getDimSize(0), k.getDimSize(0)) ||
        !compatible(st.getDimSize(1), k.getDimSize(1)))
      return emitOpError() << "kv_scales must be tensor<BxTkvx"
                           << getNumKvHeads()
                           << "xf32> (one per key/value row), got " << st;
  }
  if (!(getScale().convertToFloat() > 0.0f))
    return emitOpError() << "scale must be > 0";
  bool padding = false;
  for (MaskAttr m : maskClauses())
    padding = padding || m.getPadding();
  if (padding != static_cast<bool>(getKvLens()))
    return emitOpError() << (padding
                                 ? "mask has padding but no kv_lens operand"
                                 : "kv_lens given but the mask has no padding");
  if (getPerSequence())
    for (MaskAttr m : maskClauses())
      if (!m.getPadding())
        return emitOpError() << "per_sequence positions need a padding term "
                                "in every mask clause (keys past each "
                                "sequence's length stay hidden)";
  if (Value f = getScaleFactor()) {
    auto ft = cast<RankedTensorType>(f.getType());
    if (ft.getRank() != 1 || ft.getDimSize(0) != 1 ||
        !ft.getElementType().isF32())
      return emitOpError() << "scale_factor must be a tensor<1xf32>, got "
                           << ft;
  }
  if (Value lens = getKvLens()) {
    auto lt = cast<RankedTensorType>(lens.getType());
    if (lt.getRank() != 1 || !lt.getElementType().isInteger(32))
      return emitOpError() << "kv_lens must be a rank-1 tensor of i32, got "
                           << lt;
    if (!compatible(lt.getDimSize(0), q.getDimSize(0)))
      return emitOpError() << "kv_lens needs one length per batch";
  }
  // Per-head modifiers: one f32 per query head.
  for (auto [name, t] :
       {std::pair<const char *, Value>{"sinks", getSinks()},
        std::pair<const char *, Value>{"slopes", getSlopes()}}) {
    if (!t)
      continue;
    auto tt = cast<RankedTensorType>(t.getType());
    if (tt.getRank() != 1 || !tt.getElementType().isF32() ||
        tt.getDimSize(0) != getNumHeads())
      return emitOpError() << name << " must be a tensor<" << getNumHeads()
                           << "xf32> (one per query head), got " << tt;
  }
  // The log-sum-exp output: [B, Tq, h] f32, its init given exactly when
  // the op returns it.
  if (static_cast<bool>(getLseInit()) != static_cast<bool>(getLse()))
    return emitOpError() << "lse_init and the lse result go together";
  if (Value li = getLseInit()) {
    auto lt = cast<RankedTensorType>(li.getType());
    if (lt.getRank() != 3 || !lt.getElementType().isF32() ||
        lt.getDimSize(2) != getNumHeads() ||
        !compatible(lt.getDimSize(0), q.getDimSize(0)) ||
        !compatible(lt.getDimSize(1), q.getDimSize(1)))
      return emitOpError() << "lse_init must be a tensor<BxTqx" << getNumHeads()
                           << "xf32> (one per query row and head), got " << lt;
    if (getLse().getType() != lt)
      return emitOpError() << "the lse result type must equal lse_init's";
  }
  if (std::optional<APFloat> cap = getSoftcap())
    if (!(cap->convertToFloat() > 0.0f) || !cap->isFinite())
      return emitOpError() << "softcap must be a finite number > 0";
  return success();
}
