// The fields of the spec language, each declared once (SpecFields.cpp):
// its name and spellings, how its text is parsed and printed, its part of
// the semantic key and of the kernel name, its equality, its rules, its
// command-line flag and its line of the reference. The parser, the
// printers, AttentionSpec's equality, validateSpec, the CLI's flags and the
// table in docs/spec-language.md (`mhagen help fields`) all read this
// table; adding a field means adding a row here and the kernel math.
#ifndef MHAGEN_SPEC_SPECFIELDS_H
#define MHAGEN_SPEC_SPECFIELDS_H

#include "mhagen/spec/AttentionSpec.h"
#include "mhagen/spec/SpecParser.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace mhagen {

/// How a field is given on the command line.
enum class FlagForm {
  None,         ///< no flag
  Value,        ///< --kv 8
  Switch,       ///< --bias (true), --bias=false
  SwitchOrValue ///< --alibi (its implied value), --alibi=runtime
};

/// Where a field's part of the kernel name goes: in field order, or after
/// every body part (the static sizes and a non-default scale end a name).
enum class NamePlace { Body, Tail };

struct SpecField {
  std::string name;                 ///< the canonical spelling: "kv"
  std::vector<std::string> aliases; ///< other accepted spellings: "n_kv"

  // The reference (docs/spec-language.md, `mhagen help fields`).
  std::string values;      ///< what the field accepts
  std::string defaultText; ///< its default
  std::string meaning;     ///< what it means

  // The command line.
  std::string flag; ///< "--kv-dtype"; "" when none
  FlagForm flagForm = FlagForm::None;
  std::string flagHelp;    ///< the flag's --help line
  std::string flagImplied; ///< SwitchOrValue: the bare flag's value
  /// The flag's value when neither a flag nor a file gives the field (the
  /// CLI's --d 4096, --h 32); "" when the spec language's default holds.
  std::string flagDefault;
  /// An argument of the CMake function mhagen_add_attention (the field's
  /// name in capitals); target and backend are its TARGETS and BACKEND.
  bool cmakeArgument = true;

  /// Sets the field from its text; returns "" or the rule the text breaks
  /// (a field whose text has inner positions, the mask, adds its own
  /// diagnostics and returns "").
  std::function<std::string(const RawField &, AttentionSpec &,
                            std::vector<SpecDiagnostic> &)>
      parse;
  /// The field is absent: sets its default (which may follow from fields
  /// declared before it) and returns "", or returns the rule (a required
  /// field). Unset: the member's initial value is the default.
  std::function<std::string(AttentionSpec &)> absent;
  /// Its value in the canonical text; nullopt: the canonical form omits it
  /// (at its default).
  std::function<std::optional<std::string>(const AttentionSpec &)> print;
  /// Its part of the semantic key ("kv=8"); "" when it has none here.
  std::function<std::string(const AttentionSpec &)> key;
  /// Its key part is in every key. Those parts come first, so a field
  /// added later, absent at its default, changes no existing key.
  bool keyAlways = false;
  /// Its part of the derived kernel name ("_kv8"); may be empty.
  std::function<std::string(const AttentionSpec &)> namePart;
  NamePlace namePlace = NamePlace::Body;
  /// Equal in two specs.
  std::function<bool(const AttentionSpec &, const AttentionSpec &)> same;
  /// Bounds that every other rule relies on (sizes > 0, ...): when one of
  /// these fails no other rule is checked. "" when met.
  std::function<std::string(const AttentionSpec &)> bounds;
  /// Its rules on the converted spec, given the bounds hold; "" when met.
  std::function<std::string(const AttentionSpec &)> rule;
};

/// Every field, in canonical (print) order.
const std::vector<SpecField> &specFields();
/// The field with this name or alias; null when there is none.
const SpecField *findSpecField(const std::string &spelling);
/// The reference table of docs/spec-language.md, in Markdown.
std::string specFieldsMarkdown();
/// The spec-field arguments of mhagen_add_attention (cmake/), as CMake
/// lists of ARGUMENT:field:--flag (the generated MhagenSpecFields.cmake).
std::string specFieldsCMake();

} // namespace mhagen

#endif
