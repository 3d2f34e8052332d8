// Seeded test data shared by the unit tests.
#ifndef MHAGEN_TEST_UNIT_RANDOMDATA_H
#define MHAGEN_TEST_UNIT_RANDOMDATA_H

#include <cstdint>
#include <random>
#include <vector>

namespace mhagen::test {

/// n values uniform in [lo, hi), the same for the same seed.
inline std::vector<float> randomVec(size_t n, uint32_t seed, float lo = -1,
                                    float hi = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto &x : v)
    x = u(rng);
  return v;
}

} // namespace mhagen::test

#endif
