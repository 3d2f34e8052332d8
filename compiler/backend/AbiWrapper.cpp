// One wrapper plan from the ABI model, written out in both calling
// conventions (AbiWrapper.h).
#include "mhagen/backend/AbiWrapper.h"

#include <set>

namespace mhagen::backend {

abi::AbiShape abiShapeOf(const AttentionSpec &s) {
  // The spec and the ABI name their element types alike ("f32", "i8").
  auto scalar = [](KvType t) {
    abi::Scalar x = abi::Scalar::F32;
    abi::scalarFromName(toString(t), x);
    return x;
  };
  abi::AbiShape shape{
      s.op == Op::Layer,  s.d, s.h, s.n_kv, s.d_k, s.d_v, s.bias,
      s.mask.hasPadding()};
  shape.data = scalar(kvTypeOf(s.dtype));
  shape.kv = scalar(s.kvType());
  shape.sinks = s.sinks;
  shape.alibiSlopes = s.alibi == AlibiSlopes::Runtime;
  shape.lse = s.lse;
  shape.scale = s.scaleAtRuntime;
  shape.kvBlock = s.op == Op::Sdpa ? s.kv_block : 0;
  shape.ragged = s.op == Op::Sdpa && s.ragged;
  static const abi::AbiShape::Norm norms[] = {abi::AbiShape::Norm::None,
                                              abi::AbiShape::Norm::Head,
                                              abi::AbiShape::Norm::Projection};
  shape.qkNorm = norms[static_cast<int>(s.qk_norm.scope)];
  shape.positions = s.op == Op::Layer && s.positionsAtRuntime;
  shape.layerCache = s.cachedLayer();
  return shape;
}

abi::AbiShape kernelAbiShapeOf(const AttentionSpec &s) {
  return abi::perSequence(abiShapeOf(s));
}

std::optional<int64_t> fixedCallSize(const abi::Dim &d,
                                     const AttentionSpec &s) {
  if (d.factors.size() != 1)
    return std::nullopt;
  switch (d.factors[0]) {
  case abi::Size::Batch:
    return s.B;
  case abi::Size::TokensQ:
    return s.T;
  case abi::Size::TokensKv:
    return s.op == Op::Layer && !s.layerCache ? s.T : s.T_kv;
  default:
    return std::nullopt;
  }
}

namespace {

std::string callSize(abi::Size sym) {
  switch (sym) {
  case abi::Size::Batch:
    return "B";
  case abi::Size::TokensQ:
    return "TQ";
  case abi::Size::Blocks:
    return "NB";
  case abi::Size::TableBlocks:
    return "TB";
  default:
    return "TKV";
  }
}

std::string extentExpr(const abi::Dim &d, const abi::AbiShape &s) {
  if (d.factors.size() == 1 && abi::isCallSize(d.factors[0]))
    return callSize(d.factors[0]);
  return std::to_string(abi::staticExtent(d, s));
}

} // namespace

WrapperPlan wrapperPlan(const AttentionSpec &spec) {
  const abi::AbiShape s = kernelAbiShapeOf(spec);
  WrapperPlan plan;
  plan.setup =
      std::string("  const int64_t B = a->batch, TQ = a->t_q, TKV = ") +
      (s.layer && !s.layerCache ? "a->t_q" : "a->t_kv") + ";\n  (void)TKV;\n";
  if (s.kvBlock > 0) // a paged cache: its blocks and the table's width
    plan.setup += "  const int64_t NB = a->num_blocks, TB = (TKV + " +
                  std::to_string(s.kvBlock - 1) + ") / " +
                  std::to_string(s.kvBlock) + ";\n";
  for (const abi::TensorModel *t : abi::tensors(s)) {
    WrapperTensor w{t, std::string("a->") + t->name, {}, {}};
    for (const abi::Dim &d : t->dims)
      w.extents.push_back(extentExpr(d, s));
    // Dense strides inside a token (or in all of a fixed tensor, whose
    // inner sizes may come from the call: a block table's width).
    const size_t n = t->dims.size();
    w.strides.assign(n, "1");
    for (size_t i = n - 1; i-- > (t->isSequence() ? 2 : 0);)
      w.strides[i] =
          abi::staticExtent(t->dims[i + 1], s) > 0
              ? std::to_string(abi::denseInnerElements(*t, s, i + 1))
              : "(int64_t)" + w.extents[i + 1] + " * " + w.strides[i + 1];
    if (t->isSequence()) {
      const std::string row = std::to_string(abi::denseInnerElements(*t, s, 2));
      std::string ts = row;
      if (t->tokenStrideField) {
        ts = std::string(t->name) + "_ts";
        const std::string f = std::string("a->") + t->tokenStrideField;
        plan.setup += "  const int64_t " + ts + " = (" + f + " ? " + f +
                      " : (int64_t)" + row + ");\n";
      }
      const std::string dense =
          "(int64_t)" + ts + " * " + callSize(t->tokens());
      std::string bs = dense;
      if (t->batchStrideField) {
        const std::string f = std::string("a->") + t->batchStrideField;
        bs = "(" + f + " ? " + f + " : " + dense + ")";
      }
      w.strides[0] = bs;
      w.strides[1] = ts;
    }
    plan.tensors.push_back(std::move(w));
  }
  return plan;
}

HalideBufferCall halideBufferCall(const AttentionSpec &spec,
                                  const WrapperPlan &plan) {
  // GPU targets keep bf16 as its 16-bit pattern (hl::bf16AsBits in
  // compiler/halide/HalidePipeline.h).
  const bool bits16 = spec.target.isGpu();
  const abi::AbiShape shape = kernelAbiShapeOf(spec);
  HalideBufferCall c;
  c.setup = plan.setup;
  for (const WrapperTensor &w : plan.tensors) {
    // halide_type_code_t: int 0, uint 1, float 2, bfloat 4.
    int code = 2;
    switch (abi::scalarOf(*w.model, shape)) {
    case abi::Scalar::BF16:
      code = bits16 ? 1 : 4;
      break;
    case abi::Scalar::I8:
    case abi::Scalar::I32:
      code = 0;
      break;
    default:
      break;
    }
    const int bits = 8 * abi::scalarBytes(abi::scalarOf(*w.model, shape));
    const std::string name = w.model->name;
    const std::string n = std::to_string(w.extents.size());
    // Halide lists dimensions innermost first.
    std::string e, st;
    for (size_t i = w.extents.size(); i-- > 0;) {
      e += w.extents[i] + (i ? ", " : "");
      st += w.strides[i] + (i ? ", " : "");
    }
    c.setup += "  halide_buffer_t buf_" + name +
               ";\n  halide_dimension_t dim_" + name + "[" + n +
               "];\n  {\n    const int64_t e[" + n + "] = {" + e +
               "};\n    const int64_t s[" + n + "] = {" + st +
               "};\n    mh_buffer(&buf_" + name + ", dim_" + name + ", " +
               w.data + ", " + std::to_string(code) + ", " +
               std::to_string(bits) + ", " + n + ", e, s);\n  }\n";
    c.params +=
        std::string(c.params.empty() ? "" : ", ") + "halide_buffer_t *" + name;
    c.callArgs += std::string(c.callArgs.empty() ? "" : ", ") + "&buf_" + name;
  }
  return c;
}

MemrefCall memrefCall(const WrapperPlan &plan, const std::string &fn) {
  // One descriptor struct per rank (MLIR's C interface for memrefs).
  std::set<size_t> ranks;
  for (const WrapperTensor &w : plan.tensors)
    ranks.insert(w.extents.size());
  MemrefCall c;
  for (size_t r : ranks)
    c.decls += "typedef struct {\n  void *allocated, *aligned;\n  int64_t "
               "offset, sizes[" +
               std::to_string(r) + "], strides[" + std::to_string(r) +
               "];\n} mh_memref" + std::to_string(r) + ";\n";
  c.decls += "void _mlir_ciface_" + fn + "(";
  c.call = plan.setup;
  std::string callArgs;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const WrapperTensor &w = plan.tensors[i];
    const std::string r = std::to_string(w.extents.size());
    const std::string name = w.model->name;
    c.decls += std::string(i ? ", " : "") + "mh_memref" + r + " *";
    c.call += "  mh_memref" + r + " m_" + name + " = {(void *)" + w.data +
              ", (void *)" + w.data + ", 0, {";
    for (size_t d = 0; d < w.extents.size(); ++d)
      c.call += (d ? ", " : "") + w.extents[d];
    c.call += "}, {";
    for (size_t d = 0; d < w.strides.size(); ++d)
      c.call += (d ? ", " : "") + w.strides[d];
    c.call += "}};\n";
    callArgs += std::string(i ? ", " : "") + "&m_" + name;
  }
  c.decls += ");";
  c.call += "  _mlir_ciface_" + fn + "(" + callArgs + ");";
  return c;
}

} // namespace mhagen::backend
