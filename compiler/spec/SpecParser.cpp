#include "mhagen/spec/SpecParser.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

namespace mhagen {

// The largest token count a spec may name: static sizes, window(W) and
// sink(N). Kernels index tokens in 32 bits with room for sums of these,
// and the runtime refuses manifests past it (runtime/src/Manifest.cpp).
constexpr int64_t kMaxTokens = int64_t(1) << 24;

std::string SourceLoc::str() const {
  if (line <= 0)
    return file.empty() ? std::string("<command line>") : file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(col);
}

// Text as the message shows it: control bytes (a NUL would end the
// message where C strings are printed) written as \xHH; a rule keeps its
// line breaks.
static std::string printable(const std::string &value, bool keepLines) {
  std::string out;
  for (unsigned char c : value) {
    if ((c < 0x20 || c == 0x7f) && !(keepLines && (c == '\n' || c == '\t'))) {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string SpecDiagnostic::message() const {
  std::string m = loc.str() + ": error: ";
  if (!field.empty())
    m += "field '" + field + "' = '" + printable(value, false) + "': ";
  return m + printable(rule, true);
}

static std::string joinMessages(const std::vector<SpecDiagnostic> &diags) {
  std::string s;
  for (const auto &d : diags) {
    if (!s.empty())
      s += "\n";
    s += d.message();
  }
  return s;
}

SpecError::SpecError(std::vector<SpecDiagnostic> diags)
    : std::runtime_error(joinMessages(diags)), diags_(std::move(diags)) {}

const std::vector<std::string> &specFieldNames() {
  static const std::vector<std::string> names = {
      "op",      "d",       "h",        "kv",       "dk",     "dv",
      "mask",    "dtype",   "kv_dtype", "kv_cache", "ragged", "bias",
      "scale",   "softcap", "alibi",    "sinks",    "lse",    "target",
      "backend", "T",       "Tkv",      "B"};
  return names;
}

std::string canonicalFieldName(const std::string &s) {
  static const std::map<std::string, std::string> aliases = {{"n_kv", "kv"},
                                                             {"d_k", "dk"},
                                                             {"d_v", "dv"},
                                                             {"T_kv", "Tkv"},
                                                             {"T_q", "T"}};
  auto it = aliases.find(s);
  if (it != aliases.end())
    return it->second;
  for (const auto &n : specFieldNames())
    if (n == s)
      return n;
  return "";
}

static std::string knownFieldList() {
  std::string s;
  for (const auto &n : specFieldNames())
    s += (s.empty() ? "" : ", ") + n;
  return s;
}

// ---------------------------------------------------------------------------
// Spec-language text -> RawSpecs.
namespace {

class Scanner {
public:
  Scanner(const std::string &text, const std::string &file)
      : text_(text), file_(file) {}

  // Skips blanks, newlines and comments ('#' or '//' to end of line).
  void skipSpaceAndComments() {
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (c == '#' || (c == '/' && peek(1) == '/')) {
        while (pos_ < text_.size() && text_[pos_] != '\n')
          advance();
      } else if (std::isspace(static_cast<unsigned char>(c))) {
        advance();
      } else {
        break;
      }
    }
  }

  // Skips blanks and comments but stops at a newline.
  void skipBlanks() {
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (c == '\n')
        break;
      if (c == '#' || (c == '/' && peek(1) == '/')) {
        while (pos_ < text_.size() && text_[pos_] != '\n')
          advance();
      } else if (std::isspace(static_cast<unsigned char>(c))) {
        advance();
      } else {
        break;
      }
    }
  }

  bool atEnd() const { return pos_ >= text_.size(); }
  char cur() const { return atEnd() ? '\0' : text_[pos_]; }
  char peek(size_t k) const {
    return pos_ + k < text_.size() ? text_[pos_ + k] : '\0';
  }
  void advance() {
    if (atEnd())
      return;
    if (text_[pos_] == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    ++pos_;
  }
  SourceLoc loc() const { return SourceLoc{file_, line_, col_}; }

  /// What stands at the current position, for "expected X, found Y":
  /// a character in quotes, or for anything outside printable ASCII its
  /// code point (decoded from UTF-8) so a stray non-ASCII character is
  /// named instead of printed as half a byte sequence.
  std::string describeCur() const {
    unsigned char c = static_cast<unsigned char>(cur());
    if (atEnd())
      return "end of file";
    if (c == '\n')
      return "end of line";
    char hex[64];
    if (c < 0x80) {
      if (std::isprint(c))
        return std::string("'") + static_cast<char>(c) + "'";
      std::snprintf(hex, sizeof hex, "control character U+%04X", c);
      return hex;
    }
    int len = (c & 0xe0) == 0xc0   ? 2
              : (c & 0xf0) == 0xe0 ? 3
              : (c & 0xf8) == 0xf0 ? 4
                                   : 0;
    uint32_t cp = len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
    bool valid = len > 0 && pos_ + len <= text_.size();
    for (int i = 1; valid && i < len; ++i) {
      unsigned char cc = static_cast<unsigned char>(text_[pos_ + i]);
      valid = (cc & 0xc0) == 0x80;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if (!valid) {
      std::snprintf(hex, sizeof hex, "byte 0x%02X (not UTF-8 text)", c);
      return hex;
    }
    std::snprintf(hex, sizeof hex, "non-ASCII character U+%04X '", cp);
    return hex + text_.substr(pos_, static_cast<size_t>(len)) +
           "' (spec files are ASCII)";
  }

  std::string identifier() {
    std::string s;
    if (!(std::isalpha(static_cast<unsigned char>(cur())) || cur() == '_'))
      return s;
    while (std::isalnum(static_cast<unsigned char>(cur())) || cur() == '_') {
      s += cur();
      advance();
    }
    return s;
  }

  // The text of a field value: up to end of line, ';', '}' or a comment.
  std::string valueText() {
    std::string s;
    while (!atEnd()) {
      char c = cur();
      if (c == '\n' || c == ';' || c == '}' || c == '#' ||
          (c == '/' && peek(1) == '/'))
        break;
      s += c;
      advance();
    }
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())))
      s.pop_back();
    return s;
  }

private:
  const std::string &text_;
  std::string file_;
  size_t pos_ = 0;
  int line_ = 1, col_ = 1;
};

} // namespace

std::vector<RawSpec> parseSpecText(const std::string &text,
                                   const std::string &fileName) {
  Scanner sc(text, fileName);
  std::vector<RawSpec> specs;
  std::set<std::string> names;
  auto fail = [&](const SourceLoc &loc, const std::string &rule) {
    throw SpecError({SpecDiagnostic{loc, "", "", rule}});
  };

  while (true) {
    sc.skipSpaceAndComments();
    if (sc.atEnd())
      break;
    SourceLoc kwLoc = sc.loc();
    std::string kw = sc.identifier();
    if (kw != "spec")
      fail(kwLoc, "expected 'spec NAME {', found " +
                      (kw.empty() ? sc.describeCur() : "'" + kw + "'"));
    sc.skipSpaceAndComments();
    RawSpec raw;
    raw.loc = sc.loc();
    raw.name = sc.identifier();
    if (raw.name.empty())
      fail(raw.loc, "expected a spec name (letters, digits, '_') after "
                    "'spec', found " +
                        sc.describeCur());
    if (!names.insert(raw.name).second)
      throw SpecError({SpecDiagnostic{raw.loc, "", raw.name,
                                      "spec '" + raw.name +
                                          "' is defined twice in this file"}});
    sc.skipSpaceAndComments();
    if (sc.cur() != '{')
      fail(sc.loc(), "expected '{' after 'spec " + raw.name + "', found " +
                         sc.describeCur());
    sc.advance();

    while (true) {
      sc.skipSpaceAndComments();
      if (sc.cur() == '}') {
        sc.advance();
        break;
      }
      if (sc.atEnd())
        fail(sc.loc(), "spec '" + raw.name + "' (line " +
                           std::to_string(raw.loc.line) +
                           ") is missing its closing '}'");
      if (sc.cur() == ';') {
        sc.advance();
        continue;
      }
      SourceLoc fieldLoc = sc.loc();
      std::string spelled = sc.identifier();
      if (spelled.empty())
        fail(fieldLoc,
             "expected a field name or '}', found " + sc.describeCur());
      std::string field = canonicalFieldName(spelled);
      if (field.empty())
        throw SpecError({SpecDiagnostic{fieldLoc, spelled, "",
                                        "unknown field; known fields: " +
                                            knownFieldList()}});
      sc.skipBlanks();
      if (sc.cur() != '=')
        fail(sc.loc(), "expected '=' after field '" + spelled + "', found " +
                           sc.describeCur());
      sc.advance();
      sc.skipBlanks();
      RawField value;
      value.loc = sc.loc();
      value.value = sc.valueText();
      if (value.value.empty())
        fail(value.loc, "field '" + spelled + "' has no value");
      if (raw.fields.count(field))
        throw SpecError({SpecDiagnostic{
            fieldLoc, spelled, value.value,
            "field given twice (first at line " +
                std::to_string(raw.fields[field].loc.line) + ")"}});
      raw.fields[field] = value;
    }
    specs.push_back(std::move(raw));
  }
  return specs;
}

// ---------------------------------------------------------------------------
// Field conversions.

static bool parseInt(const std::string &s, int64_t &out) {
  if (s.empty())
    return false;
  size_t i = (s[0] == '+') ? 1 : 0;
  if (i == s.size())
    return false;
  int64_t v = 0;
  for (; i < s.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(s[i])))
      return false;
    if (v > (INT64_MAX - 9) / 10)
      return false;
    v = v * 10 + (s[i] - '0');
  }
  out = v;
  return true;
}

