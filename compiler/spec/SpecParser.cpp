#include "mhagen/spec/SpecParser.h"
#include "mhagen/spec/SpecFields.h"

#include "SpecText.h"

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
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const SpecField &f : specFields())
      out.push_back(f.name);
    return out;
  }();
  return names;
}

std::string canonicalFieldName(const std::string &s) {
  const SpecField *f = findSpecField(s);
  return f ? f->name : "";
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
  else if (s == "avx512_amx")
    t.kind = TargetKind::Avx512Amx;
  else if (s == "neon")
    t.kind = TargetKind::Neon;
  else if (s == "opencl")
    t.kind = TargetKind::OpenCL;
  else if (s == "cuda") {
    t.kind = TargetKind::Cuda;
    t.cudaCapability = 86;
  } else if (s.rfind("cuda_sm", 0) == 0 || s.rfind("cuda_sm_", 0) == 0) {
    std::string num = s.substr(s[7] == '_' ? 8 : 7);
    const bool archSpecific = !num.empty() && num.back() == 'a';
    if (archSpecific)
      num.pop_back();
    int64_t cap = 0;
    if (!parseInt(num, cap))
      return false;
    t.kind = TargetKind::Cuda;
    t.cudaCapability = static_cast<int>(cap);
    t.cudaArchSpecific = archSpecific;
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
      return errorAt(numStart,
                     word + " size must be <= " + std::to_string(kMaxTokens) +
                         " (got " + num + ")");
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
  // In field order, so a default may follow from the fields before it
  // (kv = h, dk = d / h, dv = dk).
  for (const SpecField &f : specFields()) {
    auto it = raw.fields.find(f.name);
    if (it != raw.fields.end()) {
      const RawField &given = it->second;
      if (std::string rule = f.parse(given, s, diags); !rule.empty())
        diags.push_back(SpecDiagnostic{given.loc, f.name, given.value, rule});
    } else if (f.absent) {
      if (std::string rule = f.absent(s); !rule.empty())
        diags.push_back(SpecDiagnostic{raw.loc, f.name, "", rule});
    }
  }
  // Semantic rules, reported at the location of the field they concern.
  if (diags.empty()) {
    for (SpecDiagnostic d : validateSpec(s)) {
      auto it = raw.fields.find(d.field);
      d.loc = it != raw.fields.end() ? it->second.loc : raw.loc;
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
  auto check = [&](const SpecField &f, const std::string &rule) {
    if (!rule.empty())
      out.push_back(
          SpecDiagnostic{SourceLoc{}, f.name, f.print(s).value_or(""), rule});
  };
  for (const SpecField &f : specFields())
    if (f.bounds)
      check(f, f.bounds(s));
  if (!out.empty())
    return out; // the other rules divide by and multiply these sizes
  for (const SpecField &f : specFields())
    if (f.rule)
      check(f, f.rule(s));
  return out;
}

std::vector<AttentionSpec>
parseSpecs(const std::string &text, const std::string &fileName,
           const std::map<std::string, RawField> &overrides) {
  std::vector<AttentionSpec> specs;
  std::vector<SpecDiagnostic> diags;
  for (RawSpec raw : parseSpecText(text, fileName)) {
    for (const auto &[field, value] : overrides)
      raw.fields[field] = value;
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

std::vector<AttentionSpec>
parseSpecFiles(const std::vector<std::string> &paths,
               const std::map<std::string, RawField> &overrides) {
  std::vector<AttentionSpec> specs;
  std::vector<SpecDiagnostic> diags;
  for (const std::string &path : paths) {
    try {
      std::ifstream in(path, std::ios::binary);
      if (!in)
        throw SpecError({SpecDiagnostic{SourceLoc{path, 0, 0}, "", "",
                                        "cannot read spec file"}});
      std::ostringstream text;
      text << in.rdbuf();
      std::vector<AttentionSpec> some = parseSpecs(text.str(), path, overrides);
      if (some.empty())
        throw SpecError({SpecDiagnostic{
            SourceLoc{path, 0, 0}, "", "",
            "the file holds no spec (write `spec NAME { d = ...; h = ... }`; "
            "see docs/spec-language.md)"}});
      specs.insert(specs.end(), some.begin(), some.end());
    } catch (const SpecError &e) {
      diags.insert(diags.end(), e.diagnostics().begin(), e.diagnostics().end());
    }
  }
  if (!diags.empty())
    throw SpecError(diags);
  return specs;
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
