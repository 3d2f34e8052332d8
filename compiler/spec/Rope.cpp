#include "mhagen/spec/Rope.h"

#include "SpecCall.h"
#include "SpecText.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>

namespace mhagen {

namespace {

constexpr double kPi = 3.14159265358979323846;

std::string parseScaling(const std::string &text, RopeScaling &out) {
  Call call;
  if (std::string why = parseCall(text, call); !why.empty())
    return "scaling: " + why;
  RopeScaling s;
  double original = 0, attention = 0;
  bool hasAttention = false;
  for (const auto &a : call.args)
    hasAttention |= a.first == "attention_factor";
  std::string why;
  if (call.name == "linear") {
    s.kind = RopeScaling::Kind::Linear;
    why = readArgs(call, {{"factor", &s.factor}}, {"factor"});
  } else if (call.name == "llama3") {
    s.kind = RopeScaling::Kind::Llama3;
    why = readArgs(call,
                   {{"factor", &s.factor},
                    {"low_freq_factor", &s.lowFreqFactor},
                    {"high_freq_factor", &s.highFreqFactor},
                    {"original_max_position_embeddings", &original}},
                   {"factor", "low_freq_factor", "high_freq_factor",
                    "original_max_position_embeddings"});
  } else if (call.name == "yarn") {
    s.kind = RopeScaling::Kind::Yarn;
    why = readArgs(call,
                   {{"factor", &s.factor},
                    {"original_max_position_embeddings", &original},
                    {"beta_fast", &s.betaFast},
                    {"beta_slow", &s.betaSlow},
                    {"attention_factor", &attention}},
                   {"factor", "original_max_position_embeddings"});
  } else {
    return "scaling: unknown kind '" + call.name +
           "' (expected linear, llama3 or yarn)";
  }
  if (!why.empty())
    return "scaling = " + why;
  if (original != std::floor(original) || original < 0 ||
      original > static_cast<double>(kMaxTokens))
    return "scaling = " + call.name +
           "(...): original_max_position_embeddings must be a whole number "
           "of tokens in [1, " +
           std::to_string(kMaxTokens) + "]";
  s.originalMaxPositions = static_cast<int64_t>(original);
  if (hasAttention)
    s.attentionFactor = attention;
  out = s;
  return "";
}

std::string scalingText(const RopeScaling &s) {
  const std::string f = "factor = " + formatValue(s.factor);
  const std::string orig = "original_max_position_embeddings = " +
                           std::to_string(s.originalMaxPositions);
  switch (s.kind) {
  case RopeScaling::Kind::None:
    return "";
  case RopeScaling::Kind::Linear:
    return "linear(" + f + ")";
  case RopeScaling::Kind::Llama3:
    return "llama3(" + f +
           ", low_freq_factor = " + formatValue(s.lowFreqFactor) +
           ", high_freq_factor = " + formatValue(s.highFreqFactor) + ", " +
           orig + ")";
  case RopeScaling::Kind::Yarn:
    return "yarn(" + f + ", " + orig +
           ", beta_fast = " + formatValue(s.betaFast) +
           ", beta_slow = " + formatValue(s.betaSlow) +
           (s.attentionFactor
                ? ", attention_factor = " + formatValue(*s.attentionFactor)
                : std::string()) +
           ")";
  }
  return "";
}

// transformers' yarn helpers (find_correction_dim, linear_ramp_factor).
double correctionDim(double rotations, double dim, double base,
                     double maxPositions) {
  return dim * std::log(maxPositions / (rotations * 2 * kPi)) /
         (2 * std::log(base));
}

} // namespace

bool RopeScaling::operator==(const RopeScaling &o) const {
  return kind == o.kind && factor == o.factor &&
         lowFreqFactor == o.lowFreqFactor &&
         highFreqFactor == o.highFreqFactor &&
         originalMaxPositions == o.originalMaxPositions &&
         betaFast == o.betaFast && betaSlow == o.betaSlow &&
         attentionFactor == o.attentionFactor;
}

bool RopeSpec::operator==(const RopeSpec &o) const {
  if (pairing != o.pairing)
    return false;
  return !enabled() ||
         (theta == o.theta && dim == o.dim && scaling == o.scaling);
}

std::string RopeSpec::str() const {
  if (!enabled())
    return "none";
  std::string s = pairing == RopePairing::Half ? "half" : "interleaved";
  s += "(theta = " + formatValue(theta);
  if (dim > 0)
    s += ", dim = " + std::to_string(dim);
  if (scaling.kind != RopeScaling::Kind::None)
    s += ", scaling = " + scalingText(scaling);
  return s + ")";
}

std::string parseRope(const std::string &text, RopeSpec &out) {
  if (trim(text) == "none") {
    out = RopeSpec{};
    return "";
  }
  Call call;
  if (std::string why = parseCall(text, call); !why.empty())
    return "expected none, half(theta = T, ...) or interleaved(theta = T, "
           "...): " +
           why;
  RopeSpec r;
  if (call.name == "half")
    r.pairing = RopePairing::Half;
  else if (call.name == "interleaved")
    r.pairing = RopePairing::Interleaved;
  else
    return "unknown pairing '" + call.name +
           "' (expected half, the rotate_half of Llama and GPT-NeoX, or "
           "interleaved, GPT-J's)";
  double dim = 0;
  bool hasTheta = false, hasScaling = false;
  for (const auto &a : call.args) {
    hasTheta |= a.first == "theta";
    if (a.first != "scaling")
      continue;
    if (hasScaling)
      return call.name + "(...): 'scaling' given twice";
    hasScaling = true;
    if (std::string why = parseScaling(a.second, r.scaling); !why.empty())
      return why;
  }
  if (std::string why =
          readArgs(call, {{"theta", &r.theta}, {"dim", &dim}}, {}, "scaling");
      !why.empty())
    return why;
  if (!hasTheta)
    return call.name + "(...): theta is required (the frequency base: 10000 "
                       "for Llama 2, 500000 for Llama 3)";
  if (dim != std::floor(dim) || dim < 0 || dim > static_cast<double>(kMaxDim))
    return call.name + "(...): dim must be a whole number of channels";
  r.dim = static_cast<int64_t>(dim);
  out = r;
  return "";
}

std::string ropeRule(const RopeSpec &r, int64_t dk) {
  if (!r.enabled())
    return "";
  if (!(r.theta > 1))
    return "theta must be > 1";
  const int64_t dim = r.rotated(dk);
  if (dim < 2 || dim % 2 != 0 || dim > dk)
    return "rotates " + std::to_string(dim) +
           " channels of dk = " + std::to_string(dk) +
           "; the rotated channels (dim, default dk) must be even, at least 2 "
           "and at most dk";
  const RopeScaling &s = r.scaling;
  if (s.kind == RopeScaling::Kind::None)
    return "";
  if (!(s.factor >= 1))
    return "scaling factor must be >= 1 (it stretches the trained context)";
  if (s.kind == RopeScaling::Kind::Llama3 &&
      !(s.lowFreqFactor > 0 && s.highFreqFactor > s.lowFreqFactor))
    return "llama3 scaling needs 0 < low_freq_factor < high_freq_factor";
  if ((s.kind == RopeScaling::Kind::Llama3 ||
       s.kind == RopeScaling::Kind::Yarn) &&
      s.originalMaxPositions < 1)
    return "original_max_position_embeddings must be >= 1";
  if (s.kind == RopeScaling::Kind::Yarn &&
      !(s.betaFast > 0 && s.betaSlow > 0 &&
        (!s.attentionFactor || *s.attentionFactor > 0)))
    return "yarn needs beta_fast, beta_slow and attention_factor > 0";
  return "";
}

std::vector<double> ropeInverseFrequencies(const RopeSpec &r, int64_t dk) {
  const int64_t dim = r.rotated(dk);
  const int64_t half = dim / 2;
  std::vector<double> inv(static_cast<size_t>(half));
  for (int64_t j = 0; j < half; ++j)
    inv[j] = 1.0 / std::pow(r.theta, static_cast<double>(2 * j) / dim);
  const RopeScaling &s = r.scaling;
  switch (s.kind) {
  case RopeScaling::Kind::None:
    break;
  case RopeScaling::Kind::Linear:
    for (double &f : inv)
      f /= s.factor;
    break;
  case RopeScaling::Kind::Llama3: {
    // Long wavelengths are interpolated, short ones kept, the band between
    // blended (Llama 3.1).
    const double old = static_cast<double>(s.originalMaxPositions);
    const double lowWave = old / s.lowFreqFactor;
    const double highWave = old / s.highFreqFactor;
    for (double &f : inv) {
      const double wave = 2 * kPi / f;
      if (wave > lowWave) {
        f /= s.factor;
      } else if (!(wave < highWave)) {
        const double smooth = (old / wave - s.lowFreqFactor) /
                              (s.highFreqFactor - s.lowFreqFactor);
        f = (1 - smooth) * f / s.factor + smooth * f;
      }
    }
    break;
  }
  case RopeScaling::Kind::Yarn: {
    // Dimensions that rotate fewer than beta_slow times over the original
    // context are interpolated, those past beta_fast extrapolated, a linear
    // ramp between (truncated to whole dimensions, as transformers does).
    const double old = static_cast<double>(s.originalMaxPositions);
    double low = std::floor(correctionDim(s.betaFast, dim, r.theta, old));
    double high = std::ceil(correctionDim(s.betaSlow, dim, r.theta, old));
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(dim - 1));
    if (low == high)
      high += 0.001;
    for (int64_t j = 0; j < half; ++j) {
      const double ramp = std::clamp((j - low) / (high - low), 0.0, 1.0);
      const double extrapolation = 1 - ramp;
      const double base = inv[j];
      inv[j] = base / s.factor * (1 - extrapolation) + base * extrapolation;
    }
    break;
  }
  }
  return inv;
}

double ropeAttentionFactor(const RopeSpec &r) {
  const RopeScaling &s = r.scaling;
  if (s.kind != RopeScaling::Kind::Yarn)
    return 1;
  if (s.attentionFactor)
    return *s.attentionFactor;
  return s.factor <= 1 ? 1.0 : 0.1 * std::log(s.factor) + 1.0;
}

RopeLane ropeLane(const RopeSpec &r, int64_t dk, int64_t c) {
  const int64_t half = r.rotated(dk) / 2;
  if (r.pairing == RopePairing::Interleaved)
    return {c ^ 1, c / 2, c % 2 == 0 ? -1.0 : 1.0};
  return c < half ? RopeLane{c + half, c, -1.0}
                  : RopeLane{c - half, c - half, 1.0};
}

} // namespace mhagen
