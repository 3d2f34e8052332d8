#include "SpecCall.h"

#include "SpecText.h"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace mhagen {

std::string trim(const std::string &s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a])))
    ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1])))
    --b;
  return s.substr(a, b - a);
}

std::string parseCall(const std::string &text, Call &out) {
  const std::string t = trim(text);
  const size_t open = t.find('(');
  if (open == std::string::npos || t.back() != ')')
    return "expected NAME(key = value, ...), got '" + t + "'";
  out.name = trim(t.substr(0, open));
  const std::string body = t.substr(open + 1, t.size() - open - 2);
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= body.size(); ++i) {
    const char c = i < body.size() ? body[i] : ',';
    if (c == '(')
      ++depth;
    else if (c == ')' && --depth < 0)
      return "unbalanced ')' in '" + t + "'";
    if (c != ',' || depth != 0)
      continue;
    const std::string arg = trim(body.substr(start, i - start));
    start = i + 1;
    if (arg.empty() && i == body.size() && out.args.empty())
      break; // NAME()
    const size_t eq = arg.find('=');
    if (eq == std::string::npos)
      return "expected key = value, got '" + arg + "' in " + out.name + "(...)";
    out.args.emplace_back(trim(arg.substr(0, eq)), trim(arg.substr(eq + 1)));
  }
  if (depth != 0)
    return "unbalanced '(' in '" + t + "'";
  return "";
}

std::string readArgs(const Call &call,
                     const std::map<std::string, double *> &known,
                     const std::vector<std::string> &required,
                     const std::string &skip) {
  std::vector<std::string> seen;
  for (const auto &[key, value] : call.args) {
    if (key == skip)
      continue;
    auto it = known.find(key);
    if (it == known.end()) {
      std::string list;
      for (const auto &k : known)
        list += (list.empty() ? "" : ", ") + k.first;
      return call.name + "(...): unknown argument '" + key + "' (expected " +
             list + ")";
    }
    if (std::find(seen.begin(), seen.end(), key) != seen.end())
      return call.name + "(...): '" + key + "' given twice";
    seen.push_back(key);
    if (!parseNumber(value, *it->second) || !std::isfinite(*it->second))
      return call.name + "(...): " + key + " must be a number, got '" + value +
             "'";
  }
  for (const std::string &r : required)
    if (std::find(seen.begin(), seen.end(), r) == seen.end())
      return call.name + "(...): " + r + " is required";
  return "";
}

} // namespace mhagen
