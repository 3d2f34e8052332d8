// Merging partial attention results by their log-sum-exp (runtime.h,
// "Partial results"; docs/design.md §1, "Logsumexp").
#include "RuntimeInternal.h"

#include "mhagen/runtime.h"

#include <cmath>
#include <limits>

extern "C" int mhagen_merge_attention(int64_t rows, int64_t width,
                                      const float *out_a, const float *lse_a,
                                      const float *out_b, const float *lse_b,
                                      float *out, float *lse) {
  using mhagen::rt::fail;
  if (!out_a || !lse_a || !out_b || !lse_b || !out || !lse)
    return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                "mhagen_merge_attention: every pointer must be non-NULL");
  int64_t total = 0;
  if (rows < 0 || width < 1 || __builtin_mul_overflow(rows, width, &total))
    return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                "mhagen_merge_attention: rows must be >= 0 and width >= 1, "
                "rows * width must not overflow (got rows " +
                    std::to_string(rows) + ", width " + std::to_string(width) +
                    ")");
  // Checked first, so a refused call writes nothing. No kernel writes
  // +inf; NaN is a row that saw a non-finite input (docs/design.md §1).
  for (int64_t r = 0; r < rows; ++r)
    for (const float *l : {lse_a, lse_b})
      if (l[r] == std::numeric_limits<float>::infinity())
        return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                    std::string("mhagen_merge_attention: lse_") +
                        (l == lse_a ? "a" : "b") + "[" + std::to_string(r) +
                        "] is +inf; a log-sum-exp is finite, -inf for a "
                        "row that saw no key, or NaN for a row that saw a "
                        "non-finite input");
  const float negInf = -std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t r = 0; r < rows; ++r) {
    const float la = lse_a[r], lb = lse_b[r];
    if (std::isnan(la) || std::isnan(lb)) { // a part saw a non-finite input
      for (int64_t c = 0; c < width; ++c)
        out[r * width + c] = nan;
      lse[r] = nan;
      continue;
    }
    const float m = std::fmax(la, lb);
    if (m == negInf) { // no key in either part
      for (int64_t c = 0; c < width; ++c)
        out[r * width + c] = 0.0f;
      lse[r] = negInf;
      continue;
    }
    // Weights of the two parts, around the larger lse (e^-inf = 0).
    const double wa = std::exp(static_cast<double>(la) - m);
    const double wb = std::exp(static_cast<double>(lb) - m);
    const double sum = wa + wb;
    const float *xa = out_a + r * width, *xb = out_b + r * width;
    float *y = out + r * width;
    for (int64_t c = 0; c < width; ++c)
      y[c] = static_cast<float>((wa * xa[c] + wb * xb[c]) / sum);
    lse[r] = static_cast<float>(m + std::log(sum));
  }
  mhagen::rt::clearError();
  return MHAGEN_OK;
}
