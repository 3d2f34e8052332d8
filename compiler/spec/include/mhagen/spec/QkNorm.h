// QK-norm, the spec's `qk_norm` field: an RMSNorm of the projected queries
// and keys, with learned weights, before the rotary positions. `head`
// normalises each head's dk channels with weights q_norm [dk] and k_norm
// [dk] (Qwen3, Gemma 3); `projection` normalises a token's whole projection
// with q_norm [h*dk] and k_norm [kv*dk] (OLMo 2). docs/design.md §1,
// "QK-norm".
#ifndef MHAGEN_SPEC_QKNORM_H
#define MHAGEN_SPEC_QKNORM_H

#include <cstdint>
#include <string>

namespace mhagen {

/// Which channels one RMS is taken over.
enum class QkNormScope {
  None,      ///< no normalisation
  Head,      ///< each head's dk channels
  Projection ///< a token's whole projection (h*dk for q, kv*dk for k)
};

struct QkNormSpec {
  QkNormScope scope = QkNormScope::None;
  /// Added to the mean square before the root (transformers'
  /// rms_norm_eps); > 0 so that a zero row normalises to zero.
  double eps = 1e-6;

  bool enabled() const { return scope != QkNormScope::None; }
  /// Channels under one RMS: dk (head) or heads*dk (projection).
  int64_t groupWidth(int64_t heads, int64_t dk) const {
    return scope == QkNormScope::Head ? dk : heads * dk;
  }
  /// Canonical text: none, head(eps = 1e-06), projection(eps = 1e-05).
  std::string str() const;
  bool operator==(const QkNormSpec &o) const {
    return scope == o.scope && (!enabled() || eps == o.eps);
  }
  bool operator!=(const QkNormSpec &o) const { return !(*this == o); }
};

/// Parses `none`, `head[(eps = E)]` or `projection[(eps = E)]`. Returns ""
/// or what is wrong.
std::string parseQkNorm(const std::string &text, QkNormSpec &out);
/// The rule a parsed qk_norm breaks, or "".
std::string qkNormRule(const QkNormSpec &n);

} // namespace mhagen

#endif