static bool parseNumber(const std::string &s, double &out) {
  if (s.empty())
    return false;
  errno = 0;
  char *end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || end != s.c_str() + s.size())
    return false;
  out = v;
  return true;
}

// Whether `s` is written as a number, in range or not (1e400 is).
static bool numberSyntax(const std::string &s) {
  char *end = nullptr;
  std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size();
}

// Kernels hold scale and softcap as f32: a value must be a positive normal
// f32, or the kernel would compute with infinity or zero.
static const char *kF32PositiveRule =
    "must be a finite number > 0 that f32 holds (1.2e-38 to 3.4e38)";
static bool f32Positive(double v) {
  return v >= std::numeric_limits<float>::min() &&
         v <= std::numeric_limits<float>::max();
}

bool parseTarget(const std::string &s, Target &out) {
  Target t;
  if (s == "host")
    t.kind = TargetKind::Host;
  else if (s == "avx2")
    t.kind = TargetKind::Avx2;
  else if (s == "avx512")
    t.kind = TargetKind::Avx512;
  else if (s == "avx512_bf16")
    t.kind = TargetKind::Avx512Bf16;
  else if (s == "opencl")
    t.kind = TargetKind::OpenCL;
  else if (s == "cuda") {
    t.kind = TargetKind::Cuda;
    t.cudaCapability = 86;
  } else if (s.rfind("cuda_sm", 0) == 0 || s.rfind("cuda_sm_", 0) == 0) {
    std::string num = s.substr(s[7] == '_' ? 8 : 7);
    int64_t cap = 0;
    if (!parseInt(num, cap))
      return false;
    t.kind = TargetKind::Cuda;
    t.cudaCapability = static_cast<int>(cap);
  } else {
    return false;
  }
  out = t;
  return true;
}

