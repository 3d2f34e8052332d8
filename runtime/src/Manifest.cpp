#include "mhagen/manifest.hpp"

#include "mhagen/abi.h"
#include "mhagen/abi_model.hpp"

#include <nlohmann/json.hpp>

#include <climits>
#include <cmath>

namespace mhagen {

using ojson = nlohmann::ordered_json;

std::string KernelManifest::toJson() const {
  ojson j;
  j["abi_version"] = abiVersion;
  j["mhagen_version"] = mhagenVersion;
  j["symbol"] = symbol;
  j["kernel_name"] = kernelName;
  ojson s;
  s["hash"] = spec.hash;
  s["semantic_key"] = spec.semanticKey;
  s["canonical"] = spec.canonical;
  s["op"] = spec.op;
  s["d"] = spec.d;
  s["h"] = spec.h;
  s["d_k"] = spec.d_k;
  s["d_v"] = spec.d_v;
  s["n_kv"] = spec.n_kv;
  s["mask"] = ojson{{"causal", spec.causal},
                    {"window", spec.window},
                    {"padding", spec.padding},
                    {"expr", spec.maskExpr}};
  s["dtype"] = spec.dtype;
  s["kv_dtype"] = spec.kv_dtype.empty() ? spec.dtype : spec.kv_dtype;
  s["kv_block"] = spec.kv_block;
  s["ragged"] = spec.ragged;
  s["bias"] = spec.bias;
  s["qk_norm"] = spec.qk_norm;
  s["positions"] = spec.positions;
  s["layer_cache"] = spec.layer_cache;
  s["scale"] = spec.scaleAtRuntime ? ojson("runtime") : ojson(spec.scale);
  s["softcap"] = spec.softcap;
  s["alibi"] = spec.alibi;
  s["sinks"] = spec.sinks;
  s["lse"] = spec.lse;
  s["T"] = spec.T;
  s["T_kv"] = spec.T_kv;
  s["B"] = spec.B;
  j["spec"] = s;
  j["target"] = target;
  j["backend"] = backend;
  j["device"] = device;
  j["cpu_features"] = cpuFeatures;
  j["schedule"] = ojson::parse(scheduleJson.empty() ? "{}" : scheduleJson);
  j["tuning"] = ojson::parse(tuningJson.empty() ? "{}" : tuningJson);
  return j.dump(2) + "\n";
}

namespace {

// Manifests come from files and libraries the runtime is asked to trust, so
// they are read against a strict schema: bounded nesting, integers that are
// integers and in range, known fields only. The bounds are the spec
// language's own (compiler/spec/SpecParser.cpp, validateSpec).
constexpr int kMaxDepth = 32;
constexpr int64_t kMaxDim = int64_t(1) << 20;
constexpr int64_t kMaxStatic = int64_t(1) << 24;
constexpr int64_t kMaxKvBlock = int64_t(1) << 16; // the spec's bound

// nlohmann's DOM builder behind a SAX handler that refuses nesting deeper
// than kMaxDepth before it is built (deep documents overflow the stack in
// basic_json's recursive copies).
class DepthLimitedDom : public nlohmann::json_sax<ojson> {
public:
  explicit DepthLimitedDom(ojson &out) : dom_(out, false) {}
  bool tooDeep() const { return tooDeep_; }

