#include "QkNorm.h"

namespace mhagen::hl {

using namespace Halide;

RmsNorm defineRmsNorm(const std::string &name, const AttentionSpec &s,
                      Func proj, Func weight, int64_t heads, Var n, Var t,
                      Var b) {
  const int width = static_cast<int>(s.qk_norm.groupWidth(heads, s.d_k));
  Var group("group");
  RmsNorm norm;
  norm.width = width;
  norm.channels = RDom(0, width, name + "_channel");
  // The mean square in f32, as transformers' RMSNorm computes it.
  norm.squares = Func(name + "_squares");
  norm.squares(group, t, b) = 0.0f;
  const Expr x = proj(group * width + norm.channels, t, b);
  norm.squares(group, t, b) += x * x;
  norm.invRms = Func(name + "_inv_rms");
  norm.invRms(group, t, b) =
      1.0f / sqrt(norm.squares(group, t, b) / static_cast<float>(width) +
                  static_cast<float>(s.qk_norm.eps));
  norm.normed = Func(name + "_normed");
  norm.normed(n, t, b) =
      proj(n, t, b) * norm.invRms(n / width, t, b) * weight(n % width);
  return norm;
}

} // namespace mhagen::hl