// The mask grammar (docs/design.md §2, "Masks"):
//   expr   := conj ('|' conj)*
//   conj   := factor ('&' factor)*
//   factor := term | '(' expr ')'
//   term   := none | causal | padding | window(W) | sink(N)
// Each expression is kept as a union of conjunctions (MaskSpec::anyOf):
// `&` distributes over `|`, so `causal & (window(W) | sink(N))` becomes
// `window(W) | causal & sink(N)`.
namespace {
class MaskParser {
public:
  MaskParser(const std::string &text, const SourceLoc &loc,
             std::vector<SpecDiagnostic> &diags)
      : text_(text), loc_(loc), diags_(diags) {}

  bool parse(MaskSpec &out) {
    std::vector<MaskClause> e;
    if (!expr(e, 0))
      return false;
    skip();
    if (i_ < text_.size())
      return errorAt(i_, std::string("expected '&' or '|' between mask "
                                     "terms, found '") +
                             text_[i_] + "'");
    if (sawNone_ && terms_ > 1)
      return errorAt(0, "'none' cannot be combined with other mask terms");
    MaskSpec m;
    m.anyOf = e;
    m.normalize();
    if (m.anyOf.size() > static_cast<size_t>(MaskSpec::kMaxMaskClauses))
      return errorAt(
          0, "the mask expands to " + std::to_string(m.anyOf.size()) +
                 " alternatives joined by '|' (after '&' is "
                 "distributed over '|'); at most " +
                 std::to_string(MaskSpec::kMaxMaskClauses) + " are supported");
    out = m;
    return true;
  }

private:
  const std::string &text_;
  const SourceLoc &loc_;
  std::vector<SpecDiagnostic> &diags_;
  size_t i_ = 0;
  int terms_ = 0;
  bool sawNone_ = false;
  // Bounds the recursion on hostile input such as "((((((...".
  static constexpr int kMaxDepth = 16;
  // Bounds the distributed form while it is built (the normalised result
  // is checked against kMaxMaskClauses).
  static constexpr size_t kMaxRawClauses = 64;

