// The spec language (*.mha files) and the command-line flags both produce
// RawSpecs (field -> text, with source locations); buildSpec() turns a
// RawSpec into a validated AttentionSpec. Both routes therefore share every
// default, conversion and error message. The grammar is in
// docs/spec-language.md.
#ifndef MHAGEN_SPEC_SPECPARSER_H
#define MHAGEN_SPEC_SPECPARSER_H

#include "mhagen/spec/AttentionSpec.h"

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace mhagen {

struct SourceLoc {
  std::string file; ///< file name, or "<command line>"
  int line = 0;     ///< 1-based; 0 when not from a file
  int col = 0;      ///< 1-based; 0 when not from a file
  std::string str() const;
};

/// One rejected field: where, which field, what value, which rule.
struct SpecDiagnostic {
  SourceLoc loc;
  std::string field;
  std::string value;
  std::string rule;
  /// "file:line:col: error: field 'kv' = '5': h (32) must be divisible ..."
  std::string message() const;
};

class SpecError : public std::runtime_error {
public:
  explicit SpecError(std::vector<SpecDiagnostic> diags);
  const std::vector<SpecDiagnostic> &diagnostics() const { return diags_; }

private:
  std::vector<SpecDiagnostic> diags_;
};

struct RawField {
  std::string value;
  SourceLoc loc; ///< location of the value's first character
};

/// A spec as written, before defaults and validation.
struct RawSpec {
  std::string name;
  SourceLoc loc;
  std::map<std::string, RawField> fields; ///< keyed by canonical field name
};

/// Canonical field names in print order.
const std::vector<std::string> &specFieldNames();
/// Maps an accepted spelling (e.g. "n_kv", "d_k") to its canonical field
/// name ("kv", "dk"); returns "" for an unknown field.
std::string canonicalFieldName(const std::string &spelling);

/// Parses spec-language text into raw specs. Throws SpecError on syntax
/// errors (unknown field, duplicate field or spec, missing brace ...).
std::vector<RawSpec> parseSpecText(const std::string &text,
                                   const std::string &fileName);

/// Applies defaults (kv = h, dk = d/h, dv = dk, ...), converts every field
/// and validates the result. Throws SpecError listing every problem.
AttentionSpec buildSpec(const RawSpec &raw);

/// parseSpecText + buildSpec for each spec, with `overrides` replacing
/// those fields in every spec; throws SpecError listing every problem.
std::vector<AttentionSpec>
parseSpecs(const std::string &text, const std::string &fileName,
           const std::map<std::string, RawField> &overrides = {});
/// Every spec of every *.mha file, as parseSpecs; a file that cannot be
/// read or holds no spec is an error. Throws SpecError listing every
/// problem of every file.
std::vector<AttentionSpec>
parseSpecFiles(const std::vector<std::string> &paths,
               const std::map<std::string, RawField> &overrides = {});

/// Semantic rules on a converted spec (h % kv == 0, sizes > 0, ...). Each
/// diagnostic names the field, its value and the rule; locations are
/// filled in by buildSpec from the RawSpec.
std::vector<SpecDiagnostic> validateSpec(const AttentionSpec &spec);

/// Parses a mask expression ("causal & window(256) & padding"). On error
/// appends a diagnostic whose column points into the expression.
bool parseMask(const std::string &text, const SourceLoc &loc, MaskSpec &out,
               std::vector<SpecDiagnostic> &diags);
/// Parses a target name (host, avx2, avx512, avx512_bf16, cuda, cuda_sm86,
/// opencl).
bool parseTarget(const std::string &text, Target &out);

/// Several specs as one spec-language text (canonical blocks, blank line
/// between).
std::string printSpecs(const std::vector<AttentionSpec> &specs);

} // namespace mhagen

#endif
