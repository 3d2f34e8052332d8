#include "mhagen/manifest.hpp"

#include "mhagen/abi.h"

#include <nlohmann/json.hpp>

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
                    {"padding", spec.padding}};
  s["dtype"] = spec.dtype;
  s["bias"] = spec.bias;
  s["scale"] = spec.scale;
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

bool KernelManifest::fromJson(const std::string &text, KernelManifest &m,
                              std::string *error) {
  auto fail = [&](const std::string &why) {
    if (error)
      *error = "manifest: " + why;
    return false;
  };
  ojson j;
  try {
    j = ojson::parse(text);
  } catch (const std::exception &e) {
    return fail(std::string("not valid JSON: ") + e.what());
  }
  try {
    if (!j.is_object())
      return fail("not a JSON object");
    m = KernelManifest{};
    m.abiVersion = j.at("abi_version").get<int>();
    m.mhagenVersion = j.at("mhagen_version").get<std::string>();
    m.symbol = j.at("symbol").get<std::string>();
    m.kernelName = j.at("kernel_name").get<std::string>();
    const ojson &s = j.at("spec");
    m.spec.hash = s.at("hash").get<std::string>();
    m.spec.semanticKey = s.at("semantic_key").get<std::string>();
    m.spec.canonical = s.at("canonical").get<std::string>();
    m.spec.op = s.at("op").get<std::string>();
    m.spec.d = s.at("d").get<int64_t>();
    m.spec.h = s.at("h").get<int64_t>();
    m.spec.d_k = s.at("d_k").get<int64_t>();
    m.spec.d_v = s.at("d_v").get<int64_t>();
    m.spec.n_kv = s.at("n_kv").get<int64_t>();
    const ojson &mask = s.at("mask");
    m.spec.causal = mask.at("causal").get<bool>();
    m.spec.window = mask.at("window").get<int64_t>();
    m.spec.padding = mask.at("padding").get<bool>();
    m.spec.dtype = s.at("dtype").get<std::string>();
    m.spec.bias = s.at("bias").get<bool>();
    m.spec.scale = s.at("scale").get<double>();
    m.spec.T = s.at("T").get<int64_t>();
    m.spec.T_kv = s.at("T_kv").get<int64_t>();
    m.spec.B = s.at("B").get<int64_t>();
    m.target = j.at("target").get<std::string>();
    m.backend = j.at("backend").get<std::string>();
    m.device = j.at("device").get<std::string>();
    m.cpuFeatures = j.at("cpu_features").get<std::vector<std::string>>();
    m.scheduleJson = j.value("schedule", ojson::object()).dump();
    m.tuningJson = j.value("tuning", ojson::object()).dump();
  } catch (const std::exception &e) {
    return fail(std::string("missing or mistyped field: ") + e.what());
  }
  if (m.spec.op != "sdpa" && m.spec.op != "layer")
    return fail("spec.op must be sdpa or layer, not '" + m.spec.op + "'");
  if (m.spec.dtype != "f32" && m.spec.dtype != "bf16" && m.spec.dtype != "f16")
    return fail("spec.dtype must be f32, bf16 or f16, not '" + m.spec.dtype +
                "'");
  if (m.spec.h <= 0 || m.spec.n_kv <= 0 || m.spec.d_k <= 0 || m.spec.d_v <= 0 ||
      m.spec.d <= 0 || m.spec.h % m.spec.n_kv != 0)
    return fail("spec sizes are inconsistent (h, kv, dk, dv, d)");
  if (m.device != "cpu" && m.device != "cuda" && m.device != "opencl")
    return fail("device must be cpu, cuda or opencl, not '" + m.device + "'");
  return true;
}

} // namespace mhagen
