#include "mhagen/spec/ScoreModifiers.h"

#include <cmath>

namespace mhagen {

std::vector<double> standardAlibiSlopes(int64_t h) {
  std::vector<double> slopes;
  if (h <= 0)
    return slopes;
  int64_t n = 1;
  while (n * 2 <= h)
    n *= 2;
  for (int64_t k = 0; k < n; ++k)
    slopes.push_back(std::exp2(-8.0 * static_cast<double>(k + 1) / n));
  // Heads beyond the power of two: the odd-numbered slopes of 2n heads.
  for (int64_t m = 0; static_cast<int64_t>(slopes.size()) < h; ++m)
    slopes.push_back(std::exp2(-4.0 * static_cast<double>(2 * m + 1) / n));
  return slopes;
}

} // namespace mhagen