  bool null() override { return dom_.null(); }
  bool boolean(bool v) override { return dom_.boolean(v); }
  bool number_integer(number_integer_t v) override {
    return dom_.number_integer(v);
  }
  bool number_unsigned(number_unsigned_t v) override {
    return dom_.number_unsigned(v);
  }
  bool number_float(number_float_t v, const string_t &s) override {
    return dom_.number_float(v, s);
  }
  bool string(string_t &v) override { return dom_.string(v); }
  bool binary(binary_t &v) override { return dom_.binary(v); }
  bool start_object(std::size_t n) override {
    return enter() && dom_.start_object(n);
  }
  bool key(string_t &k) override { return dom_.key(k); }
  bool end_object() override {
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) override {
    return enter() && dom_.start_array(n);
  }
  bool end_array() override {
    --depth_;
    return dom_.end_array();
  }
  bool parse_error(std::size_t pos, const std::string &tok,
                   const nlohmann::detail::exception &e) override {
    error_ = e.what();
    (void)pos;
    (void)tok;
    return false;
  }
  const std::string &error() const { return error_; }

private:
  bool enter() {
    if (++depth_ > kMaxDepth) {
      tooDeep_ = true;
      return false;
    }
    return true;
  }
  nlohmann::detail::json_sax_dom_parser<ojson> dom_;
  int depth_ = 0;
  bool tooDeep_ = false;
  std::string error_;
};

struct SchemaError {
  std::string what;
};

const ojson &field(const ojson &obj, const char *name, const char *where) {
  auto it = obj.find(name);
  if (it == obj.end())
    throw SchemaError{std::string(where) + name + " is missing"};
  return *it;
}

std::string str(const ojson &obj, const char *name, const char *where) {
  const ojson &v = field(obj, name, where);
  if (!v.is_string())
    throw SchemaError{std::string(where) + name + " must be a string"};
  return v.get<std::string>();
}

bool boolean(const ojson &obj, const char *name, const char *where) {
  const ojson &v = field(obj, name, where);
  if (!v.is_boolean())
    throw SchemaError{std::string(where) + name + " must be true or false"};
  return v.get<bool>();
}

/// An integer (not a float, not a string) in [lo, hi].
int64_t integer(const ojson &obj, const char *name, const char *where,
                int64_t lo, int64_t hi) {
  const ojson &v = field(obj, name, where);
  if (!v.is_number_integer())
    throw SchemaError{std::string(where) + name + " must be an integer, not " +
                      v.dump()};
  // nlohmann stores non-negative literals as unsigned: both bounds apply
  // to them too (fuzz_manifest found n_kv = 0 passing as unsigned).
  const bool inRange = v.is_number_unsigned()
                           ? v.get<uint64_t>() <= uint64_t(hi) &&
                                 (lo <= 0 || v.get<uint64_t>() >= uint64_t(lo))
                           : v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
  if (!inRange)
    throw SchemaError{std::string(where) + name + " = " + v.dump() +
                      " is outside [" + std::to_string(lo) + ", " +
                      std::to_string(hi) + "]"};
  return v.get<int64_t>();
}

void onlyKnown(const ojson &obj, std::initializer_list<const char *> known,
               const char *where) {
  if (!obj.is_object())
    throw SchemaError{std::string(*where ? where : "manifest") +
                      " must be an object"};
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool ok = false;
    for (const char *k : known)
      ok = ok || it.key() == k;
    if (!ok)
      throw SchemaError{"unknown field " + std::string(where) + it.key()};
  }
}

} // namespace

