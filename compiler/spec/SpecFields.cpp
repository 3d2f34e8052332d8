// The spec language's fields, one row each, in canonical order. The kinds
// of field (sizes, switches, enumerations, optional sizes) are made by the
// small functions first; each row then says only what is particular to it.
#include "mhagen/spec/SpecFields.h"

#include "mhagen/spec/QkNorm.h"
#include "mhagen/spec/Rope.h"

#include "SpecText.h"

#include <cctype>
#include <cmath>
#include <sstream>
#include <utility>

namespace mhagen {

namespace {

using Spec = AttentionSpec;

std::string str(int64_t v) { return std::to_string(v); }

/// A row's parser from one that needs only the text.
template <class F> auto fromText(F f) {
  return [f](const RawField &raw, Spec &s, std::vector<SpecDiagnostic> &) {
    return f(raw.value, s);
  };
}

template <class T> auto sameMember(T Spec::*m) {
  return [m](const Spec &a, const Spec &b) { return a.*m == b.*m; };
}

/// The text of an integer field that fails to parse: a rule naming why.
std::string badInteger(const std::string &v) {
  return !v.empty() && v[0] == '-' ? "must be > 0"
                                   : "must be a positive integer";
}

/// Every size is at least 1 and at most `max`.
std::string sizeBounds(int64_t v, int64_t max) {
  if (v <= 0)
    return "must be > 0";
  if (v > max)
    return "must be <= " + str(max);
  return "";
}

/// A size of the model (d, h, kv, dk, dv): always printed and keyed, its
/// bounds checked before any rule that divides by it.
SpecField sizeField(std::string name, int64_t Spec::*m) {
  SpecField f;
  f.name = name;
  f.values = "integer > 0";
  f.flag = "--" + name;
  f.flagForm = FlagForm::Value;
  f.parse = fromText([m](const std::string &v, Spec &s) -> std::string {
    if (!parseInt(v, s.*m))
      return badInteger(v);
    return "";
  });
  f.print = [m](const Spec &s) { return str(s.*m); };
  f.key = [m, name](const Spec &s) { return name + "=" + str(s.*m); };
  f.keyAlways = true;
  f.namePart = [m, name](const Spec &s) { return "_" + name + str(s.*m); };
  f.same = sameMember(m);
  f.bounds = [m](const Spec &s) { return sizeBounds(s.*m, kMaxDim); };
  return f;
}

/// A static size (T, Tkv, B): absent means given at call time.
SpecField staticSizeField(std::string name, std::optional<int64_t> Spec::*m) {
  SpecField f;
  f.name = name;
  f.values = "integer, 1 to 16777216";
  f.defaultText = "run time";
  f.flag = "--static-" + name;
  f.flagForm = FlagForm::Value;
  f.parse = fromText([m](const std::string &v, Spec &s) -> std::string {
    int64_t x = 0;
    if (!parseInt(v, x))
      return badInteger(v);
    s.*m = x;
    return "";
  });
  f.print = [m](const Spec &s) -> std::optional<std::string> {
    if (!(s.*m))
      return std::nullopt;
    return str(*(s.*m));
  };
  f.key = [m, name](const Spec &s) {
    return s.*m ? name + "=" + str(*(s.*m)) : "";
  };
  f.namePart = [m, name](const Spec &s) {
    return s.*m ? "_" + name + str(*(s.*m)) : "";
  };
  f.namePlace = NamePlace::Tail;
  f.same = sameMember(m);
  f.rule = [m](const Spec &s) {
    return s.*m ? sizeBounds(*(s.*m), kMaxTokens) : "";
  };
  return f;
}

/// A true/false field printed only when true (ragged, lse).
SpecField switchField(std::string name, bool Spec::*m, std::string rule,
                      std::string keyPart, std::string namePart) {
  SpecField f;
  f.name = name;
  f.values = "`true`, `false`";
  f.defaultText = "`false`";
  f.flag = "--" + name;
  f.flagForm = FlagForm::Switch;
  f.parse = fromText([m, rule](const std::string &v, Spec &s) -> std::string {
    if (v != "true" && v != "false")
      return rule;
    s.*m = v == "true";
    return "";
  });
  f.print = [m](const Spec &s) -> std::optional<std::string> {
    if (!(s.*m))
      return std::nullopt;
    return std::string("true");
  };
  f.key = [m, keyPart](const Spec &s) { return s.*m ? keyPart : ""; };
  f.namePart = [m, namePart](const Spec &s) { return s.*m ? namePart : ""; };
  f.same = sameMember(m);
  return f;
}

/// Spellings of an enumerated field's values.
template <class E> using Spellings = std::vector<std::pair<std::string, E>>;

template <class E>
bool spelled(const Spellings<E> &names, const std::string &v, E &out) {
  for (const auto &[text, value] : names)
    if (text == v) {
      out = value;
      return true;
    }
  return false;
}

const Spellings<DType> kDTypeNames = {
    {"f32", DType::F32},   {"float32", DType::F32},
    {"bf16", DType::BF16}, {"bfloat16", DType::BF16},
    {"f16", DType::F16},   {"float16", DType::F16}};
const Spellings<KvType> kKvTypeNames = {
    {"f32", KvType::F32},   {"float32", KvType::F32},
    {"bf16", KvType::BF16}, {"bfloat16", KvType::BF16},
    {"f16", KvType::F16},   {"float16", KvType::F16},
    {"i8", KvType::I8},     {"int8", KvType::I8}};

/// A GPU target refused for a CPU-only feature.
std::string cpuOnly(const Spec &s, const std::string &what) {
  return what + " is built for CPU targets only; " + s.target.str() +
         " is a GPU target";
}

// ---- The rows ------------------------------------------------------------

SpecField opField() {
  SpecField f;
  f.name = "op";
  f.values = "`layer`, `sdpa`";
  f.defaultText = "`layer`";
  f.meaning = "full layer (projections, attention, output projection) or the "
              "attention core alone";
  f.flag = "--op";
  f.flagForm = FlagForm::Value;
  f.flagHelp = "layer (projections + attention, default) | sdpa";
  f.parse = fromText([](const std::string &v, Spec &s) -> std::string {
    if (v == "sdpa")
      s.op = Op::Sdpa;
    else if (v == "layer")
      s.op = Op::Layer;
    else
      return "unknown op; expected sdpa or layer";
    return "";
  });
  f.print = [](const Spec &s) { return std::string(toString(s.op)); };
  f.key = [](const Spec &s) { return std::string("op=") + toString(s.op); };
  f.keyAlways = true;
  f.namePart = [](const Spec &s) {
    return std::string(s.op == Op::Sdpa ? "_sdpa" : "");
  };
  f.same = sameMember(&Spec::op);
  return f;
}

/// A size every spec gives (d, h); the CLI's flag has its own default.
SpecField requiredSizeField(std::string name, int64_t Spec::*m,
                            std::string meaning, std::string flagDefault,
                            std::string missing) {
  SpecField f = sizeField(name, m);
  f.defaultText = "required";
  f.flagHelp = meaning + " (default " + flagDefault + ")";
  f.meaning = std::move(meaning);
  f.flagDefault = std::move(flagDefault);
  f.absent = [missing](Spec &) { return missing; };
  return f;
}

SpecField dField() {
  return requiredSizeField("d", &Spec::d, "model width", "4096",
                           "the model width d is required");
}

SpecField hField() {
  return requiredSizeField("h", &Spec::h, "query heads", "32",
                           "the number of query heads h is required");
}

SpecField kvField() {
  SpecField f = sizeField("kv", &Spec::n_kv);
  f.aliases = {"n_kv"};
  f.values = "integer, divides `h`";
  f.defaultText = "`h`";
  f.meaning = "key/value heads (GQA when `kv < h`, MQA when 1)";
  f.flagHelp = "key/value heads; h % kv == 0 (default: h)";
  f.absent = [](Spec &s) {
    s.n_kv = s.h; // plain multi-head attention
    return std::string();
  };
  f.rule = [](const Spec &s) -> std::string {
    if (s.n_kv > s.h)
      return "kv (" + str(s.n_kv) + ") must not exceed h (" + str(s.h) + ")";
    if (s.h % s.n_kv != 0)
      return "h (" + str(s.h) + ") must be divisible by kv (" + str(s.n_kv) +
             ")";
    return "";
  };
  return f;
}

/// h * width stays within kMaxDim (the merged heads' width).
std::string headsTimesWidth(const Spec &s, int64_t width, const char *what) {
  if (s.h * width > kMaxDim)
    return std::string("h * ") + what + " (" + str(s.h * width) +
           ") must be <= " + str(kMaxDim);
  return "";
}

SpecField dkField() {
  SpecField f = sizeField("dk", &Spec::d_k);
  f.aliases = {"d_k"};
  f.defaultText = "`d / h` (required when `h` does not divide `d`)";
  f.meaning = "query/key head width";
  f.flagHelp = "query/key head width (default: d / h)";
  f.absent = [](Spec &s) -> std::string {
    if (s.d == 0 || s.h <= 0) // d or h is missing or wrong: said there
      return "";
    if (s.d % s.h != 0)
      return "d (" + str(s.d) + ") is not divisible by h (" + str(s.h) +
             "): give the head width dk explicitly";
    s.d_k = s.d / s.h;
    return "";
  };
  f.rule = [](const Spec &s) { return headsTimesWidth(s, s.d_k, "dk"); };
  return f;
}

SpecField dvField() {
  SpecField f = sizeField("dv", &Spec::d_v);
  f.aliases = {"d_v"};
  f.defaultText = "`dk`";
  f.meaning = "value head width";
  f.flagHelp = "value head width (default: dk)";
  f.absent = [](Spec &s) {
    s.d_v = s.d_k;
    return std::string();
  };
  f.namePart = [](const Spec &s) {
    return s.d_v != s.d_k ? "_dv" + str(s.d_v) : std::string();
  };
  f.rule = [](const Spec &s) { return headsTimesWidth(s, s.d_v, "dv"); };
  return f;
}

SpecField maskField() {
  SpecField f;
  f.name = "mask";
  f.values = "mask expression";
  f.defaultText = "`none`";
  f.meaning = "which keys each query sees";
  f.flag = "--mask";
  f.flagForm = FlagForm::Value;
  f.flagHelp = "none | causal | window(W) | padding | sink(N), joined with & "
               "and | and grouped with ( ) (default none)";
  f.parse = [](const RawField &raw, Spec &s,
               std::vector<SpecDiagnostic> &diags) {
    parseMask(raw.value, raw.loc, s.mask, diags); // diagnostics in the text
    return std::string();
  };
  f.print = [](const Spec &s) { return s.mask.str(); };
  f.key = [](const Spec &s) { return "mask=" + s.mask.str(); };
  f.keyAlways = true;
  f.namePart = [](const Spec &s) { return "_" + s.mask.shortName(); };
  f.same = sameMember(&Spec::mask);
  f.rule = [](const Spec &s) -> std::string {
    for (const MaskClause &c : s.mask.anyOf)
      if (c.window < 0 || c.sink < 0)
        return "window and sink sizes must be > 0";
    return "";
  };
  return f;
}

SpecField dtypeField() {
  SpecField f;
  f.name = "dtype";
  f.values = "`f32`, `bf16`, `f16`";
  f.defaultText = "`f32`";
  f.meaning = "input, weight and output type; accumulation is always f32";
  f.flag = "--dtype";
  f.flagForm = FlagForm::Value;
  f.flagHelp = "f32 | bf16 | f16 (default f32; accumulates f32)";
  f.parse = fromText([](const std::string &v, Spec &s) -> std::string {
    if (!spelled(kDTypeNames, v, s.dtype))
      return "unknown dtype; expected f32, bf16 or f16";
    return "";
  });
  f.print = [](const Spec &s) { return std::string(toString(s.dtype)); };
  f.key = [](const Spec &s) {
    return std::string("dtype=") + toString(s.dtype);
  };
  f.keyAlways = true;
  f.namePart = [](const Spec &s) {
    return std::string("_") + toString(s.dtype);
  };
  f.same = sameMember(&Spec::dtype);
  return f;
}

SpecField kvDtypeField() {
  SpecField f;
  f.name = "kv_dtype";
  f.values = "`f32`, `bf16`, `f16`, `i8`";
  f.defaultText = "the `dtype`";
  f.meaning = "how K and V are stored (a KV cache); `i8` takes one f32 scale "
              "per (batch, token, kv head) row (`k_scale`, `v_scale`); `op = "
              "sdpa`, CPU targets, both backends, or a layer's cache "
              "(`kv_cache = contiguous`), which writes each new row's scale";
  f.flag = "--kv-dtype";
  f.flagForm = FlagForm::Value;
  f.flagHelp = "K/V storage: f32 | bf16 | f16 | i8 (default: dtype; i8 takes "
               "per-token scales; op = sdpa, or a layer's cache)";
  f.parse = fromText([](const std::string &v, Spec &s) -> std::string {
    KvType t = KvType::F32;
    if (!spelled(kKvTypeNames, v, t))
      return "unknown K/V dtype; expected f32, bf16, f16 or i8";
    // K/V stored as the dtype is the default: one spelling per spec.
    if (t == kvTypeOf(s.dtype))
      s.kv_dtype.reset();
    else
      s.kv_dtype = t;
    return "";
  });
  f.print = [](const Spec &s) -> std::optional<std::string> {
    if (!s.kv_dtype)
      return std::nullopt;
    return std::string(toString(*s.kv_dtype));
  };
  f.key = [](const Spec &s) {
    return s.kv_dtype ? std::string("kv_dtype=") + toString(*s.kv_dtype) : "";
  };
  f.namePart = [](const Spec &s) {
    return s.kv_dtype ? std::string("_kv") + toString(*s.kv_dtype) : "";
  };
  f.same = sameMember(&Spec::kv_dtype);
  f.rule = [](const Spec &s) -> std::string {
    if (s.kv_dtype && s.op != Op::Sdpa && !s.cachedLayer())
      return "a K/V storage type is for a cache: kv_dtype needs op = sdpa, or "
             "op = layer with kv_cache = contiguous (without a cache the layer "
             "computes K and V itself)";
    if (s.kv_dtype && s.target.isGpu())
      return cpuOnly(s, "a K/V storage type other than dtype");
    return "";
  };
  return f;
}

SpecField kvCacheField() {
  SpecField f;
  f.name = "kv_cache";
  f.values = "`none`, `contiguous`, `paged(BLOCK)` (1 <= BLOCK <= 65536)";
  f.defaultText = "`contiguous` (sdpa), `none` (layer)";
  f.meaning =
      "where K and V live: one `[B, T_kv, kv, dk]` cache, or a pool of "
      "`BLOCK`-token blocks `[num_blocks, BLOCK, kv, dk]` read through a "
      "per-sequence `block_table` with lengths in `kv_lens`; positions and "
      "the mask are per sequence (design.md §5, \"Paged K/V\"; `op = sdpa`, "
      "CPU targets, both backends, no static `Tkv`). `op = layer` with "
      "`contiguous` appends its tokens' K/V to the cache `k`, `v` (sequence "
      "b holding `kv_lens[b]` tokens after the call) and attends over all of "
      "them, one decoder step a call (design.md §5, \"The layer's KV "
      "cache\"; Halide, CPU targets); `none` attends over the call's own "
      "tokens";
  f.flag = "--kv-cache";
  f.flagForm = FlagForm::Value;
  f.flagHelp = "contiguous (sdpa's default) | paged(BLOCK): K/V in blocks of "
               "BLOCK tokens read through a block table, lengths in kv_lens "
               "(op = sdpa) | none (the layer's default): op = layer with "
               "contiguous appends to a K/V cache";
  f.parse = fromText([](const std::string &v, Spec &s) -> std::string {
    const std::string head = "paged(";
    int64_t block = 0;
    if (v == "none" || v == "contiguous") {
      s.kv_block = 0;
      s.layerCache = v == "contiguous";
    } else if (v.size() > head.size() + 1 &&
               v.compare(0, head.size(), head) == 0 && v.back() == ')' &&
               parseInt(v.substr(head.size(), v.size() - head.size() - 1),
                        block) &&
               block > 0) {
      s.kv_block = block;
    } else {
      return "expected none, contiguous or paged(BLOCK) with BLOCK tokens "
             "per block, an integer > 0";
    }
    return "";
  });
  // sdpa's contiguous cache and the layer's `none` are the defaults: each
  // prints nothing, so equal kernels print alike.
  auto text = [](const Spec &s) -> std::optional<std::string> {
    if (s.pagedKv())
      return "paged(" + str(s.kv_block) + ")";
    if (s.cachedLayer())
      return std::string("contiguous");
    return std::nullopt;
  };
  f.print = text;
  f.key = [text](const Spec &s) {
    const std::optional<std::string> t = text(s);
    return t ? "kv_cache=" + *t : "";
  };
  f.namePart = [](const Spec &s) -> std::string {
    if (s.pagedKv())
      return "_paged" + str(s.kv_block);
    return s.cachedLayer() ? "_kvc" : "";
  };
  f.same = [text](const Spec &a, const Spec &b) { return text(a) == text(b); };
  f.rule = [](const Spec &s) -> std::string {
    const int64_t kMaxKvBlock = int64_t(1) << 16;
    if (s.op == Op::Sdpa && s.layerCache)
      return "";
    if (s.cachedLayer()) {
      if (s.target.isGpu())
        return cpuOnly(s, "a KV cache in op = layer");
      if (s.backend != Backend::Halide)
        return "the layer's KV cache is built by the Halide backend: "
               "kv_cache = contiguous in op = layer needs backend = halide";
      if (s.T_kv)
        return "a layer's cache takes its capacity and lengths at call time "
               "(t_kv, kv_lens): drop the static Tkv";
      return "";
    }
    if (!s.pagedKv())
      return "";
    if (s.kv_block > kMaxKvBlock)
      return "BLOCK must be <= " + str(kMaxKvBlock) + " tokens per block";
    if (s.op != Op::Sdpa)
      return "a paged cache is read by the attention core: kv_cache = paged "
             "needs op = sdpa (op = layer appends to kv_cache = contiguous)";
    if (s.target.isGpu())
      return cpuOnly(s, "a paged K/V cache");
    if (s.T_kv)
      return "a paged cache takes its lengths at call time (kv_lens): drop "
             "the static Tkv";
    return "";
  };
  return f;
}

SpecField raggedField() {
  SpecField f = switchField(
      "ragged", &Spec::ragged,
      "expected true (queries packed with q_offsets, each sequence its own "
      "key length in kv_lens) or false",
      "ragged=1", "_ragged");
  f.meaning =
      "a ragged batch: queries (and `out`, `lse`) packed `[N_q, h, dk]` with "
      "`q_offsets [B+1]`, each sequence its own key length in `kv_lens` and "
      "its queries at its last positions; the runtime calls the kernel once "
      "per sequence (design.md §5, \"Ragged batches\"); `op = sdpa`, CPU "
      "targets, both backends, no static `T` (nor `Tkv` with a contiguous "
      "cache)";
  f.flagHelp = "a ragged batch: queries packed with q_offsets, each sequence "
               "its own key length (kv_lens); `run` draws seeded lengths up "
               "to --T / --Tkv (op = sdpa)";
  f.rule = [](const Spec &s) -> std::string {
    if (!s.ragged)
      return "";
    if (s.op != Op::Sdpa)
      return "a ragged batch packs the attention core's queries: ragged = "
             "true needs op = sdpa";
    if (s.target.isGpu())
      return "a ragged batch is split into sequences on the host for CPU "
             "targets only; " +
             s.target.str() + " is a GPU target";
    if (s.T)
      return "each sequence has its own query count (q_offsets): drop the "
             "static T";
    if (s.T_kv && !s.pagedKv())
      return "each sequence has its own key length (kv_lens): drop the "
             "static Tkv";
    return "";
  };
  return f;
}

SpecField biasField() {
  SpecField f =
      switchField("bias", &Spec::bias, "expected true or false", "", "_bias");
  f.meaning = "projection biases (`op = layer` only)";
  f.flagHelp = "projection biases (op = layer)";
  // Printed and keyed when false too: the first keys had it.
  f.print = [](const Spec &s) {
    return std::string(s.bias ? "true" : "false");
  };
  f.key = [](const Spec &s) {
    return std::string("bias=") + (s.bias ? "1" : "0");
  };
  f.keyAlways = true;
  f.rule = [](const Spec &s) -> std::string {
    if (s.bias && s.op != Op::Layer)
      return "biases belong to the projections: bias = true needs op = layer";
    return "";
  };
  return f;
}

SpecField positionsField() {
  SpecField f;
  f.name = "positions";
  f.values = "`implicit`, `runtime`";
  f.defaultText = "`implicit`";
  f.meaning = "where the rotary positions come from: `implicit`, token t of "
              "a call at position t; `runtime`, every call passes "
              "`positions [B, T]` (int32, each in [0, 2^24]) (`rope` only)";
  f.flag = "--positions";
  f.flagForm = FlagForm::Value;
  f.flagHelp = "implicit (default) | runtime: positions [B, T] int32 at call "
               "time (rope)";
  f.parse = fromText([](const std::string &v, Spec &s) -> std::string {
    if (v != "implicit" && v != "runtime")
      return "expected implicit (token t at position t) or runtime (a "
             "positions [B, T] int32 argument)";
    s.positionsAtRuntime = v == "runtime";
    return "";
  });
  f.print = [](const Spec &s) -> std::optional<std::string> {
    if (!s.positionsAtRuntime)
      return std::nullopt;
    return std::string("runtime");
  };
  f.key = [](const Spec &s) {
    return std::string(s.positionsAtRuntime ? "positions=runtime" : "");
  };
  f.namePart = [](const Spec &s) {
    return std::string(s.positionsAtRuntime ? "_prt" : "");
  };
  f.same = sameMember(&Spec::positionsAtRuntime);
  f.rule = [](const Spec &s) -> std::string {
    if (s.positionsAtRuntime && !s.rope.enabled())
      return "positions place the rotary positions: positions = runtime "
             "needs rope (and so op = layer)";
    return "";
  };
  return f;
}

SpecField scaleField() {
  SpecField f;
  f.name = "scale";
  f.values = "number in f32's normal range (1.2e-38 to 3.4e38), `default` or "
             "`runtime`";
  f.defaultText = "`1/sqrt(dk)`";
  f.meaning = "score scale; `runtime`: every call passes it (`scale`, one "
              "f32, finite and > 0)";
  f.flag = "--scale";
  f.flagForm = FlagForm::Value;
  f.flagHelp = "score scale (default 1/sqrt(dk)), or runtime: a call argument";
  f.parse = fromText([](const std::string &v, Spec &s) -> std::string {
    double x = 0;
    s.scaleAtRuntime = false;
    if (v == "default") {
      s.scale.reset();
    } else if (v == "runtime") {
      s.scale.reset();
      s.scaleAtRuntime = true;
    } else if (!parseNumber(v, x) && !numberSyntax(v)) {
      return "must be a number, 'default' (1/sqrt(dk)) or 'runtime' (a call "
             "argument)";
    } else if (!numberSyntax(v) || !parseNumber(v, x) || !f32Positive(x)) {
      return kF32PositiveRule;
    } else {
      s.scale = x;
    }
    return "";
  });
  f.print = [](const Spec &s) -> std::optional<std::string> {
    if (s.scaleAtRuntime)
      return std::string("runtime");
    if (s.scale)
      return formatDouble(*s.scale);
    return std::nullopt;
  };
  f.key = [](const Spec &s) {
    return "scale=" + (s.scaleAtRuntime ? std::string("runtime")
                                        : formatDouble(s.effectiveScale()));
  };
  f.keyAlways = true;
  // A non-default scale changes the math: the name tells kernels apart by
  // the key's hash.
  f.namePart = [](const Spec &s) {
    return (s.scale ? "_s" + s.hash().substr(0, 6) : std::string()) +
           (s.scaleAtRuntime ? "_srt" : "");
  };
  f.namePlace = NamePlace::Tail;
  f.same = [](const Spec &a, const Spec &b) {
    return a.scale == b.scale && a.scaleAtRuntime == b.scaleAtRuntime;
  };
  f.rule = [](const Spec &s) -> std::string {
    if (s.scale && s.scaleAtRuntime)
      return "scale = runtime takes the scale at call time: it has no "
             "compiled-in value";
    if (s.scale && (!(*s.scale > 0) || !std::isfinite(*s.scale)))
      return "must be a finite number > 0";
    return "";
  };
  return f;
}

SpecField qkNormField() {
  SpecField f;
  f.name = "qk_norm";
  f.values = "`none`, `head[(eps = E)]`, `projection[(eps = E)]`";
  f.defaultText = "`none`";
  f.meaning =
      "RMSNorm of q and k after the projections and before `rope` (`op = "
      "layer`): `head` per head with weights `q_norm [dk]`, `k_norm [dk]` "
      "(Qwen3, Gemma 3), `projection` over a token's whole projection with "
      "`q_norm [h*dk]`, `k_norm [kv*dk]` (OLMo 2); eps default 1e-6 "
      "(design.md §1, \"QK-norm\")";
  f.parse = fromText([](const std::string &v, Spec &s) -> std::string {
    return parseQkNorm(v, s.qk_norm);
  });
  f.flag = "--qk-norm";
  f.flagForm = FlagForm::Value;
  f.flagHelp = "none (default) | head[(eps = E)] | projection[(eps = E)]: "
               "RMSNorm of q and k (op = layer)";
  f.print = [](const Spec &s) -> std::optional<std::string> {
    if (!s.qk_norm.enabled())
      return std::nullopt;
    return s.qk_norm.str();
  };
  f.key = [](const Spec &s) {
    return s.qk_norm.enabled() ? "qk_norm=" + s.qk_norm.str() : "";
  };
  f.namePart = [](const Spec &s) -> std::string {
    if (!s.qk_norm.enabled())
      return "";
    const QkNormSpec defaults;
    return std::string("_qkn") +
           (s.qk_norm.scope == QkNormScope::Head ? "h" : "p") +
           (s.qk_norm.eps == defaults.eps
                ? ""
                : "_eps" + identifierText(formatDouble(s.qk_norm.eps)));
  };
  f.same = sameMember(&Spec::qk_norm);
  f.rule = [](const Spec &s) -> std::string {
    if (!s.qk_norm.enabled())
      return "";
    if (s.op != Op::Layer)
      return "QK-norm normalises the projected q and k: qk_norm needs op = "
             "layer (op = sdpa takes q and k already normalised)";
    if (s.target.isGpu())
      return cpuOnly(s, "qk_norm");
    return qkNormRule(s.qk_norm);
  };
  return f;
}

SpecField ropeField() {
  SpecField f;
  f.name = "rope";
  f.values = "`none`, `half(theta = T[, dim = R][, scaling = S])`, "
             "`interleaved(...)`; S: `linear(factor = F)`, `llama3(factor = "
             "F, low_freq_factor = L, high_freq_factor = H, "
             "original_max_position_embeddings = N)`, `yarn(factor = F, "
             "original_max_position_embeddings = N[, beta_fast = 32][, "
             "beta_slow = 1][, attention_factor = A])`";
  f.defaultText = "`none`";
  f.meaning =
      "rotary positions on q and k after the projections (`op = layer`): "
      "the first `dim` channels of each head (default `dk`) rotate in pairs "
      "(`half`: j with j + dim/2, Llama/GPT-NeoX; `interleaved`: 2j with "
      "2j+1, GPT-J) by token position times `theta^(-2j/dim)`, scaled as "
      "transformers does (design.md §1, \"Rotary positions\")";
  // The text is parsed by the rope's own grammar (compiler/spec/Rope.cpp).
  f.parse = fromText([](const std::string &v, Spec &s) -> std::string {
    return parseRope(v, s.rope);
  });
  f.flag = "--rope";
  f.flagForm = FlagForm::Value;
  f.flagHelp = "none (default) | half(theta = T[, dim = R][, scaling = S]) | "
               "interleaved(...): rotary positions (op = layer)";
  f.print = [](const Spec &s) -> std::optional<std::string> {
    if (!s.rope.enabled())
      return std::nullopt;
    return s.rope.str();
  };
  f.key = [](const Spec &s) {
    return s.rope.enabled() ? "rope=" + s.rope.str() : "";
  };
  f.namePart = [](const Spec &s) -> std::string {
    if (!s.rope.enabled())
      return "";
    return std::string("_rope") +
           (s.rope.pairing == RopePairing::Half ? "h" : "i") +
           s.hash().substr(0, 6);
  };
  f.same = sameMember(&Spec::rope);
  f.rule = [](const Spec &s) -> std::string {
    if (!s.rope.enabled())
      return "";
    if (s.op != Op::Layer)
      return "rotary positions are applied to the projected q and k: rope "
             "needs op = layer (op = sdpa takes q and k already rotated)";
    if (s.target.isGpu())
      return cpuOnly(s, "rope");
    return ropeRule(s.rope, s.d_k);
  };
  return f;
}

SpecField softcapField() {
  SpecField f;
  f.name = "softcap";
  f.values = "number `C` in f32's normal range, or `none`";
  f.defaultText = "`none`";
  f.meaning = "cap every scaled score: `C tanh(s / C)` (Gemma 2)";
  f.flag = "--softcap";
  f.flagForm = FlagForm::Value;
  f.flagHelp = "cap scores at C: C tanh(s / C) (Gemma 2)";
  f.parse = fromText([](const std::string &v, Spec &s) -> std::string {
    double x = 0;
    if (v == "none")
      s.softcap.reset();
    else if (!parseNumber(v, x) && !numberSyntax(v))
      return "must be a number C > 0 (scores become C tanh(s / C)) or none";
    else if (!parseNumber(v, x) || !f32Positive(x))
      return kF32PositiveRule;
    else
      s.softcap = x;
    return "";
  });
  f.print = [](const Spec &s) -> std::optional<std::string> {
    if (!s.softcap)
      return std::nullopt;
    return formatValue(*s.softcap);
  };
  f.key = [](const Spec &s) {
    return s.softcap ? "softcap=" + formatValue(*s.softcap) : "";
  };
  f.namePart = [](const Spec &s) {
    return s.softcap ? "_cap" + identifierText(formatValue(*s.softcap)) : "";
  };
  f.same = sameMember(&Spec::softcap);
  f.rule = [](const Spec &s) -> std::string {
    if (s.softcap && (!(*s.softcap > 0) || !std::isfinite(*s.softcap)))
      return "must be a finite number > 0";
    return "";
  };
  return f;
}

SpecField alibiField() {
  SpecField f;
  f.name = "alibi";
  f.values = "`true`, `runtime`, `false`";
  f.defaultText = "`false`";
  f.meaning = "ALiBi bias `slope_h (j - p(i))`: `true` the standard slopes "
              "for `h` heads (compiled in), `runtime` one f32 slope per head "
              "per call (`alibi_slopes`)";
  f.flag = "--alibi";
  f.flagForm = FlagForm::SwitchOrValue;
  f.flagImplied = "true";
  f.flagHelp = "ALiBi biases: the standard slopes for h heads, or "
               "--alibi=runtime (alibi_slopes [h] per call)";
  f.parse = fromText([](const std::string &v, Spec &s) -> std::string {
    static const Spellings<AlibiSlopes> names = {
        {"false", AlibiSlopes::None},
        {"none", AlibiSlopes::None},
        {"true", AlibiSlopes::Standard},
        {"standard", AlibiSlopes::Standard},
        {"runtime", AlibiSlopes::Runtime}};
    if (!spelled(names, v, s.alibi))
      return "expected true (the standard slopes for h heads), runtime "
             "(alibi_slopes [h] passed at call time) or false";
    return "";
  });
  f.print = [](const Spec &s) -> std::optional<std::string> {
    if (s.alibi == AlibiSlopes::None)
      return std::nullopt;
    return std::string(toString(s.alibi));
  };
  f.key = [](const Spec &s) {
    return s.alibi != AlibiSlopes::None
               ? std::string("alibi=") + toString(s.alibi)
               : "";
  };
  f.namePart = [](const Spec &s) {
    return std::string(s.alibi == AlibiSlopes::Standard  ? "_alibi"
                       : s.alibi == AlibiSlopes::Runtime ? "_alibirt"
                                                         : "");
  };
  f.same = sameMember(&Spec::alibi);
  return f;
}

SpecField sinksField() {
  SpecField f;
  f.name = "sinks";
  f.values = "`learned`, `none`";
  f.defaultText = "`none`";
  f.meaning = "one f32 sink logit per head per call (`sinks`), joining every "
              "row's softmax denominator (gpt-oss)";
  f.flag = "--sinks";
  f.flagForm = FlagForm::Value;
  f.flagHelp = "learned: one f32 sink logit per head at call time (gpt-oss)";
  f.parse = fromText([](const std::string &v, Spec &s) -> std::string {
    if (v == "learned")
      s.sinks = true;
    else if (v == "none" || v == "false")
      s.sinks = false;
    else
      return "expected learned (one f32 logit per head, passed at call time) "
             "or none";
    return "";
  });
  f.print = [](const Spec &s) -> std::optional<std::string> {
    if (!s.sinks)
      return std::nullopt;
    return std::string("learned");
  };
  f.key = [](const Spec &s) {
    return std::string(s.sinks ? "sinks=learned" : "");
  };
  f.namePart = [](const Spec &s) {
    return std::string(s.sinks ? "_sinks" : "");
  };
  f.same = sameMember(&Spec::sinks);
  return f;
}

SpecField lseField() {
  SpecField f = switchField("lse", &Spec::lse,
                            "expected true (also write each row's "
                            "log-sum-exp, lse [B, T, h]) or false",
                            "lse=1", "_lse");
  f.meaning = "also write each row's log-sum-exp, `lse [B, T, h]` (f32; CPU "
              "targets and backend `cuda`)";
  f.flagHelp = "also write each row's log-sum-exp, lse [B, T, h]";
  f.rule = [](const Spec &s) -> std::string {
    return s.lse && s.target.isGpu() && s.backend != Backend::Cuda
               ? cpuOnly(s, "the log-sum-exp output") +
                     " (backend = cuda writes it on the GPU)"
               : "";
  };
  return f;
}

SpecField targetField() {
  SpecField f;
  f.name = "target";
  f.values = "`host`, `avx2`, `avx512`, `avx512_bf16`, `avx512_amx`, `neon`, "
             "`cuda`, `cuda_smXX`, `cuda_sm90a`, `opencl`";
  f.defaultText = "`host`";
  f.meaning = "where the kernel runs (`host` = the best this CPU supports)";
  f.flag = "--target";
  f.flagForm = FlagForm::Value;
  f.flagHelp =
      "host (default) | avx2 | avx512 | avx512_bf16 | avx512_amx | neon | "
      "cuda[_smXX] | opencl";
  f.parse = fromText([](const std::string &v, Spec &s) -> std::string {
    if (!parseTarget(v, s.target))
      return "unknown target; expected host, avx2, avx512, avx512_bf16, "
             "avx512_amx, neon, cuda, cuda_smXX (e.g. cuda_sm86), cuda_sm90a "
             "or "
             "opencl";
    return "";
  });
  f.print = [](const Spec &s) { return s.target.str(); };
  f.same = sameMember(&Spec::target);
  f.cmakeArgument = false; // TARGETS: one kernel per target
  f.rule = [](const Spec &s) -> std::string {
    if (s.target.kind == TargetKind::Cuda &&
        (s.target.cudaCapability < 30 || s.target.cudaCapability > 120))
      return "CUDA capability must be between sm_30 and sm_120";
    if (s.target.cudaArchSpecific && s.target.cudaCapability != 90)
      return "the architecture-specific form (suffix a) is sm_90a only";
    return "";
  };
  return f;
}

SpecField backendField() {
  SpecField f;
  f.name = "backend";
  f.values = "`halide`, `mlir`, `cuda` (tensor cores, `cuda_sm80` and "
             "later)";
  f.defaultText = "`halide`";
  f.meaning = "which compiler backend generates it";
  f.flag = "--backend";
  f.flagForm = FlagForm::Value;
  f.flagHelp = "halide (default) | mlir | cuda";
  f.parse = fromText([](const std::string &v, Spec &s) -> std::string {
    if (v == "halide")
      s.backend = Backend::Halide;
    else if (v == "mlir")
      s.backend = Backend::Mlir;
    else if (v == "cuda")
      s.backend = Backend::Cuda;
    else
      return "unknown backend; expected halide, mlir or cuda";
    return "";
  });
  f.print = [](const Spec &s) { return std::string(toString(s.backend)); };
  f.same = sameMember(&Spec::backend);
  f.cmakeArgument = false; // BACKEND: also for SPECS files
  return f;
}

SpecField tField() {
  SpecField f = staticSizeField("T", &Spec::T);
  f.aliases = {"T_q"};
  f.values = "integer, 1 to 16777216 (2^24)";
  f.meaning = "fix the query length";
  f.flagHelp = "fix the query length in the kernel";
  return f;
}

SpecField tkvField() {
  SpecField f = staticSizeField("Tkv", &Spec::T_kv);
  f.aliases = {"T_kv"};
  f.meaning = "fix the key/value length (`op = layer`: must equal `T`)";
  f.flagHelp = "fix the key/value length in the kernel";
  f.rule = [size = f.rule](const Spec &s) -> std::string {
    if (std::string why = size(s); !why.empty())
      return why;
    if (s.op == Op::Layer && s.T && s.T_kv && *s.T != *s.T_kv)
      return "op = layer attends over its own input: Tkv must equal T (" +
             str(*s.T) + ")";
    return "";
  };
  return f;
}

SpecField bField() {
  SpecField f = staticSizeField("B", &Spec::B);
  f.meaning = "fix the batch";
  f.flagHelp = "fix the batch in the kernel";
  return f;
}

} // namespace

const std::vector<SpecField> &specFields() {
  static const std::vector<SpecField> fields = {
      opField(),      dField(),       hField(),         kvField(),
      dkField(),      dvField(),      maskField(),      dtypeField(),
      kvDtypeField(), kvCacheField(), raggedField(),    biasField(),
      qkNormField(),  ropeField(),    positionsField(), scaleField(),
      softcapField(), alibiField(),   sinksField(),     lseField(),
      targetField(),  backendField(), tField(),         tkvField(),
      bField()};
  return fields;
}

const SpecField *findSpecField(const std::string &spelling) {
  for (const SpecField &f : specFields()) {
    if (f.name == spelling)
      return &f;
    for (const std::string &a : f.aliases)
      if (a == spelling)
        return &f;
  }
  return nullptr;
}

std::string specFieldsMarkdown() {
  std::ostringstream os;
  os << "| field | values | default | meaning |\n|---|---|---|---|\n";
  for (const SpecField &f : specFields()) {
    os << "| `" << f.name << "`";
    for (const std::string &a : f.aliases)
      os << " (`" << a << "`)";
    os << " | " << f.values << " | " << f.defaultText << " | " << f.meaning
       << " |\n";
  }
  return os.str();
}

std::string specFieldsCMake() {
  std::string values, switches;
  for (const SpecField &f : specFields()) {
    if (!f.cmakeArgument)
      continue;
    std::string arg;
    for (char c : f.name)
      arg += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    std::string &to = f.flagForm == FlagForm::Switch ? switches : values;
    to += "\n  " + arg + ":" + f.name + ":" + f.flag;
  }
  return "# Generated by `mhagen help fields --cmake` from the spec fields "
         "(compiler/spec/SpecFields.cpp).\n"
         "# Value arguments: ARGUMENT:spec_field:--flag.\n"
         "set(_MHAGEN_VALUE_FIELDS" +
         values +
         ")\n"
         "# Switches (no value): spec_field = true when given.\n"
         "set(_MHAGEN_OPTION_FIELDS" +
         switches + ")\n";
}

} // namespace mhagen
