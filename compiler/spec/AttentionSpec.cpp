#include "mhagen/spec/AttentionSpec.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <tuple>

namespace mhagen {

const char *toString(Op op) { return op == Op::Sdpa ? "sdpa" : "layer"; }

const char *toString(DType t) {
  switch (t) {
  case DType::F32:
    return "f32";
  case DType::BF16:
    return "bf16";
  case DType::F16:
    return "f16";
  }
  return "?";
}

const char *toString(Backend b) {
  return b == Backend::Halide ? "halide" : "mlir";
}

int dtypeBytes(DType t) { return t == DType::F32 ? 4 : 2; }

const char *toString(KvType t) {
  switch (t) {
  case KvType::F32:
    return "f32";
  case KvType::BF16:
    return "bf16";
  case KvType::F16:
    return "f16";
  case KvType::I8:
    return "i8";
  }
  return "?";
}

const char *toString(AlibiSlopes a) {
  switch (a) {
  case AlibiSlopes::None:
    return "false";
  case AlibiSlopes::Standard:
    return "true";
  case AlibiSlopes::Runtime:
    return "runtime";
  }
  return "?";
}

KvType kvTypeOf(DType t) {
  switch (t) {
  case DType::BF16:
    return KvType::BF16;
  case DType::F16:
    return KvType::F16;
  default:
    return KvType::F32;
  }
}

int kvTypeBytes(KvType t) {
  return t == KvType::F32 ? 4 : t == KvType::I8 ? 1 : 2;
}

MaskSpec AttentionSpec::effectiveMask() const {
  if (!pagedKv() && !ragged)
    return mask;
  MaskSpec m = mask;
  if (m.anyOf.empty())
    m.anyOf.push_back(MaskClause{});
  for (MaskClause &c : m.anyOf)
    c.padding = true;
  m.normalize();
  return m;
}

KvType AttentionSpec::kvType() const {
  return kv_dtype ? *kv_dtype : kvTypeOf(dtype);
}

int64_t AttentionSpec::kvBytesPerToken() const {
  const int64_t scales = kvQuantized() ? 2 * n_kv * 4 : 0; // f32 per row
  return n_kv * (d_k + d_v) * kvTypeBytes(kvType()) + scales;
}

std::string Target::str() const {
  switch (kind) {
  case TargetKind::Host:
    return "host";
  case TargetKind::Avx2:
    return "avx2";
  case TargetKind::Avx512:
    return "avx512";
  case TargetKind::Avx512Bf16:
    return "avx512_bf16";
  case TargetKind::Cuda:
    return "cuda_sm" + std::to_string(cudaCapability);
  case TargetKind::OpenCL:
    return "opencl";
  }
  return "?";
}

// --- Masks ----------------------------------------------------------------

bool MaskClause::weakerThan(const MaskClause &o) const {
  // Each of this clause's terms must already hold under `o`.
  if (causal && !o.isCausal())
    return false;
  if (window > 0 && !(o.window > 0 && o.window <= window))
    return false;
  if (padding && !o.padding)
    return false;
  if (sink > 0 && !(o.sink > 0 && o.sink <= sink))
    return false;
  return true;
}

bool MaskClause::operator<(const MaskClause &o) const {
  // The canonical order of clauses (any fixed order would do): causal
  // ones first, then by window, sink and padding.
  auto key = [](const MaskClause &c) {
    return std::make_tuple(!c.isCausal(), c.window == 0 ? INT64_MAX : c.window,
                           c.sink == 0 ? INT64_MAX : c.sink, c.padding);
  };
  return key(*this) < key(o);
}

std::string MaskClause::str() const {
  if (isTrue())
    return "none";
  std::string s;
  auto add = [&](const std::string &term) {
    if (!s.empty())
      s += " & ";
    s += term;
  };
  if (causal && window == 0)
    add("causal");
  if (window > 0)
    add("window(" + std::to_string(window) + ")");
  if (padding)
    add("padding");
  if (sink > 0)
    add("sink(" + std::to_string(sink) + ")");
  return s;
}

std::string MaskClause::shortName() const {
  if (isTrue())
    return "none";
  std::string s;
  auto add = [&](const std::string &term) {
    if (!s.empty())
      s += "_";
    s += term;
  };
  if (causal && window == 0)
    add("causal");
  if (window > 0)
    add("win" + std::to_string(window));
  if (padding)
    add("pad");
  if (sink > 0)
    add("sink" + std::to_string(sink));
  return s;
}

MaskSpec MaskSpec::of(const MaskClause &c) {
  MaskSpec m;
  m.anyOf.push_back(c);
  m.normalize();
  return m;
}

bool MaskSpec::isCausal() const {
  if (anyOf.empty())
    return false;
  for (const MaskClause &c : anyOf)
    if (!c.isCausal())
      return false;
  return true;
}

bool MaskSpec::hasPadding() const {
  for (const MaskClause &c : anyOf)
    if (c.padding)
      return true;
  return false;
}

void MaskSpec::normalize() {
  std::vector<MaskClause> kept;
  for (MaskClause c : anyOf) {
    if (c.window > 0)
      c.causal = false; // window implies causal; canonical form drops it
    if (c.isTrue()) {   // a union with `none` in it shows every key
      anyOf.clear();
      return;
    }
    kept.push_back(c);
  }
  // Drop each clause that a different clause (or an equal one kept
  // earlier) already covers: c | d == c when d implies c.
  std::vector<MaskClause> out;
  for (size_t i = 0; i < kept.size(); ++i) {
    bool covered = false;
    for (size_t j = 0; j < kept.size() && !covered; ++j)
      if (i != j && kept[j].weakerThan(kept[i]) &&
          (!(kept[i] == kept[j]) || j < i))
        covered = true;
    if (!covered)
      out.push_back(kept[i]);
  }
  std::sort(out.begin(), out.end());
  anyOf = out;
}

std::string MaskSpec::str() const {
  if (isNone())
    return "none";
  std::string s;
  for (const MaskClause &c : anyOf)
    s += (s.empty() ? "" : " | ") + c.str();
  return s;
}

std::string MaskSpec::shortName() const {
  if (isNone())
    return "none";
  std::string s;
  for (const MaskClause &c : anyOf)
    s += (s.empty() ? "" : "_or_") + c.shortName();
  return s;
}

double AttentionSpec::effectiveScale() const {
  if (scale)
    return *scale;
  return 1.0 / std::sqrt(static_cast<double>(d_k));
}

// Shortest text that reads back as the same double.
static std::string formatDouble(double v) {
  char buf[64];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v)
      break;
  }
  return buf;
}

