#include "mhagen/templates/Templates.h"

#include <cstdio>
#include <stdexcept>

namespace mhagen {

const char *embeddedTemplate(const std::string &name); // generated

std::string templateText(const std::string &name) {
  const char *t = embeddedTemplate(name);
  if (!t)
    throw std::out_of_range("no embedded template named " + name);
  return t;
}

std::string fillTemplate(const std::string &text,
                         const std::map<std::string, std::string> &values) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == '@') {
      size_t end = text.find('@', i + 1);
      if (end != std::string::npos) {
        auto it = values.find(text.substr(i + 1, end - i - 1));
        if (it != values.end()) {
          out += it->second;
          i = end + 1;
          continue;
        }
      }
    }
    out += text[i++];
  }
  return out;
}

std::string cStringLiteral(const std::string &s) {
  std::string out = "\"";
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
    case '\\':
      out += "\\\\";
      break;
    case '"':
      out += "\\\"";
      break;
    case '\n':
      out += "\\n\"\n    \"";
      break;
    case '\t':
      out += "\\t";
      break;
    default:
      if (c < 0x20 || c >= 0x7f) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\%03o", c);
        out += buf;
      } else {
        out += ch;
      }
    }
  }
  return out + "\"";
}

} // namespace mhagen
