#include "mhagen/spec/AttentionSpec.h"
#include "mhagen/spec/SpecFields.h"

#include "SpecText.h"

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
  switch (b) {
  case Backend::Halide:
    return "halide";
  case Backend::Mlir:
    return "mlir";
  case Backend::Cuda:
    return "cuda";
  }
  return "?";
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
  if (!keysPerSequence())
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
  case TargetKind::Avx512Amx:
    return "avx512_amx";
  case TargetKind::Neon:
    return "neon";
  case TargetKind::Cuda:
    return "cuda_sm" + std::to_string(cudaCapability) +
           (cudaArchSpecific ? "a" : "");
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

std::string AttentionSpec::canonical() const {
  std::ostringstream os;
  os << "spec " << kernelName() << " {\n";
  for (const SpecField &f : specFields())
    if (std::optional<std::string> value = f.print(*this))
      os << "  " << f.name << " = " << *value << "\n";
  os << "}\n";
  return os.str();
}

std::string AttentionSpec::semanticKey() const {
  std::string always, optional;
  for (const SpecField &f : specFields()) {
    const std::string part = f.key ? f.key(*this) : "";
    if (part.empty())
      continue;
    std::string &to = f.keyAlways ? always : optional;
    to += (to.empty() ? "" : ";") + part;
  }
  return optional.empty() ? always : always + ";" + optional;
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
  std::string body = "mha", tail;
  for (const SpecField &f : specFields())
    if (f.namePart)
      (f.namePlace == NamePlace::Tail ? tail : body) += f.namePart(*this);
  return body + tail;
}

std::string AttentionSpec::kernelName() const {
  return name.empty() ? derivedName() : name;
}

bool AttentionSpec::operator==(const AttentionSpec &o) const {
  if (name != o.name)
    return false;
  for (const SpecField &f : specFields())
    if (!f.same(*this, o))
      return false;
  return true;
}

} // namespace mhagen