  bool errorAt(size_t at, const std::string &rule) {
    SourceLoc l = loc_;
    if (l.line > 0)
      l.col += static_cast<int>(at);
    diags_.push_back(SpecDiagnostic{l, "mask", text_, rule});
    return false;
  }
  void skip() {
    while (i_ < text_.size() &&
           std::isspace(static_cast<unsigned char>(text_[i_])))
      ++i_;
  }
  bool peek(char c) {
    skip();
    return i_ < text_.size() && text_[i_] == c;
  }

  bool expr(std::vector<MaskClause> &out, int depth) {
    if (depth > kMaxDepth)
      return errorAt(i_, "mask nests parentheses deeper than " +
                             std::to_string(kMaxDepth));
    std::vector<MaskClause> all;
    while (true) {
      std::vector<MaskClause> c;
      if (!conj(c, depth))
        return false;
      all.insert(all.end(), c.begin(), c.end());
      if (all.size() > kMaxRawClauses)
        return errorAt(i_, "mask has too many alternatives");
      if (!peek('|'))
        break;
      ++i_;
    }
    out = all;
    return true;
  }

  bool conj(std::vector<MaskClause> &out, int depth) {
    std::vector<MaskClause> acc{MaskClause{}}; // `none`: the unit of &
    while (true) {
      std::vector<MaskClause> f;
      size_t start = i_;
      if (!factor(f, depth))
        return false;
      std::vector<MaskClause> next;
      for (const MaskClause &a : acc)
        for (const MaskClause &b : f) {
          MaskClause c;
          if (!andClauses(a, b, c, start))
            return false;
          next.push_back(c);
        }
      if (next.size() > kMaxRawClauses)
        return errorAt(start, "mask has too many alternatives");
      acc = next;
      if (!peek('&'))
        break;
      ++i_;
    }
    out = acc;
    return true;
  }

  bool andClauses(const MaskClause &a, const MaskClause &b, MaskClause &c,
                  size_t at) {
    if (a.window && b.window && a.window != b.window)
      return errorAt(at, "two different window sizes in one conjunction");
    if (a.sink && b.sink && a.sink != b.sink)
      return errorAt(at, "two different sink sizes in one conjunction");
    c.causal = a.causal || b.causal;
    c.window = a.window ? a.window : b.window;
    c.padding = a.padding || b.padding;
    c.sink = a.sink ? a.sink : b.sink;
    return true;
  }

  bool factor(std::vector<MaskClause> &out, int depth) {
    skip();
    if (i_ < text_.size() && text_[i_] == '(') {
      ++i_;
      if (!expr(out, depth + 1))
        return false;
      if (!peek(')'))
        return errorAt(i_, "missing ')' in the mask");
      ++i_;
      return true;
    }
    MaskClause c;
    if (!term(c))
      return false;
    out = {c};
    return true;
  }

