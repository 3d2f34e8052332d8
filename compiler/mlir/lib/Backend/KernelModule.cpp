//===- KernelModule.cpp - the mha module of one AttentionSpec -------------===//
//
// The backend's input: one function on memrefs whose shapes and strides are
// the mhagen ABI (runtime/include/mhagen/abi.h). Tensors enter through
// bufferization.to_tensor and the result is materialized in the output
// memref, so bufferization writes straight into the caller's buffer.
//
//   op = sdpa : out = mha.attention(q, k, v)
//   op = layer: per batch b: q/k/v = x[b] W_{q,k,v} (+ b) as linalg.matmul
//               on [T, d] rows, expanded to heads; o = mha.attention(q, k,
//               v); out[b] = merge(o) W_o (+ b_o)
//
// Sizes the spec fixes (B, T, T_kv) are static in the types.
#include "KernelModule.h"

#include "mhagen/backend/AbiWrapper.h"

#include <sstream>
#include <vector>

namespace mhagen::mlirbackend {

namespace {

std::string dim(const std::optional<int64_t> &v) {
  return v ? std::to_string(*v) : "?";
}

std::string floatLiteral(double v) {
  std::ostringstream os;
  os.precision(9);
  os << std::scientific << static_cast<float>(v);
  return os.str();
}

std::string maskAttr(const MaskSpec &m) {
  return "#mha.mask<causal = " + std::string(m.causal ? "true" : "false") +
         ", window = " + std::to_string(m.window) +
         ", padding = " + std::string(m.padding ? "true" : "false") + ">";
}

std::string attentionAttrs(const AttentionSpec &s) {
  return "{num_heads = " + std::to_string(s.h) +
         " : i64, num_kv_heads = " + std::to_string(s.n_kv) +
         " : i64, scale = " + floatLiteral(s.effectiveScale()) +
         " : f32, mask = " + maskAttr(s.mask) + "}";
}

// The kernel's parameters, from the ABI model: one memref per tensor, in
// the model's order. Sizes the spec fixes are static; a sequence tensor
// with call-time strides has a strided layout, dense inside a token.
struct MemrefParam {
  std::string name, shape, type; // shape "BxTxHxDKxf32", type "memref<...>"
};

std::vector<MemrefParam> abiParams(const AttentionSpec &s) {
  const abi::AbiShape shape = backend::abiShapeOf(s);
  const std::string et = std::string(toString(s.dtype));
  std::vector<MemrefParam> out;
  for (const abi::TensorModel *t : abi::tensors(shape)) {
    std::string sh;
    for (const abi::Dim &d : t->dims) {
      std::string e;
      if (d.factors.size() == 1 && d.factors[0] == abi::Size::Batch)
        e = dim(s.B);
      else if (d.factors.size() == 1 && d.factors[0] == abi::Size::TokensQ)
        e = dim(s.T);
      else if (d.factors.size() == 1 && d.factors[0] == abi::Size::TokensKv)
        e = dim(s.op == Op::Layer ? s.T : s.T_kv);
      else
        e = std::to_string(abi::staticExtent(d, shape));
      sh += e + "x";
    }
    sh += t->elem == abi::Elem::Int32 ? "i32" : et;
    std::string type = "memref<" + sh;
    if (t->tokenStrideField) {
      type += ", strided<[?, ?";
      for (size_t i = 2; i < t->dims.size(); ++i)
        type +=
            ", " + std::to_string(abi::denseInnerElements(*t, shape, i + 1));
      type += "], offset: ?>";
    }
    out.push_back({t->name, sh, type + ">"});
  }
  return out;
}

const MemrefParam &param(const std::vector<MemrefParam> &ps,
                         const std::string &name) {
  for (const MemrefParam &p : ps)
    if (p.name == name)
      return p;
  return ps.back(); // unreachable: the model has every name used here
}

// "func.func @fn(%q: memref<...>, ...) attributes {...} {"
std::string signature(const std::string &fn,
                      const std::vector<MemrefParam> &ps) {
  std::string sig = "func.func @" + fn + "(";
  for (size_t i = 0; i < ps.size(); ++i)
    sig += std::string(i ? ", " : "") + "%" + ps[i].name + ": " + ps[i].type;
  return sig + ") attributes {llvm.emit_c_interface} {\n";
}

std::string sdpaModule(const AttentionSpec &s, const std::string &fn) {
  const std::string B = dim(s.B);
  const std::vector<MemrefParam> ps = abiParams(s);
  const std::string qm = param(ps, "q").type, km = param(ps, "k").type,
                    vm = param(ps, "v").type, om = param(ps, "out").type;
  auto tensor = [&](const char *name) {
    return "tensor<" + param(ps, name).shape + ">";
  };
  const std::string qt = tensor("q"), kt = tensor("k"), vt = tensor("v"),
                    ot = tensor("out");
  std::ostringstream os;
  os << signature(fn, ps);
  os << "  %qt = bufferization.to_tensor %q restrict : " << qm << "\n";
  os << "  %kt = bufferization.to_tensor %k restrict : " << km << "\n";
  os << "  %vt = bufferization.to_tensor %v restrict : " << vm << "\n";
  if (s.mask.padding)
    os << "  %lens = bufferization.to_tensor %kv_lens restrict : memref<" << B
       << "xi32>\n";
  os << "  %init = bufferization.to_tensor %out restrict writable : " << om
     << "\n";
  os << "  %o = mha.attention ins(%qt, %kt, %vt : " << qt << ", " << kt << ", "
     << vt << ")";
  if (s.mask.padding)
    os << " kv_lens(%lens : tensor<" << B << "xi32>)";
  os << "\n         outs(%init : " << ot << ")\n         " << attentionAttrs(s)
     << " -> " << ot << "\n";
  os << "  bufferization.materialize_in_destination %o in restrict writable "
        "%out : ("
     << ot << ", " << om << ") -> ()\n";
  os << "  return\n}\n";
  return os.str();
}

std::string layerModule(const AttentionSpec &s, const std::string &fn) {
  // Batches are a sequential loop around the layer of one sequence: every
  // op below then has at most one dynamic dimension (T), which keeps the
  // head split (expand [T, h*dk] -> [1, T, h, dk]) well defined.
  const std::string et = std::string(toString(s.dtype));
  const std::string B = dim(s.B), T = dim(s.T);
  const std::string D = std::to_string(s.d);
  const int64_t hdv = s.h * s.d_v;
  const std::vector<MemrefParam> ps = abiParams(s);
  const std::string xm = param(ps, "x").type, om = param(ps, "out").type;
  const std::string xt = "tensor<" + B + "x" + T + "x" + D + "x" + et + ">";
  const std::string ot = xt;
  auto mat = [&](int64_t r, int64_t c) {
    return std::to_string(r) + "x" + std::to_string(c) + "x" + et;
  };
  auto rows = [&](int64_t n, const std::string &t) {
    return "tensor<" + T + "x" + std::to_string(n) + "x" + t + ">";
  };
  const std::string tDyn = s.T ? "" : "%T"; // tensor.empty operands
  // The token count as a slice size or output_shape entry: a literal when
  // the spec fixes it (static types), the %T value otherwise.
  const std::string tSize = s.T ? std::to_string(*s.T) : "%T";
  std::ostringstream os;
  os << "#id2 = affine_map<(i, j) -> (i, j)>\n"
        "#col2 = affine_map<(i, j) -> (j)>\n";
  os << signature(fn, ps);
  os << "  %c0 = arith.constant 0 : index\n"
        "  %c1 = arith.constant 1 : index\n"
        "  %zero = arith.constant 0.0 : f32\n";
  os << "  %xt = bufferization.to_tensor %x restrict : " << xm << "\n";
  os << "  %B = tensor.dim %xt, %c0 : " << xt << "\n";
  os << "  %T = tensor.dim %xt, %c1 : " << xt << "\n";
  // Weights, biases and key lengths enter as tensors of their ABI types.
  for (const MemrefParam &p : ps)
    if (p.name != "x" && p.name != "out")
      os << "  %" << (p.name == "kv_lens" ? "lens" : p.name + "t")
         << " = bufferization.to_tensor %" << p.name << " restrict : " << p.type
         << "\n";
  os << "  %init = bufferization.to_tensor %out restrict writable : " << om
     << "\n";
  os << "  %r = scf.for %b = %c0 to %B step %c1 iter_args(%acc = %init) -> ("
     << ot << ") {\n";
  os << "    %xb = tensor.extract_slice %xt[%b, 0, 0] [1, " << tSize << ", "
     << D << "] [1, 1, 1] : " << xt << " to " << rows(s.d, et) << "\n";
  // y = a W (+ bias) in f32 rows [T, n].
  auto gemm = [&](const std::string &name, const std::string &a,
                  const std::string &aType, const std::string &w, int64_t k,
                  int64_t n, const std::string &bias) {
    const std::string rt = rows(n, "f32");
    os << "    %" << name << "e = tensor.empty(" << tDyn << ") : " << rt
       << "\n";
    os << "    %" << name << "f = linalg.fill ins(%zero : f32) outs(%" << name
       << "e : " << rt << ") -> " << rt << "\n";
    os << "    %" << name << "m = linalg.matmul ins(" << a << ", " << w << " : "
       << aType << ", tensor<" << mat(k, n) << ">) outs(%" << name
       << "f : " << rt << ") -> " << rt << "\n";
    std::string result = "%" + name + "m";
    if (s.bias) {
      os << "    %" << name
         << "b = linalg.generic {indexing_maps = [#col2, "
            "#id2], iterator_types = [\"parallel\", \"parallel\"]} ins("
         << bias << " : tensor<" << n << "x" << et << ">) outs(%" << name
         << "m : " << rt << ") {\n    ^bb0(%bv: " << et << ", %a: f32):\n";
      std::string bv = "%bv";
      if (et != "f32") {
        os << "      %bf = arith.extf %bv : " << et << " to f32\n";
        bv = "%bf";
      }
      os << "      %sum = arith.addf %a, " << bv
         << " : f32\n      linalg.yield %sum : f32\n    } -> " << rt << "\n";
      result = "%" + name + "b";
    }
    return result;
  };
  auto heads = [&](const std::string &name, const std::string &y, int64_t count,
                   int64_t width) {
    const std::string ht = "tensor<1x" + T + "x" + std::to_string(count) + "x" +
                           std::to_string(width) + "xf32>";
    os << "    %" << name << " = tensor.expand_shape " << y
       << " [[0, 1], [2, 3]] output_shape [1, " << tSize << ", " << count
       << ", " << width << "] : " << rows(count * width, "f32") << " into "
       << ht << "\n";
    return ht;
  };
  const std::string xr = rows(s.d, et);
  const std::string qt =
      heads("q", gemm("q", "%xb", xr, "%w_qt", s.d, s.h * s.d_k, "%b_qt"), s.h,
            s.d_k);
  const std::string kt =
      heads("k", gemm("k", "%xb", xr, "%w_kt", s.d, s.n_kv * s.d_k, "%b_kt"),
            s.n_kv, s.d_k);
  const std::string vt =
      heads("v", gemm("v", "%xb", xr, "%w_vt", s.d, s.n_kv * s.d_v, "%b_vt"),
            s.n_kv, s.d_v);
  const std::string at = "tensor<1x" + T + "x" + std::to_string(s.h) + "x" +
                         std::to_string(s.d_v) + "xf32>";
  if (s.mask.padding)
    os << "    %lb = tensor.extract_slice %lens[%b] [1] [1] : tensor<" << B
       << "xi32> to tensor<1xi32>\n";
  os << "    %ae = tensor.empty(" << tDyn << ") : " << at << "\n";
  os << "    %att = mha.attention ins(%q, %k, %v : " << qt << ", " << kt << ", "
     << vt << ")";
  if (s.mask.padding)
    os << " kv_lens(%lb : tensor<1xi32>)";
  os << "\n           outs(%ae : " << at << ")\n           "
     << attentionAttrs(s) << " -> " << at << "\n";
  // Merge heads, output projection (+ bias), back to the element type.
  os << "    %merged = tensor.collapse_shape %att [[0, 1], [2, 3]] : " << at
     << " into " << rows(hdv, "f32") << "\n";
  const std::string y =
      gemm("o", "%merged", rows(hdv, "f32"), "%w_ot", hdv, s.d, "%b_ot");
  const std::string ob = rows(s.d, et);
  os << "    %cvt = tensor.empty(" << tDyn << ") : " << ob << "\n";
  os << "    %yout = linalg.generic {indexing_maps = [#id2, #id2], "
        "iterator_types = [\"parallel\", \"parallel\"]} ins("
     << y << " : " << rows(s.d, "f32") << ") outs(%cvt : " << ob
     << ") {\n    ^bb0(%yv: f32, %o: " << et << "):\n";
  if (et != "f32")
    os << "      %res = arith.truncf %yv : f32 to " << et
       << "\n      linalg.yield %res : " << et << "\n";
  else
    os << "      linalg.yield %yv : f32\n";
  os << "    } -> " << ob << "\n";
  os << "    %next = tensor.insert_slice %yout into %acc[%b, 0, 0] [1, "
     << tSize << ", " << D << "] [1, 1, 1] : " << ob << " into " << ot << "\n";
  os << "    scf.yield %next : " << ot << "\n  }\n";
  os << "  bufferization.materialize_in_destination %r in restrict writable "
        "%out : ("
     << ot << ", " << om << ") -> ()\n";
  os << "  return\n}\n";
  return os.str();
}

} // namespace

std::string kernelModuleText(const AttentionSpec &s, const std::string &fn) {
  return s.op == Op::Sdpa ? sdpaModule(s, fn) : layerModule(s, fn);
}

} // namespace mhagen::mlirbackend
