#include "SpecText.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace mhagen {

bool parseInt(const std::string &s, int64_t &out) {
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

bool parseNumber(const std::string &s, double &out) {
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

bool numberSyntax(const std::string &s) {
  char *end = nullptr;
  std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size();
}

const char *const kF32PositiveRule =
    "must be a finite number > 0 that f32 holds (1.2e-38 to 3.4e38)";

bool f32Positive(double v) {
  return v >= std::numeric_limits<float>::min() &&
         v <= std::numeric_limits<float>::max();
}

std::string formatDouble(double v) {
  char buf[64];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v)
      break;
  }
  return buf;
}

std::string formatValue(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  return formatDouble(v);
}

std::string identifierText(const std::string &number) {
  std::string out;
  for (char c : number)
    if (std::isalnum(static_cast<unsigned char>(c)))
      out += c;
    else if (c == '.')
      out += 'p';
  return out;
}

} // namespace mhagen