  // window(W) / sink(N): a count > 0 in parentheses.
  bool count(const std::string &word, int64_t &n) {
    const std::string form = word + "(" + (word == "window" ? "W" : "N") + ")";
    skip();
    if (i_ >= text_.size() || text_[i_] != '(')
      return errorAt(i_, word + " needs a size: " + form + " with " +
                             form.substr(word.size() + 1, 1) + " > 0");
    ++i_;
    skip();
    size_t numStart = i_;
    std::string num;
    while (i_ < text_.size() && text_[i_] != ')' &&
           !std::isspace(static_cast<unsigned char>(text_[i_])))
      num += text_[i_++];
    skip();
    if (i_ >= text_.size() || text_[i_] != ')')
      return errorAt(i_, "missing ')' after " + word + " size");
    ++i_;
    const bool negative = num.size() > 1 && num[0] == '-';
    if (!parseInt(num, n) && !negative)
      return errorAt(numStart, word + " size '" + num +
                                   "' is not an integer; use " + form +
                                   " with " + form.substr(word.size() + 1, 1) +
                                   " > 0");
    if (negative || n <= 0)
      return errorAt(numStart, word + " size must be > 0 (got " + num + ")");
    if (n > kMaxTokens)
      return errorAt(numStart, word + " size must be <= " +
                                   std::to_string(kMaxTokens) + " (got " + num +
                                   ")");
    return true;
  }

  bool term(MaskClause &c) {
    static const char *termHelp = "expected a mask term: none, causal, "
                                  "window(W), padding, sink(N), or '('";
    skip();
    size_t start = i_;
    std::string word;
    while (i_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[i_])) ||
            text_[i_] == '_'))
      word += text_[i_++];
    if (word.empty())
      return errorAt(start, termHelp);
    ++terms_;
    if (word == "none") {
      sawNone_ = true;
      return true;
    }
    if (word == "causal") {
      c.causal = true;
      return true;
    }
    if (word == "padding") {
      c.padding = true;
      return true;
    }
    if (word == "window")
      return count(word, c.window);
    if (word == "sink")
      return count(word, c.sink);
    return errorAt(start, "unknown mask term '" + word + "'; " + termHelp);
  }
};
} // namespace

bool parseMask(const std::string &text, const SourceLoc &loc, MaskSpec &out,
               std::vector<SpecDiagnostic> &diags) {
  return MaskParser(text, loc, diags).parse(out);
}

// ---------------------------------------------------------------------------
// RawSpec -> AttentionSpec.

