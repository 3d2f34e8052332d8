// What the driver writes next to each object: the manifest (the runtime's
// KernelManifest) and the C header, whose convenience entry point takes the
// ABI model's tensors as parameters (templates/kernel_header.h.in).
#include "mhagen/driver/Driver.h"

#include "Toolchain.h"

#include "mhagen/abi.h"
#include "mhagen/abi_model.hpp"
#include "mhagen/backend/AbiWrapper.h"
#include "mhagen/templates/Templates.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <filesystem>
#include <sstream>

#ifndef MHAGEN_VERSION
#define MHAGEN_VERSION "0.0.0"
#endif

namespace mhagen {

namespace fs = std::filesystem;

KernelManifest makeManifest(const AttentionSpec &s, const std::string &symbol,
                            const BackendResult &result,
                            const ScheduleSource &source) {
  KernelManifest m;
  m.abiVersion = MHAGEN_ABI_VERSION;
  m.mhagenVersion = MHAGEN_VERSION;
  m.symbol = symbol;
  m.kernelName = s.kernelName();
  m.spec.canonical = s.canonical();
  m.spec.semanticKey = s.semanticKey();
  m.spec.hash = s.hash();
  m.spec.op = toString(s.op);
  m.spec.d = s.d;
  m.spec.h = s.h;
  m.spec.d_k = s.d_k;
  m.spec.d_v = s.d_v;
  m.spec.n_kv = s.n_kv;
  m.spec.causal = s.mask.isCausal();
  m.spec.window = s.mask.isUnion() ? 0 : s.mask.single().window;
  m.spec.padding = s.mask.hasPadding();
  m.spec.maskExpr = s.mask.str();
  m.spec.dtype = toString(s.dtype);
  m.spec.kv_dtype = toString(s.kvType());
  m.spec.kv_block = s.kv_block;
  m.spec.ragged = s.op == Op::Sdpa && s.ragged;
  m.spec.bias = s.bias;
  m.spec.qk_norm = s.qk_norm.scope == QkNormScope::Head         ? "head"
                   : s.qk_norm.scope == QkNormScope::Projection ? "projection"
                                                                : "none";
  m.spec.positions = s.positionsAtRuntime;
  m.spec.layer_cache = s.cachedLayer();
  m.spec.scaleAtRuntime = s.scaleAtRuntime;
  m.spec.scale = s.scaleAtRuntime ? 0.0 : s.effectiveScale();
  m.spec.softcap = s.softcap.value_or(0.0);
  m.spec.alibi = toString(s.alibi);
  m.spec.sinks = s.sinks;
  m.spec.lse = s.lse;
  m.spec.T = s.T.value_or(0);
  m.spec.T_kv = s.op == Op::Layer ? s.T.value_or(0) : s.T_kv.value_or(0);
  m.spec.B = s.B.value_or(0);
  m.target = s.target.str();
  m.backend = toString(s.backend);
  m.device = result.device;
  m.cpuFeatures = result.cpuFeatures;
  m.scheduleJson = scheduleParamsToJson(result.schedule);
  nlohmann::ordered_json t;
  t["source"] = source.kind;
  if (!source.database.empty())
    t["database"] = fs::path(source.database).filename().string();
  if (!source.trialId.empty())
    t["trial"] = source.trialId;
  if (source.medianMs > 0)
    t["median_ms"] = source.medianMs;
  if (!source.machineClass.empty())
    t["machine_class"] = source.machineClass;
  if (!source.note.empty())
    t["note"] = source.note;
  m.tuningJson = t.dump();
  return m;
}

// Joins items with ", ", starting a new line (with `indent`) before an item
// that would pass column 78; `column` is where the first item starts.
static std::string wrapList(const std::vector<std::string> &items,
                            size_t column, const std::string &indent) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string sep = i ? ", " : "";
    if (i && column + sep.size() + items[i].size() > 78) {
      out += ",\n" + indent;
      column = indent.size();
    } else {
      out += sep;
      column += sep.size();
    }
    out += items[i];
    column += items[i].size();
  }
  return out;
}

std::string kernelHeader(const AttentionSpec &s, const std::string &symbol) {
  std::string comment;
  std::istringstream lines(s.canonical());
  for (std::string line; std::getline(lines, line);)
    comment += " *   " + line + "\n";
  // No "/* */" here: this text sits inside the header's comment.
  auto elemText = [](abi::Scalar x) {
    return x == abi::Scalar::BF16 || x == abi::Scalar::F16
               ? std::string("uint16_t holding ") + abi::scalarName(x) + " bits"
               : std::string(abi::scalarCType(x));
  };
  const abi::AbiShape shape = backend::abiShapeOf(s);
  std::string elem = elemText(shape.data);
  if (shape.kv != shape.data)
    elem += "; k and v are " + elemText(shape.kv) +
            (shape.kv == abi::Scalar::I8 ? " with float row scales" : "");
  // A convenience entry point for dense tensors: the ABI model's tensors
  // as parameters (inputs, outputs, the sizes, then integer vectors).
  const bool layer = s.op == Op::Layer;
  std::vector<std::string> docs, params;
  std::string sets, ints, intSets;
  for (const abi::TensorModel *t : abi::tensors(shape)) {
    const std::string n = t->name;
    if (t->elem == abi::Elem::Int32) {
      ints += ",\n    const int32_t *" + n;
      intSets += "  a." + n + " = " + n + ";\n";
      continue;
    }
    docs.push_back(n + " " + abi::dimsText(*t));
    params.push_back((t->output ? "" : "const ") +
                     std::string(abi::scalarCType(abi::scalarOf(*t, shape))) +
                     " *" + n);
    sets += "  a." + n + " = " + n + ";\n";
  }
  std::string conv =
      "/* Dense tensors: " + wrapList(docs, 18, " * ") + ";\n * elements are " +
      elem + ". */\nstatic inline int " + symbol +
      (layer ? "_layer" : "_sdpa") + "(\n    " + wrapList(params, 4, "    ") +
      ",\n    int64_t batch, " +
      (layer ? "int64_t t" : "int64_t t_q, int64_t t_kv") +
      (shape.kvBlock ? ", int64_t num_blocks" : "") + ints +
      ") {\n  mhagen_call_args a;\n  memset(&a, 0, sizeof a);\n"
      "  a.abi_version = MHAGEN_ABI_VERSION;\n  a.batch = batch;\n" +
      (layer ? "  a.t_q = t;\n" : "  a.t_q = t_q;\n  a.t_kv = t_kv;\n") +
      (shape.kvBlock ? "  a.num_blocks = num_blocks;\n" : "") + sets + intSets +
      "  return " + symbol + "(&a);\n}\n";
  conv = "#include <string.h>\n\n" + conv;
  std::string desc = s.op == Op::Sdpa
                         ? "scaled dot-product attention core (op = sdpa)"
                         : "full multi-head attention layer (op = layer)";
  return fillTemplate(templateText("kernel_header.h.in"),
                      {{"MHAGEN_VERSION", MHAGEN_VERSION},
                       {"SYMBOL", symbol},
                       {"OP_DESCRIPTION", desc},
                       {"TARGET", s.target.str()},
                       {"BACKEND", toString(s.backend)},
                       {"HASH", s.hash()},
                       {"SPEC_COMMENT", comment},
                       {"GUARD", upperCase(symbol)},
                       {"H", std::to_string(s.h)},
                       {"KV", std::to_string(s.n_kv)},
                       {"DK", std::to_string(s.d_k)},
                       {"DV", std::to_string(s.d_v)},
                       {"D", std::to_string(s.d)},
                       {"CONVENIENCE", conv}});
}

} // namespace mhagen
