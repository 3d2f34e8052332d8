// Access to the embedded templates of generated files, and the one way
// they are filled: @NAME@ placeholders replaced by values.
#ifndef MHAGEN_TEMPLATES_TEMPLATES_H
#define MHAGEN_TEMPLATES_TEMPLATES_H

#include <map>
#include <string>

namespace mhagen {

/// The text of templates/<name> (e.g. "halide_wrapper.c.in"); throws
/// std::out_of_range for an unknown name.
std::string templateText(const std::string &name);

/// Replaces every @KEY@ whose KEY is in `values`; other @...@ are kept
/// (a later stage may fill them).
std::string fillTemplate(const std::string &text,
                         const std::map<std::string, std::string> &values);

/// `s` as a C string literal (escaped, split into lines).
std::string cStringLiteral(const std::string &s);

} // namespace mhagen

#endif