bool KernelManifest::fromJson(const std::string &text, KernelManifest &m,
                              std::string *error) {
  auto fail = [&](const std::string &why) {
    if (error)
      *error = "manifest: " + why;
    return false;
  };
  ojson j;
  DepthLimitedDom sax(j);
  bool parsed = false;
  try {
    parsed = ojson::sax_parse(text, &sax);
  } catch (const std::exception &e) {
    return fail(std::string("not valid JSON: ") + e.what());
  }
  if (sax.tooDeep())
    return fail("nested deeper than " + std::to_string(kMaxDepth) + " levels");
  if (!parsed)
    return fail("not valid JSON: " + sax.error());
  try {
    onlyKnown(j,
              {"abi_version", "mhagen_version", "symbol", "kernel_name", "spec",
               "target", "backend", "device", "cpu_features", "schedule",
               "tuning"},
              "");
    m = KernelManifest{};
    m.abiVersion =
        static_cast<int>(integer(j, "abi_version", "", 1, INT32_MAX));
    m.mhagenVersion = str(j, "mhagen_version", "");
    m.symbol = str(j, "symbol", "");
    m.kernelName = str(j, "kernel_name", "");
    const ojson &s = field(j, "spec", "");
    onlyKnown(
        s, {"hash",       "semantic_key", "canonical", "op",      "d",
            "h",          "d_k",          "d_v",       "n_kv",    "mask",
            "dtype",      "kv_dtype",     "bias",      "scale",   "softcap",
            "alibi",      "sinks",        "lse",       "T",       "T_kv",
            "B",          "kv_block",     "ragged",    "qk_norm", "positions",
            "layer_cache"},
        "spec.");
    const char *sp = "spec.";
    m.spec.hash = str(s, "hash", sp);
    m.spec.semanticKey = str(s, "semantic_key", sp);
    m.spec.canonical = str(s, "canonical", sp);
    m.spec.op = str(s, "op", sp);
    m.spec.d = integer(s, "d", sp, 1, kMaxDim);
    m.spec.h = integer(s, "h", sp, 1, kMaxDim);
    m.spec.d_k = integer(s, "d_k", sp, 1, kMaxDim);
    m.spec.d_v = integer(s, "d_v", sp, 1, kMaxDim);
    m.spec.n_kv = integer(s, "n_kv", sp, 1, kMaxDim);
    const ojson &mask = field(s, "mask", sp);
    onlyKnown(mask, {"causal", "window", "padding", "expr"}, "spec.mask.");
    const char *mp = "spec.mask.";
    m.spec.causal = boolean(mask, "causal", mp);
    m.spec.window = integer(mask, "window", mp, 0, kMaxStatic);
    m.spec.padding = boolean(mask, "padding", mp);
    if (mask.contains("expr"))
      m.spec.maskExpr = str(mask, "expr", mp);
    m.spec.dtype = str(s, "dtype", sp);
    m.spec.kv_dtype =
        s.contains("kv_dtype") ? str(s, "kv_dtype", sp) : m.spec.dtype;
    if (s.contains("kv_block"))
      m.spec.kv_block = integer(s, "kv_block", sp, 0, kMaxKvBlock);
    if (s.contains("ragged"))
      m.spec.ragged = boolean(s, "ragged", sp);
    m.spec.bias = boolean(s, "bias", sp);
    if (s.contains("qk_norm"))
      m.spec.qk_norm = str(s, "qk_norm", sp);
    if (s.contains("positions"))
      m.spec.positions = boolean(s, "positions", sp);
    if (s.contains("layer_cache"))
      m.spec.layer_cache = boolean(s, "layer_cache", sp);
    const ojson &scale = field(s, "scale", sp);
    if (scale.is_string() && scale.get<std::string>() == "runtime") {
      m.spec.scaleAtRuntime = true;
    } else if (!scale.is_number() || !std::isfinite(scale.get<double>()) ||
               !(scale.get<double>() > 0))
      return fail("spec.scale must be a finite number > 0 or \"runtime\", "
                  "not " +
                  scale.dump());
    else
      m.spec.scale = scale.get<double>();
    if (s.contains("softcap")) {
      const ojson &cap = s.at("softcap");
      if (!cap.is_number() || !std::isfinite(cap.get<double>()) ||
          cap.get<double>() < 0)
        return fail("spec.softcap must be a finite number >= 0 (0: none), "
                    "not " +
                    cap.dump());
      m.spec.softcap = cap.get<double>();
    }
    if (s.contains("alibi"))
      m.spec.alibi = str(s, "alibi", sp);
    if (s.contains("sinks"))
      m.spec.sinks = boolean(s, "sinks", sp);
    if (s.contains("lse"))
      m.spec.lse = boolean(s, "lse", sp);
    m.spec.T = integer(s, "T", sp, 0, kMaxStatic);
    m.spec.T_kv = integer(s, "T_kv", sp, 0, kMaxStatic);
    m.spec.B = integer(s, "B", sp, 0, kMaxStatic);
    m.target = str(j, "target", "");
    m.backend = str(j, "backend", "");
    m.device = str(j, "device", "");
    const ojson &features = field(j, "cpu_features", "");
    if (!features.is_array())
      return fail("cpu_features must be an array of strings");
    for (const ojson &f : features) {
      if (!f.is_string())
        return fail("cpu_features must be an array of strings");
      m.cpuFeatures.push_back(f.get<std::string>());
    }
    for (const char *obj : {"schedule", "tuning"}) {
      auto it = j.find(obj);
      if (it != j.end() && !it->is_object())
        return fail(std::string(obj) + " must be an object");
    }
    m.scheduleJson = j.value("schedule", ojson::object()).dump();
    m.tuningJson = j.value("tuning", ojson::object()).dump();
  } catch (const SchemaError &e) {
    return fail(e.what);
  } catch (const std::exception &e) {
    return fail(std::string("missing or mistyped field: ") + e.what());
  }
  if (m.spec.op != "sdpa" && m.spec.op != "layer")
    return fail("spec.op must be sdpa or layer, not '" + m.spec.op + "'");
  if (m.spec.dtype != "f32" && m.spec.dtype != "bf16" && m.spec.dtype != "f16")
    return fail("spec.dtype must be f32, bf16 or f16, not '" + m.spec.dtype +
                "'");
  if (abi::Scalar kv;
      !abi::scalarFromName(m.spec.kv_dtype, kv) || kv == abi::Scalar::I32)
    return fail("spec.kv_dtype must be f32, bf16, f16 or i8, not '" +
                m.spec.kv_dtype + "'");
  if (m.spec.kv_dtype != m.spec.dtype && m.spec.op != "sdpa" &&
      !m.spec.layer_cache)
    return fail("spec.kv_dtype differs from spec.dtype but op is not sdpa "
                "and there is no layer cache");
  if (m.spec.kv_block > 0 && m.spec.op != "sdpa")
    return fail("spec.kv_block (a paged K/V cache) needs op = sdpa");
  if (m.spec.ragged && (m.spec.op != "sdpa" || m.spec.T > 0))
    return fail("spec.ragged (packed queries) needs op = sdpa and no "
                "static T");
  if (m.spec.ragged && m.spec.T_kv > 0 && m.spec.kv_block == 0)
    return fail("spec.ragged with a contiguous cache needs no static T_kv "
                "(each sequence is called with its own key length)");
  if (m.spec.n_kv > m.spec.h || m.spec.h % m.spec.n_kv != 0)
    return fail("spec.h (" + std::to_string(m.spec.h) +
                ") must be a multiple of spec.n_kv (" +
                std::to_string(m.spec.n_kv) + ")");
  if (m.spec.h * m.spec.d_k > kMaxDim || m.spec.h * m.spec.d_v > kMaxDim)
    return fail("spec.h * d_k and spec.h * d_v must be <= " +
                std::to_string(kMaxDim));
  if (m.spec.window > 0 && !m.spec.causal)
    return fail("spec.mask.window implies causal");
  if (m.spec.alibi != "false" && m.spec.alibi != "true" &&
      m.spec.alibi != "runtime")
    return fail("spec.alibi must be false, true or runtime, not '" +
                m.spec.alibi + "'");
  if (m.spec.bias && m.spec.op != "layer")
    return fail("spec.bias needs op = layer");
  if (m.spec.qk_norm != "none" && m.spec.qk_norm != "head" &&
      m.spec.qk_norm != "projection")
    return fail("spec.qk_norm must be none, head or projection, not '" +
                m.spec.qk_norm + "'");
  if (m.spec.qk_norm != "none" && m.spec.op != "layer")
    return fail("spec.qk_norm needs op = layer");
  if (m.spec.positions && m.spec.op != "layer")
    return fail("spec.positions needs op = layer");
  if (m.spec.layer_cache &&
      (m.spec.op != "layer" || m.spec.kv_block > 0 || m.spec.T_kv > 0))
    return fail("spec.layer_cache needs op = layer, a contiguous cache and "
                "no static T_kv");
  if (m.device != "cpu" && m.device != "cuda" && m.device != "opencl")
    return fail("device must be cpu, cuda or opencl, not '" + m.device + "'");
  return true;
}

} // namespace mhagen
