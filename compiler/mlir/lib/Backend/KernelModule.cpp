//===- KernelModule.cpp - the mha module of one AttentionSpec -------------===//
//
// The backend's input, built with OpBuilder: one function on memrefs whose
// shapes and strides come from the ABI model (mhagen/abi_model.hpp).
// Tensors enter through bufferization.to_tensor and the result is
// materialized in the output memref, so bufferization writes straight into
// the caller's buffer.
//
//   op = sdpa : out = mha.attention(q, k, v)
//   op = layer: per batch b: q/k/v = x[b] W_{q,k,v} (+ b) as linalg.matmul
//               on [T, d] rows, expanded to heads (q and k rotated when
//               the spec has rope); o = mha.attention(q, k, v); out[b] =
//               merge(o) W_o (+ b_o)
//
// Sizes the spec fixes (B, T, T_kv) are static in the types.
#include "KernelModule.h"
#include "QkNorm.h"
#include "RotaryPositions.h"

#include "mhagen/abi_model.hpp"
#include "mhagen/backend/AbiWrapper.h"
#include "mhagen/mlir/MhaDialect.h"
#include "mhagen/spec/BackendResult.h"
#include "mhagen/spec/ScoreModifiers.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"

#include "llvm/Support/raw_ostream.h"

#include <map>

