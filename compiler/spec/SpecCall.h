// The call form of spec values, `NAME(key = value, ...)`, shared by the
// fields that take one (rope, qk_norm; private to the spec library).
#ifndef MHAGEN_SPEC_SPECCALL_H
#define MHAGEN_SPEC_SPECCALL_H

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace mhagen {

/// NAME(key = value, ...) with values that are numbers or nested calls.
struct Call {
  std::string name;
  std::vector<std::pair<std::string, std::string>> args; ///< in order
};

/// `s` without leading and trailing white space.
std::string trim(const std::string &s);

/// Splits "NAME(ARGS)" into its name and its top-level `key = value`
/// arguments; "" or what is wrong.
std::string parseCall(const std::string &text, Call &out);

/// Reads the arguments of `call` into the named doubles; every key must be
/// known and finite, none given twice, and every required one given. A key
/// equal to `skip` is left to the caller. "" or what is wrong.
std::string readArgs(const Call &call,
                     const std::map<std::string, double *> &known,
                     const std::vector<std::string> &required,
                     const std::string &skip = "");

} // namespace mhagen

#endif
