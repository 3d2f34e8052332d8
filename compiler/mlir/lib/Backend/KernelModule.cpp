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

std::string sdpaModule(const AttentionSpec &s, const std::string &fn) {
  const std::string et = std::string(toString(s.dtype));
  const std::string B = dim(s.B), TQ = dim(s.T),
                    TKV = dim(s.T_kv ? s.T_kv : s.T);
  const std::string H = std::to_string(s.h), KV = std::to_string(s.n_kv),
                    DK = std::to_string(s.d_k), DV = std::to_string(s.d_v);
  // [B, T, heads, width]: dense within a token, token and batch strides
  // given at call time.
  auto shape = [&](const std::string &T, const std::string &heads,
                   const std::string &width) {
    return B + "x" + T + "x" + heads + "x" + width + "x" + et;
  };
  auto memref = [&](const std::string &T, const std::string &heads,
                    const std::string &width) {
    return "memref<" + shape(T, heads, width) + ", strided<[?, ?, " + width +
           ", 1], offset: ?>>";
  };
  auto tensor = [&](const std::string &T, const std::string &heads,
                    const std::string &width) {
    return "tensor<" + shape(T, heads, width) + ">";
  };
  const std::string qm = memref(TQ, H, DK), km = memref(TKV, KV, DK),
                    vm = memref(TKV, KV, DV), om = memref(TQ, H, DV);
  const std::string qt = tensor(TQ, H, DK), kt = tensor(TKV, KV, DK),
                    vt = tensor(TKV, KV, DV), ot = tensor(TQ, H, DV);
  std::ostringstream os;
  os << "func.func @" << fn << "(%q: " << qm << ", %k: " << km
     << ", %v: " << vm;
  if (s.mask.padding)
    os << ", %kv_lens: memref<" << B << "xi32>";
  os << ", %out: " << om << ") attributes {llvm.emit_c_interface} {\n";
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
  const std::string xm = "memref<" + B + "x" + T + "x" + D + "x" + et + ">";
  const std::string om = "memref<" + B + "x" + T + "x" + D + "x" + et +
                         ", strided<[?, ?, 1], offset: ?>>";
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
  os << "func.func @" << fn << "(%x: " << xm << ", %w_q: memref<"
     << mat(s.d, s.h * s.d_k) << ">, %w_k: memref<" << mat(s.d, s.n_kv * s.d_k)
     << ">, %w_v: memref<" << mat(s.d, s.n_kv * s.d_v) << ">, %w_o: memref<"
     << mat(hdv, s.d) << ">";
  if (s.bias)
    os << ", %b_q: memref<" << s.h * s.d_k << "x" << et << ">, %b_k: memref<"
       << s.n_kv * s.d_k << "x" << et << ">, %b_v: memref<" << s.n_kv * s.d_v
       << "x" << et << ">, %b_o: memref<" << D << "x" << et << ">";
  if (s.mask.padding)
    os << ", %kv_lens: memref<" << B << "xi32>";
  os << ", %out: " << om << ") attributes {llvm.emit_c_interface} {\n";
  os << "  %c0 = arith.constant 0 : index\n"
        "  %c1 = arith.constant 1 : index\n"
        "  %zero = arith.constant 0.0 : f32\n";
  os << "  %xt = bufferization.to_tensor %x restrict : " << xm << "\n";
  os << "  %B = tensor.dim %xt, %c0 : " << xt << "\n";
  os << "  %T = tensor.dim %xt, %c1 : " << xt << "\n";
  auto weight = [&](const std::string &name, int64_t r, int64_t c) {
    os << "  %" << name << "t = bufferization.to_tensor %" << name
       << " restrict : memref<" << mat(r, c) << ">\n";
  };
  weight("w_q", s.d, s.h * s.d_k);
  weight("w_k", s.d, s.n_kv * s.d_k);
  weight("w_v", s.d, s.n_kv * s.d_v);
  weight("w_o", hdv, s.d);
  if (s.bias)
    for (auto [name, n] : {std::pair<const char *, int64_t>{"b_q", s.h * s.d_k},
                           {"b_k", s.n_kv * s.d_k},
                           {"b_v", s.n_kv * s.d_v},
                           {"b_o", s.d}})
      os << "  %" << name << "t = bufferization.to_tensor %" << name
         << " restrict : memref<" << n << "x" << et << ">\n";
  if (s.mask.padding)
    os << "  %lens = bufferization.to_tensor %kv_lens restrict : memref<" << B
       << "xi32>\n";
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