namespace mhagen::mlirbackend {

using namespace mlir;

namespace {

constexpr int64_t kDyn = ShapedType::kDynamic;

int64_t dimOf(const std::optional<int64_t> &v) { return v ? *v : kDyn; }

Type elementType(OpBuilder &b, DType d) {
  switch (d) {
  case DType::F32:
    return b.getF32Type();
  case DType::BF16:
    return b.getBF16Type();
  case DType::F16:
    return b.getF16Type();
  }
  return b.getF32Type();
}

// The K/V cache's storage type (kv_dtype; the dtype when unset).
Type kvElementType(OpBuilder &b, const AttentionSpec &s) {
  switch (s.kvType()) {
  case KvType::F32:
    return b.getF32Type();
  case KvType::BF16:
    return b.getBF16Type();
  case KvType::F16:
    return b.getF16Type();
  case KvType::I8:
    return b.getIntegerType(8);
  }
  return b.getF32Type();
}

// The kernel's parameters from the ABI model: one memref per tensor, in the
// model's order. Sizes the spec fixes are static; a sequence tensor with
// call-time strides has a strided layout, dense inside a token.
std::vector<std::pair<std::string, MemRefType>>
abiParams(OpBuilder &b, const AttentionSpec &s) {
  const abi::AbiShape shape = backend::kernelAbiShapeOf(s);
  const Type et = elementType(b, s.dtype);
  std::vector<std::pair<std::string, MemRefType>> out;
  for (const abi::TensorModel *t : abi::tensors(shape)) {
    SmallVector<int64_t> dims;
    for (const abi::Dim &d : t->dims) {
      if (d.factors.size() == 1 && abi::isCallSize(d.factors[0]))
        dims.push_back(dimOf(backend::fixedCallSize(d, s)));
      else
        dims.push_back(abi::staticExtent(d, shape));
    }
    // The element type the model gives: K/V in the cache's storage type
    // (kv_dtype), int8 scales and integer vectors as they are.
    const Type elem = t->elem == abi::Elem::Int32    ? Type(b.getI32Type())
                      : t->elem == abi::Elem::F32    ? Type(b.getF32Type())
                      : t->elem == abi::Elem::KvData ? kvElementType(b, s)
                                                     : et;
    MemRefType type = MemRefType::get(dims, elem);
    if (t->tokenStrideField) {
      SmallVector<int64_t> strides = {kDyn, kDyn};
      for (size_t i = 2; i < t->dims.size(); ++i)
        strides.push_back(abi::denseInnerElements(*t, shape, i + 1));
      type = MemRefType::get(
          dims, elem, StridedLayoutAttr::get(b.getContext(), kDyn, strides));
    }
    out.emplace_back(t->name, type);
  }
  return out;
}

// The function with the ABI's parameters; arguments by tensor name.
func::FuncOp makeFunction(OpBuilder &b, Location loc, const std::string &fn,
                          const AttentionSpec &s,
                          std::map<std::string, Value> &args) {
  const auto params = abiParams(b, s);
  SmallVector<Type> types;
  for (const auto &p : params)
    types.push_back(p.second);
  auto f = b.create<func::FuncOp>(loc, fn, b.getFunctionType(types, {}));
  f->setAttr("llvm.emit_c_interface", b.getUnitAttr());
  Block *entry = f.addEntryBlock();
  for (size_t i = 0; i < params.size(); ++i)
    args[params[i].first] = entry->getArgument(i);
  b.setInsertionPointToStart(entry);
  return f;
}

Value toTensor(OpBuilder &b, Location loc, Value memref, bool writable) {
  return b.create<bufferization::ToTensorOp>(loc, memref, /*restrict=*/true,
                                             writable);
}

// The per-head score-modifier operands: the call's sinks, and the ALiBi
// slopes from the call (alibi = runtime) or compiled in (alibi = true).
struct ModifierOperands {
  Value sinks, slopes, scaleFactor;
};

ModifierOperands modifierOperands(OpBuilder &b, Location loc,
                                  const AttentionSpec &s,
                                  std::map<std::string, Value> &a) {
  ModifierOperands m;
  if (s.scaleAtRuntime)
    m.scaleFactor = toTensor(b, loc, a["scale"], false);
  if (s.sinks)
    m.sinks = toTensor(b, loc, a["sinks"], false);
  if (s.alibi == AlibiSlopes::Runtime) {
    m.slopes = toTensor(b, loc, a["alibi_slopes"], false);
  } else if (s.alibi == AlibiSlopes::Standard) {
    SmallVector<float> values;
    for (double x : standardAlibiSlopes(s.h))
      values.push_back(static_cast<float>(x));
    auto type = RankedTensorType::get({s.h}, b.getF32Type());
    m.slopes = b.create<arith::ConstantOp>(
        loc, DenseElementsAttr::get(type, ArrayRef<float>(values)));
  }
  return m;
}

// The mha.attention op; with lseInit (lse = true) its second result is
// each row's log-sum-exp.
mha::AttentionOp attention(OpBuilder &b, Location loc, const AttentionSpec &s,
                           Type resultType, Value q, Value k, Value v,
                           Value lens, const ModifierOperands &mods, Value init,
                           Value lseInit = Value(), Value kScales = Value(),
                           Value vScales = Value(),
                           Value blockTable = Value()) {
  // The mask: its first conjunction, and the others as alternatives.
  auto clause = [&](const MaskClause &c) {
    return mha::MaskAttr::get(b.getContext(), c.causal, c.window, c.padding,
                              c.sink);
  };
  const MaskSpec m = s.effectiveMask(); // a ragged batch: + padding
  SmallVector<Attribute> alternatives;
  for (size_t i = 1; i < m.anyOf.size(); ++i)
    alternatives.push_back(clause(m.anyOf[i]));
  // scale = runtime: the attribute is 1 and the call's value multiplies it.
  const float scale =
      s.scaleAtRuntime ? 1.0f : static_cast<float>(s.effectiveScale());
  return b.create<mha::AttentionOp>(
      loc, resultType, lseInit ? lseInit.getType() : Type(), q, k, v, lens,
      mods.sinks, mods.slopes, mods.scaleFactor, kScales, vScales, blockTable,
      init, lseInit, b.getI64IntegerAttr(s.h), b.getI64IntegerAttr(s.n_kv),
      b.getF32FloatAttr(scale), clause(m.single()),
      alternatives.empty() ? ArrayAttr() : b.getArrayAttr(alternatives),
      s.softcap ? b.getF32FloatAttr(static_cast<float>(*s.softcap))
                : FloatAttr(),
      // A ragged batch's or a paged cache's queries are each sequence's
      // last positions (docs/design.md §5).
      s.ragged || s.pagedKv() ? b.getUnitAttr() : UnitAttr());
}

void storeResult(OpBuilder &b, Location loc, Value result, Value out) {
  b.create<bufferization::MaterializeInDestinationOp>(
      loc, TypeRange{}, result, out, /*restrict=*/true, /*writable=*/true);
  b.create<func::ReturnOp>(loc);
}

void sdpaBody(OpBuilder &b, Location loc, const AttentionSpec &s,
              std::map<std::string, Value> &a) {
  Value qt = toTensor(b, loc, a["q"], false);
  Value kt = toTensor(b, loc, a["k"], false);
  Value vt = toTensor(b, loc, a["v"], false);
  Value lens = s.effectiveMask().hasPadding()
                   ? toTensor(b, loc, a["kv_lens"], false)
                   : Value();
  Value init = toTensor(b, loc, a["out"], true);
  Value lseInit = s.lse ? toTensor(b, loc, a["lse"], true) : Value();
  // kv_dtype = i8: one f32 scale per K/V row.
  Value kScales, vScales;
  if (s.kvType() == KvType::I8) {
    kScales = toTensor(b, loc, a["k_scale"], false);
    vScales = toTensor(b, loc, a["v_scale"], false);
  }
  // kv_cache = paged(BLOCK): K/V (and scales) are the pool of blocks, read
  // through the block table.
  Value table =
      s.pagedKv() ? toTensor(b, loc, a["block_table"], false) : Value();
  mha::AttentionOp o = attention(b, loc, s, init.getType(), qt, kt, vt, lens,
                                 modifierOperands(b, loc, s, a), init, lseInit,
                                 kScales, vScales, table);
  if (lseInit)
    b.create<bufferization::MaterializeInDestinationOp>(
        loc, TypeRange{}, o.getLse(), a["lse"], /*restrict=*/true,
        /*writable=*/true);
  storeResult(b, loc, o.getResult(), a["out"]);
}

// Batches are a sequential loop around the layer of one sequence: every op
// below then has at most one dynamic dimension (T), which keeps the head
// split (expand [T, h*dk] -> [1, T, h, dk]) well defined.
// f32 rows [T, n] in the element type of `type` (a copy when it is f32).
Value narrowRows(OpBuilder &b, Location l, Value y, RankedTensorType type,
                 ValueRange tDyn) {
  AffineMap id2 = b.getMultiDimIdentityMap(2);
  Value init = b.create<tensor::EmptyOp>(l, type, tDyn);
  return b
      .create<linalg::GenericOp>(
          l, TypeRange{type}, ValueRange{y}, ValueRange{init},
          ArrayRef<AffineMap>{id2, id2},
          SmallVector<utils::IteratorType>(2, utils::IteratorType::parallel),
          [&](OpBuilder &g, Location gl, ValueRange args) {
            Value r = args[0];
            if (r.getType() != args[1].getType())
              r = g.create<arith::TruncFOp>(gl, args[1].getType(), r);
            g.create<linalg::YieldOp>(gl, r);
          })
      .getResult(0);
}

void layerBody(OpBuilder &b, Location loc, const AttentionSpec &s,
               std::map<std::string, Value> &a) {
  const Type et = elementType(b, s.dtype);
  const Type f32 = b.getF32Type();
  const int64_t T = dimOf(s.T), D = s.d, hdv = s.h * s.d_v;
  Value c0 = b.create<arith::ConstantIndexOp>(loc, 0);
  Value c1 = b.create<arith::ConstantIndexOp>(loc, 1);
  Value zero = b.create<arith::ConstantOp>(loc, b.getF32FloatAttr(0.0f));
  Value xt = toTensor(b, loc, a["x"], false);
  Value Bv = b.create<tensor::DimOp>(loc, xt, c0);
  Value Tv = b.create<tensor::DimOp>(loc, xt, c1);
  // Weights, biases and key lengths enter as tensors of their ABI types.
  std::map<std::string, Value> t;
  for (const char *n : {"w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o",
                        "q_norm", "k_norm", "positions", "kv_lens"})
    if (a.count(n))
      t[n] = toTensor(b, loc, a[n], false);
  Value init = toTensor(b, loc, a["out"], true);
  auto ot = cast<RankedTensorType>(init.getType());
  const ModifierOperands mods = modifierOperands(b, loc, s, a);
  // The token count as a slice size: static when the spec fixes it.
  const OpFoldResult tSize =
      s.T ? OpFoldResult(b.getIndexAttr(*s.T)) : OpFoldResult(Tv);
  const SmallVector<Value> tDyn =
      s.T ? SmallVector<Value>{} : SmallVector<Value>{Tv};
  auto rows = [&](int64_t n, Type e) {
    return RankedTensorType::get({T, n}, e);
  };
  AffineMap id2 = b.getMultiDimIdentityMap(2);
  AffineMap col2 =
      AffineMap::get(2, 0, {b.getAffineDimExpr(1)}, b.getContext());
  auto par2 =
      SmallVector<utils::IteratorType>(2, utils::IteratorType::parallel);

  // lse = true: the log-sum-exp [B, T, h] is carried beside the output.
  SmallVector<Value> carried = {init};
  if (s.lse)
    carried.push_back(toTensor(b, loc, a["lse"], true));
  auto loop = b.create<scf::ForOp>(
      loc, c0, Bv, c1, carried,
      [&](OpBuilder &lb, Location l, Value bIv, ValueRange iter) {
        Value acc = iter[0];
        auto xRows = rows(D, et);
        Value xb = lb.create<tensor::ExtractSliceOp>(
            l, xRows, xt,
            ArrayRef<OpFoldResult>{bIv, lb.getIndexAttr(0), lb.getIndexAttr(0)},
            ArrayRef<OpFoldResult>{lb.getIndexAttr(1), tSize,
                                   lb.getIndexAttr(D)},
            ArrayRef<OpFoldResult>{lb.getIndexAttr(1), lb.getIndexAttr(1),
                                   lb.getIndexAttr(1)});
        // y = a W (+ bias) in f32 rows [T, n].
        auto gemm = [&](Value in, Value w, int64_t n,
                        const char *bias) -> Value {
          auto rt = rows(n, f32);
          Value e = lb.create<tensor::EmptyOp>(l, rt, tDyn);
          Value f = lb.create<linalg::FillOp>(l, zero, e).getResult(0);
          Value m = lb.create<linalg::MatmulOp>(
                          l, TypeRange{rt}, ValueRange{in, w}, ValueRange{f})
                        .getResult(0);
          if (!s.bias)
            return m;
          return lb
              .create<linalg::GenericOp>(
                  l, TypeRange{rt}, ValueRange{t[bias]}, ValueRange{m},
                  ArrayRef<AffineMap>{col2, id2}, par2,
                  [&](OpBuilder &g, Location gl, ValueRange args) {
                    Value bv = args[0];
                    if (!bv.getType().isF32())
                      bv = g.create<arith::ExtFOp>(gl, g.getF32Type(), bv);
                    g.create<linalg::YieldOp>(
                        gl,
                        g.create<arith::AddFOp>(gl, args[1], bv).getResult());
                  })
              .getResult(0);
        };
        // [T, count*width] -> [1, T, count, width]
        auto heads = [&](Value y, int64_t count, int64_t width) -> Value {
          auto ht = RankedTensorType::get({1, T, count, width}, f32);
          return lb.create<tensor::ExpandShapeOp>(
              l, ht, y, ArrayRef<ReassociationIndices>{{0, 1}, {2, 3}},
              ArrayRef<OpFoldResult>{lb.getIndexAttr(1), tSize,
                                     lb.getIndexAttr(count),
                                     lb.getIndexAttr(width)});
        };
        Value q = heads(gemm(xb, t["w_q"], s.h * s.d_k, "b_q"), s.h, s.d_k);
        Value k =
            heads(gemm(xb, t["w_k"], s.n_kv * s.d_k, "b_k"), s.n_kv, s.d_k);
        if (s.qk_norm.enabled()) {
          q = normalizeHeads(lb, l, s, q, t["q_norm"], tDyn);
          k = normalizeHeads(lb, l, s, k, t["k_norm"], tDyn);
        }
        if (s.rope.enabled()) {
          // This sequence's positions, [T] i32 (positions = runtime).
          Value positions;
          if (s.positionsAtRuntime)
            positions = lb.create<tensor::ExtractSliceOp>(
                l, RankedTensorType::get({T}, lb.getI32Type()), t["positions"],
                ArrayRef<OpFoldResult>{bIv, lb.getIndexAttr(0)},
                ArrayRef<OpFoldResult>{lb.getIndexAttr(1), tSize},
                ArrayRef<OpFoldResult>{lb.getIndexAttr(1), lb.getIndexAttr(1)});
          const auto table = rotaryTable(lb, l, s, T, tDyn, positions);
          q = rotateHeads(lb, l, s, q, table, tSize);
          k = rotateHeads(lb, l, s, k, table, tSize);
        }
        Value v =
            heads(gemm(xb, t["w_v"], s.n_kv * s.d_v, "b_v"), s.n_kv, s.d_v);
        Value lb1;
        if (s.mask.hasPadding())
          lb1 = lb.create<tensor::ExtractSliceOp>(
              l, RankedTensorType::get({1}, lb.getI32Type()), t["kv_lens"],
              ArrayRef<OpFoldResult>{bIv},
              ArrayRef<OpFoldResult>{lb.getIndexAttr(1)},
              ArrayRef<OpFoldResult>{lb.getIndexAttr(1)});
        auto at = RankedTensorType::get({1, T, s.h, s.d_v}, f32);
        Value ae = lb.create<tensor::EmptyOp>(l, at, tDyn);
        Value lseBatch;
        if (s.lse)
          lseBatch = lb.create<tensor::EmptyOp>(
              l, RankedTensorType::get({1, T, s.h}, f32), tDyn);
        mha::AttentionOp attOp =
            attention(lb, l, s, at, q, k, v, lb1, mods, ae, lseBatch);
        Value att = attOp.getResult();
        // Merge heads, output projection (+ bias), back to the element type.
        Value merged = lb.create<tensor::CollapseShapeOp>(
            l, rows(hdv, f32), att,
            ArrayRef<ReassociationIndices>{{0, 1}, {2, 3}});
        Value y = gemm(merged, t["w_o"], D, "b_o");
        Value yout = narrowRows(lb, l, y, rows(D, et), tDyn);
        Value next = lb.create<tensor::InsertSliceOp>(
            l, yout, acc,
            ArrayRef<OpFoldResult>{bIv, lb.getIndexAttr(0), lb.getIndexAttr(0)},
            ArrayRef<OpFoldResult>{lb.getIndexAttr(1), tSize,
                                   lb.getIndexAttr(D)},
            ArrayRef<OpFoldResult>{lb.getIndexAttr(1), lb.getIndexAttr(1),
                                   lb.getIndexAttr(1)});
        SmallVector<Value> yielded = {next};
        if (s.lse)
          yielded.push_back(lb.create<tensor::InsertSliceOp>(
              l, attOp.getLse(), iter[1],
              ArrayRef<OpFoldResult>{bIv, lb.getIndexAttr(0),
                                     lb.getIndexAttr(0)},
              ArrayRef<OpFoldResult>{lb.getIndexAttr(1), tSize,
                                     lb.getIndexAttr(s.h)},
              ArrayRef<OpFoldResult>{lb.getIndexAttr(1), lb.getIndexAttr(1),
                                     lb.getIndexAttr(1)}));
        lb.create<scf::YieldOp>(l, yielded);
      });
  (void)ot;
  if (s.lse)
    b.create<bufferization::MaterializeInDestinationOp>(
        loc, TypeRange{}, loop.getResult(1), a["lse"], /*restrict=*/true,
        /*writable=*/true);
  storeResult(b, loc, loop.getResult(0), a["out"]);
}

} // namespace

OwningOpRef<ModuleOp> buildKernelModule(MLIRContext &ctx,
                                        const AttentionSpec &s,
                                        const std::string &fn) {
  OpBuilder b(&ctx);
  const Location loc = FileLineColLoc::get(&ctx, fn, 0, 0);
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  b.setInsertionPointToEnd(module->getBody());
  std::map<std::string, Value> args;
  makeFunction(b, loc, fn, s, args);
  if (s.op == Op::Sdpa)
    sdpaBody(b, loc, s, args);
  else
    layerBody(b, loc, s, args);
  // The module is the backend's own construction: a verifier failure is
  // an internal error, reported with what MLIR said.
  std::string diag;
  {
    ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &d) {
      llvm::raw_string_ostream os(diag);
      os << d << "\n";
      return success();
    });
    if (failed(verify(*module)))
      throw BackendError("", "internal error: the mha module built for " +
                                 s.kernelName() + " does not verify:\n" + diag);
  }
  return module;
}

} // namespace mhagen::mlirbackend