AttentionSpec buildSpec(const RawSpec &raw) {
  std::vector<SpecDiagnostic> diags;
  AttentionSpec s;
  s.name = raw.name;

  auto field = [&](const std::string &name) -> const RawField * {
    auto it = raw.fields.find(name);
    return it == raw.fields.end() ? nullptr : &it->second;
  };
  auto bad = [&](const std::string &name, const RawField &f,
                 const std::string &rule) {
    diags.push_back(SpecDiagnostic{f.loc, name, f.value, rule});
  };
  auto missing = [&](const std::string &name, const std::string &rule) {
    diags.push_back(SpecDiagnostic{raw.loc, name, "", rule});
  };
  // true/false fields; any other value is refused with `rule`.
  auto booleanField = [&](const std::string &name, bool &out,
                          const std::string &rule) {
    if (const RawField *f = field(name)) {
      if (f->value == "true" || f->value == "false")
        out = f->value == "true";
      else
        bad(name, *f, rule);
    }
  };
  // Integer fields: > 0 required; the rest of the rules come later.
  auto intField = [&](const std::string &name, int64_t &out) -> bool {
    const RawField *f = field(name);
    if (!f)
      return false;
    int64_t v = 0;
    if (!parseInt(f->value, v)) {
      std::string rule = "must be a positive integer";
      if (!f->value.empty() && f->value[0] == '-')
        rule = "must be > 0";
      bad(name, *f, rule);
      return false;
    }
    out = v;
    return true;
  };

  if (const RawField *f = field("op")) {
    if (f->value == "sdpa")
      s.op = Op::Sdpa;
    else if (f->value == "layer")
      s.op = Op::Layer;
    else
      bad("op", *f, "unknown op; expected sdpa or layer");
  }

  bool haveD = intField("d", s.d);
  bool haveH = intField("h", s.h);
  if (!field("d"))
    missing("d", "the model width d is required");
  if (!field("h"))
    missing("h", "the number of query heads h is required");

  if (!intField("kv", s.n_kv) && !field("kv") && haveH)
    s.n_kv = s.h; // kv defaults to h (plain multi-head attention)
  if (!intField("dk", s.d_k) && !field("dk") && haveD && haveH && s.h > 0) {
    if (s.d % s.h == 0) {
      s.d_k = s.d / s.h;
    } else {
      diags.push_back(SpecDiagnostic{
          raw.loc, "dk", "",
          "d (" + std::to_string(s.d) + ") is not divisible by h (" +
              std::to_string(s.h) + "): give the head width dk explicitly"});
    }
  }
  if (!intField("dv", s.d_v) && !field("dv"))
    s.d_v = s.d_k; // dv defaults to dk

  if (const RawField *f = field("mask"))
    parseMask(f->value, f->loc, s.mask, diags);

  if (const RawField *f = field("dtype")) {
    const std::string &v = f->value;
    if (v == "f32" || v == "float32")
      s.dtype = DType::F32;
    else if (v == "bf16" || v == "bfloat16")
      s.dtype = DType::BF16;
    else if (v == "f16" || v == "float16")
      s.dtype = DType::F16;
    else
      bad("dtype", *f, "unknown dtype; expected f32, bf16 or f16");
  }
  if (const RawField *f = field("kv_dtype")) {
    const std::string &v = f->value;
    if (v == "f32" || v == "float32")
      s.kv_dtype = KvType::F32;
    else if (v == "bf16" || v == "bfloat16")
      s.kv_dtype = KvType::BF16;
    else if (v == "f16" || v == "float16")
      s.kv_dtype = KvType::F16;
    else if (v == "i8" || v == "int8")
      s.kv_dtype = KvType::I8;
    else
      bad("kv_dtype", *f, "unknown K/V dtype; expected f32, bf16, f16 or i8");
    // K/V stored as the dtype is the default: one spelling per spec.
    if (s.kv_dtype && *s.kv_dtype == kvTypeOf(s.dtype))
      s.kv_dtype.reset();
  }
  if (const RawField *f = field("kv_cache")) {
    // contiguous, or paged(BLOCK): tokens per block.
    const std::string &v = f->value;
    const std::string head = "paged(";
    int64_t block = 0;
    if (v == "contiguous")
      s.kv_block = 0;
    else if (v.size() > head.size() + 1 &&
             v.compare(0, head.size(), head) == 0 && v.back() == ')' &&
             parseInt(v.substr(head.size(), v.size() - head.size() - 1),
                      block) &&
             block > 0)
      s.kv_block = block;
    else
      bad("kv_cache", *f,
          "expected contiguous or paged(BLOCK) with BLOCK tokens per block, "
          "an integer > 0");
  }
  booleanField("ragged", s.ragged,
               "expected true (queries packed with q_offsets, each sequence "
               "its own key length in kv_lens) or false");
  booleanField("bias", s.bias, "expected true or false");
  if (const RawField *f = field("scale")) {
    double v = 0;
    s.scaleAtRuntime = false;
    if (f->value == "default") {
      s.scale.reset();
    } else if (f->value == "runtime") {
      s.scale.reset();
      s.scaleAtRuntime = true;
    } else if (!parseNumber(f->value, v) && !numberSyntax(f->value)) {
      bad("scale", *f,
          "must be a number, 'default' (1/sqrt(dk)) or 'runtime' (a call "
          "argument)");
    } else if (!numberSyntax(f->value) || !parseNumber(f->value, v) ||
               !f32Positive(v)) {
      bad("scale", *f, kF32PositiveRule);
    } else {
      s.scale = v;
    }
  }
  if (const RawField *f = field("softcap")) {
    double v = 0;
    if (f->value == "none") {
      s.softcap.reset();
    } else if (!parseNumber(f->value, v) && !numberSyntax(f->value)) {
      bad("softcap", *f,
          "must be a number C > 0 (scores become C tanh(s / C)) or none");
    } else if (!parseNumber(f->value, v) || !f32Positive(v)) {
      bad("softcap", *f, kF32PositiveRule);
    } else {
      s.softcap = v;
    }
  }
  if (const RawField *f = field("alibi")) {
    const std::string &v = f->value;
    if (v == "false" || v == "none")
      s.alibi = AlibiSlopes::None;
    else if (v == "true" || v == "standard")
      s.alibi = AlibiSlopes::Standard;
    else if (v == "runtime")
      s.alibi = AlibiSlopes::Runtime;
    else
      bad("alibi", *f,
          "expected true (the standard slopes for h heads), runtime "
          "(alibi_slopes [h] passed at call time) or false");
  }
  if (const RawField *f = field("sinks")) {
    if (f->value == "learned")
      s.sinks = true;
    else if (f->value == "none" || f->value == "false")
      s.sinks = false;
    else
      bad("sinks", *f,
          "expected learned (one f32 logit per head, passed at call time) "
          "or none");
  }
  booleanField("lse", s.lse,
               "expected true (also write each row's log-sum-exp, lse [B, T, "
               "h]) or false");
  if (const RawField *f = field("target")) {
    if (!parseTarget(f->value, s.target))
      bad("target", *f,
          "unknown target; expected host, avx2, avx512, avx512_bf16, cuda, "
          "cuda_smXX (e.g. cuda_sm86) or opencl");
  }
  if (const RawField *f = field("backend")) {
    if (f->value == "halide")
      s.backend = Backend::Halide;
    else if (f->value == "mlir")
      s.backend = Backend::Mlir;
    else
      bad("backend", *f, "unknown backend; expected halide or mlir");
  }
  for (const char *name : {"T", "Tkv", "B"}) {
    int64_t v = 0;
    if (intField(name, v)) {
      if (std::string(name) == "T")
        s.T = v;
      else if (std::string(name) == "Tkv")
        s.T_kv = v;
      else
        s.B = v;
    }
  }

  // Semantic rules, reported at the location of the field they concern.
  if (diags.empty()) {
    for (SpecDiagnostic d : validateSpec(s)) {
      if (const RawField *f = field(d.field))
        d.loc = f->loc;
      else
        d.loc = raw.loc;
      diags.push_back(d);
    }
  }
  if (!diags.empty())
    throw SpecError(diags);
  if (s.name == s.derivedName())
    s.name.clear(); // the derived name is what an unnamed spec prints
  return s;
}

