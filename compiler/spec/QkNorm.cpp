#include "mhagen/spec/QkNorm.h"

#include "SpecCall.h"
#include "SpecText.h"

namespace mhagen {

std::string QkNormSpec::str() const {
  switch (scope) {
  case QkNormScope::None:
    return "none";
  case QkNormScope::Head:
    return "head(eps = " + formatDouble(eps) + ")";
  case QkNormScope::Projection:
    return "projection(eps = " + formatDouble(eps) + ")";
  }
  return "none";
}

std::string parseQkNorm(const std::string &text, QkNormSpec &out) {
  const std::string t = trim(text);
  if (t == "none") {
    out = QkNormSpec{};
    return "";
  }
  // A bare scope takes the default eps.
  Call call;
  if (t.find('(') == std::string::npos)
    call.name = t;
  else if (std::string why = parseCall(t, call); !why.empty())
    return "expected none, head(eps = E) or projection(eps = E): " + why;
  QkNormSpec n;
  if (call.name == "head")
    n.scope = QkNormScope::Head;
  else if (call.name == "projection")
    n.scope = QkNormScope::Projection;
  else
    return "unknown scope '" + call.name +
           "' (expected head, one RMS per head as in Qwen3 and Gemma 3, or "
           "projection, one per token's whole projection as in OLMo 2)";
  if (std::string why = readArgs(call, {{"eps", &n.eps}}, {}); !why.empty())
    return why;
  out = n;
  return "";
}

std::string qkNormRule(const QkNormSpec &n) {
  if (n.enabled() && !f32Positive(n.eps))
    return "eps must be a positive normal f32 (1.2e-38 to 3.4e38): kernels "
           "add it in f32, and with eps = 0 a zero row divides by zero";
  return "";
}

} // namespace mhagen