// A new field's number: integers as integers (20, not 2e+01), others in
// their shortest round-trip form. (scale keeps formatDouble: its text is
// part of existing semantic keys.)
static std::string formatValue(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  return formatDouble(v);
}

// A number as part of a C identifier: 30.5 -> 30p5, 1e+30 -> 1e30.
static std::string identifierText(const std::string &number) {
  std::string out;
  for (char c : number)
    if (std::isalnum(static_cast<unsigned char>(c)))
      out += c;
    else if (c == '.')
      out += 'p';
  return out;
}

std::string AttentionSpec::canonical() const {
  std::ostringstream os;
  os << "spec " << kernelName() << " {\n";
  os << "  op = " << toString(op) << "\n";
  os << "  d = " << d << "\n";
  os << "  h = " << h << "\n";
  os << "  kv = " << n_kv << "\n";
  os << "  dk = " << d_k << "\n";
  os << "  dv = " << d_v << "\n";
  os << "  mask = " << mask.str() << "\n";
  os << "  dtype = " << toString(dtype) << "\n";
  if (kv_dtype)
    os << "  kv_dtype = " << toString(*kv_dtype) << "\n";
  if (pagedKv())
    os << "  kv_cache = paged(" << kv_block << ")\n";
  if (ragged)
    os << "  ragged = true\n";
  os << "  bias = " << (bias ? "true" : "false") << "\n";
  if (scale)
    os << "  scale = " << formatDouble(*scale) << "\n";
  if (scaleAtRuntime)
    os << "  scale = runtime\n";
  if (softcap)
    os << "  softcap = " << formatValue(*softcap) << "\n";
  if (alibi != AlibiSlopes::None)
    os << "  alibi = " << toString(alibi) << "\n";
  if (sinks)
    os << "  sinks = learned\n";
  if (lse)
    os << "  lse = true\n";
  os << "  target = " << target.str() << "\n";
  os << "  backend = " << toString(backend) << "\n";
  if (T)
    os << "  T = " << *T << "\n";
  if (T_kv)
    os << "  Tkv = " << *T_kv << "\n";
  if (B)
    os << "  B = " << *B << "\n";
  os << "}\n";
  return os.str();
}

