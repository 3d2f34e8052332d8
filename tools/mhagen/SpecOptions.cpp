#include "SpecOptions.h"

#include "mhagen/spec/SpecFields.h"
#include "mhagen/spec/SpecParser.h"

namespace mhagen::cli {

void SpecOptions::addTo(CLI::App &app, bool allowFiles) {
  flags_.clear();
  flags_.reserve(specFields().size());
  for (const SpecField &field : specFields()) {
    if (field.flagForm == FlagForm::None)
      continue;
    flags_.push_back(Flag{field.name, "", false, false, nullptr});
    Flag &f = flags_.back();
    switch (field.flagForm) {
    case FlagForm::Value:
      f.opt = app.add_option(field.flag, f.value, field.flagHelp);
      break;
    case FlagForm::Switch: // --bias, --bias=false
      f.opt = app.add_flag(field.flag, f.on, field.flagHelp);
      f.isSwitch = true;
      break;
    case FlagForm::SwitchOrValue: // --alibi, --alibi=runtime
      f.opt = app.add_flag(field.flag + "{" + field.flagImplied + "}", f.value,
                           field.flagHelp);
      break;
    case FlagForm::None:
      break;
    }
    f.opt->group("Spec");
  }
  if (allowFiles)
    app.add_option("specs", files_, "spec files (*.mha)")
        ->check(CLI::ExistingFile);
}

bool SpecOptions::anyGiven() const {
  if (!files_.empty())
    return true;
  for (const Flag &f : flags_)
    if (f.opt->count() > 0)
      return true;
  return false;
}

std::vector<AttentionSpec> SpecOptions::build() const {
  const SourceLoc commandLine{"<command line>", 0, 0};
  std::map<std::string, RawField> given;
  for (const Flag &f : flags_)
    if (f.opt->count() > 0)
      given[f.field] = RawField{
          f.isSwitch ? (f.on ? "true" : "false") : f.value, commandLine};
  // Flags given together with files override those fields in every spec.
  if (!files_.empty())
    return parseSpecFiles(files_, given);

  // The flags' own defaults (--d 4096, --h 32, as --help says); every
  // other field takes the spec language's default.
  RawSpec raw;
  raw.loc = commandLine;
  for (const SpecField &field : specFields())
    if (!field.flagDefault.empty())
      raw.fields[field.name] =
          RawField{field.flagDefault, SourceLoc{"<default>", 0, 0}};
  for (const auto &[name, value] : given)
    raw.fields[name] = value;
  return {buildSpec(raw)};
}

} // namespace mhagen::cli