std::vector<SpecDiagnostic> validateSpec(const AttentionSpec &s) {
  std::vector<SpecDiagnostic> out;
  auto rule = [&](const std::string &field, const std::string &value,
                  const std::string &text) {
    out.push_back(SpecDiagnostic{SourceLoc{}, field, value, text});
  };
  auto str = [](int64_t v) { return std::to_string(v); };
  // Sizes are bounded so every index of every supported tensor fits int32
  // per dimension and the product of head count and width stays sane.
  const int64_t kMaxDim = 1 << 20;
  const int64_t kMaxKvBlock = 1 << 16;
  struct SizeField {
    const char *name;
    int64_t value;
  };
  for (SizeField f :
       {SizeField{"d", s.d}, SizeField{"h", s.h}, SizeField{"kv", s.n_kv},
        SizeField{"dk", s.d_k}, SizeField{"dv", s.d_v}}) {
    if (f.value <= 0)
      rule(f.name, str(f.value), "must be > 0");
    else if (f.value > kMaxDim)
      rule(f.name, str(f.value), "must be <= " + str(kMaxDim));
  }
  if (!out.empty())
    return out;
  if (s.n_kv > s.h)
    rule("kv", str(s.n_kv),
         "kv (" + str(s.n_kv) + ") must not exceed h (" + str(s.h) + ")");
  else if (s.h % s.n_kv != 0)
    rule("kv", str(s.n_kv),
         "h (" + str(s.h) + ") must be divisible by kv (" + str(s.n_kv) + ")");
  if (s.h * s.d_k > kMaxDim)
    rule("dk", str(s.d_k),
         "h * dk (" + str(s.h * s.d_k) + ") must be <= " + str(kMaxDim));
  if (s.h * s.d_v > kMaxDim)
    rule("dv", str(s.d_v),
         "h * dv (" + str(s.h * s.d_v) + ") must be <= " + str(kMaxDim));
  for (const MaskClause &c : s.mask.anyOf)
    if (c.window < 0 || c.sink < 0)
      rule("mask", s.mask.str(), "window and sink sizes must be > 0");
  if (s.bias && s.op != Op::Layer)
    rule("bias", "true",
         "biases belong to the projections: bias = true needs op = layer");
  if (s.kv_dtype && s.op != Op::Sdpa)
    rule("kv_dtype", toString(*s.kv_dtype),
         "a K/V storage type is for a cache read by the attention core: "
         "kv_dtype needs op = sdpa (op = layer computes K and V itself)");
  else if (s.kv_dtype && s.target.isGpu())
    rule("kv_dtype", toString(*s.kv_dtype),
         "a K/V storage type other than dtype is built for CPU targets "
         "only; " +
             s.target.str() + " is a GPU target");
  if (s.pagedKv()) {
    const std::string v = "paged(" + str(s.kv_block) + ")";
    if (s.kv_block > kMaxKvBlock)
      rule("kv_cache", v,
           "BLOCK must be <= " + str(kMaxKvBlock) + " tokens per block");
    else if (s.op != Op::Sdpa)
      rule("kv_cache", v,
           "a paged cache is read by the attention core: kv_cache = paged "
           "needs op = sdpa (op = layer computes K and V itself)");
    else if (s.target.isGpu())
      rule("kv_cache", v,
           "a paged K/V cache is built for CPU targets only; " +
               s.target.str() + " is a GPU target");
    else if (s.T_kv)
      rule("kv_cache", v,
           "a paged cache takes its lengths at call time (kv_lens): drop "
           "the static Tkv");
  }
  if (s.ragged) {
    if (s.op != Op::Sdpa)
      rule("ragged", "true",
           "a ragged batch packs the attention core's queries: ragged = "
           "true needs op = sdpa");
    else if (s.target.isGpu())
      rule("ragged", "true",
           "a ragged batch is split into sequences on the host for CPU "
           "targets only; " +
               s.target.str() + " is a GPU target");
    else if (s.T)
      rule("ragged", "true",
           "each sequence has its own query count (q_offsets): drop the "
           "static T");
    else if (s.T_kv && !s.pagedKv())
      rule("ragged", "true",
           "each sequence has its own key length (kv_lens): drop the "
           "static Tkv");
  }
  if (s.scale && (!(*s.scale > 0) || !std::isfinite(*s.scale)))
    rule("scale", std::to_string(*s.scale), "must be a finite number > 0");
  if (s.lse && s.target.isGpu())
    rule("lse", "true",
         "the log-sum-exp output is built for CPU targets only; " +
             s.target.str() + " is a GPU target");
  if (s.softcap && (!(*s.softcap > 0) || !std::isfinite(*s.softcap)))
    rule("softcap", std::to_string(*s.softcap), "must be a finite number > 0");
  if (s.target.kind == TargetKind::Cuda &&
      (s.target.cudaCapability < 30 || s.target.cudaCapability > 120))
    rule("target", s.target.str(),
         "CUDA capability must be between sm_30 and sm_120");
  struct OptField {
    const char *name;
    std::optional<int64_t> value;
  };
  for (OptField f :
       {OptField{"T", s.T}, OptField{"Tkv", s.T_kv}, OptField{"B", s.B}}) {
    if (f.value && *f.value <= 0)
      rule(f.name, str(*f.value), "must be > 0");
    else if (f.value && *f.value > kMaxTokens)
      rule(f.name, str(*f.value), "must be <= " + str(kMaxTokens));
  }
  if (s.op == Op::Layer && s.T && s.T_kv && *s.T != *s.T_kv)
    rule("Tkv", str(*s.T_kv),
         "op = layer attends over its own input: Tkv must equal T (" +
             str(*s.T) + ")");
  return out;
}

std::vector<AttentionSpec> parseSpecs(const std::string &text,
                                      const std::string &fileName) {
  std::vector<AttentionSpec> specs;
  std::vector<SpecDiagnostic> diags;
  for (const RawSpec &raw : parseSpecText(text, fileName)) {
    try {
      specs.push_back(buildSpec(raw));
    } catch (const SpecError &e) {
      diags.insert(diags.end(), e.diagnostics().begin(), e.diagnostics().end());
    }
  }
  if (!diags.empty())
    throw SpecError(diags);
  return specs;
}

std::vector<AttentionSpec> parseSpecFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw SpecError({SpecDiagnostic{SourceLoc{path, 0, 0}, "", "",
                                    "cannot read spec file"}});
  std::ostringstream ss;
  ss << in.rdbuf();
  return parseSpecs(ss.str(), path);
}

std::string printSpecs(const std::vector<AttentionSpec> &specs) {
  std::string out;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (i)
      out += "\n";
    out += specs[i].canonical();
  }
  return out;
}

} // namespace mhagen