std::string AttentionSpec::semanticKey() const {
  std::ostringstream os;
  os << "op=" << toString(op) << ";d=" << d << ";h=" << h << ";kv=" << n_kv
     << ";dk=" << d_k << ";dv=" << d_v << ";mask=" << mask.str()
     << ";dtype=" << toString(dtype) << ";bias=" << (bias ? 1 : 0) << ";scale="
     << (scaleAtRuntime ? std::string("runtime")
                        : formatDouble(effectiveScale()));
  if (kv_dtype) // absent when K/V are stored as dtype: old keys unchanged
    os << ";kv_dtype=" << toString(*kv_dtype);
  if (pagedKv()) // absent for a contiguous cache: old keys unchanged
    os << ";kv_cache=paged(" << kv_block << ")";
  if (ragged) // absent for a uniform batch: old keys unchanged
    os << ";ragged=1";
  // Score modifiers: absent when unset, so older keys stay as they were.
  if (softcap)
    os << ";softcap=" << formatValue(*softcap);
  if (alibi != AlibiSlopes::None)
    os << ";alibi=" << toString(alibi);
  if (sinks)
    os << ";sinks=learned";
  if (lse)
    os << ";lse=1";
  if (T)
    os << ";T=" << *T;
  if (T_kv)
    os << ";Tkv=" << *T_kv;
  if (B)
    os << ";B=" << *B;
  return os.str();
}

std::string AttentionSpec::hash() const {
  uint64_t hv = 0xcbf29ce484222325ULL; // FNV-1a 64
  for (unsigned char c : semanticKey()) {
    hv ^= c;
    hv *= 0x100000001b3ULL;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx",
                static_cast<unsigned long long>(hv));
  return buf;
}

std::string AttentionSpec::derivedName() const {
  std::ostringstream os;
  os << "mha";
  if (op == Op::Sdpa)
    os << "_sdpa";
  os << "_d" << d << "_h" << h << "_kv" << n_kv << "_dk" << d_k;
  if (d_v != d_k)
    os << "_dv" << d_v;
  os << "_" << mask.shortName() << "_" << toString(dtype);
  if (kv_dtype)
    os << "_kv" << toString(*kv_dtype);
  if (pagedKv())
    os << "_paged" << kv_block;
  if (ragged)
    os << "_ragged";
  if (bias)
    os << "_bias";
  if (softcap)
    os << "_cap" << identifierText(formatValue(*softcap));
  if (alibi == AlibiSlopes::Standard)
    os << "_alibi";
  else if (alibi == AlibiSlopes::Runtime)
    os << "_alibirt";
  if (sinks)
    os << "_sinks";
  if (lse)
    os << "_lse";
  if (scale)
    os << "_s" << hash().substr(0, 6); // a non-default scale changes the math
  if (scaleAtRuntime)
    os << "_srt";
  if (T)
    os << "_T" << *T;
  if (T_kv)
    os << "_Tkv" << *T_kv;
  if (B)
    os << "_B" << *B;
  return os.str();
}

std::string AttentionSpec::kernelName() const {
  return name.empty() ? derivedName() : name;
}

bool AttentionSpec::operator==(const AttentionSpec &o) const {
  return name == o.name && op == o.op && d == o.d && h == o.h && d_k == o.d_k &&
         d_v == o.d_v && n_kv == o.n_kv && mask == o.mask && dtype == o.dtype &&
         kv_dtype == o.kv_dtype && kv_block == o.kv_block &&
         ragged == o.ragged && bias == o.bias && scale == o.scale &&
         scaleAtRuntime == o.scaleAtRuntime && softcap == o.softcap &&
         alibi == o.alibi && sinks == o.sinks && lse == o.lse &&
         target == o.target && backend == o.backend && T == o.T &&
         T_kv == o.T_kv && B == o.B;
}

} // namespace mhagen
