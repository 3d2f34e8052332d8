// Conversions between f32 and the 16-bit storage types (round to nearest
// even, as the kernels and the hardware do), used to prepare inputs and to
// read outputs of bf16/f16 kernels.
#ifndef MHAGEN_REFERENCE_NUMERICS_H
#define MHAGEN_REFERENCE_NUMERICS_H

#include <cstdint>
#include <cstring>

namespace mhagen {

inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t floatToBf16(float f) {
  uint32_t u = floatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) // NaN stays NaN
    return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16ToFloat(uint16_t b) { return bitsFloat(uint32_t(b) << 16); }

inline uint16_t floatToF16(float f) {
  uint32_t u = floatBits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t mag = u & 0x7fffffffu;
  if (mag > 0x7f800000u)
    return static_cast<uint16_t>(sign | 0x7e00u);
  if (mag >= 0x477ff000u) // rounds to >= 65520: infinity
    return static_cast<uint16_t>(sign | 0x7c00u);
  if (mag < 0x38800000u) {                  // subnormal or zero in f16
    float v = bitsFloat(mag) * 16777216.0f; // scale by 2^24, round to int
    uint32_t r = static_cast<uint32_t>(v);
    float frac = v - static_cast<float>(r);
    if (frac > 0.5f || (frac == 0.5f && (r & 1u)))
      ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t exp = (mag >> 23) - 112;
  uint32_t mant = mag & 0x7fffffu;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
    ++h;
  return static_cast<uint16_t>(sign | h);
}
inline float f16ToFloat(uint16_t hbits) {
  uint32_t sign = uint32_t(hbits & 0x8000u) << 16;
  uint32_t exp = (hbits >> 10) & 0x1fu;
  uint32_t mant = hbits & 0x3ffu;
  if (exp == 0) {
    float v = static_cast<float>(mant) / 16777216.0f; // 2^-24 units
    return sign ? -v : v;
  }
  if (exp == 31)
    return bitsFloat(sign | 0x7f800000u | (mant << 13));
  return bitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
}

inline float roundToBf16(float f) { return bf16ToFloat(floatToBf16(f)); }
inline float roundToF16(float f) { return f16ToFloat(floatToF16(f)); }

} // namespace mhagen

#endif
