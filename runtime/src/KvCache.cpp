// Helpers for callers that keep a K/V cache in a kv_dtype other than f32
// (runtime.h, "K/V caches"; docs/design.md §5).
#include "RuntimeInternal.h"

#include "mhagen/runtime.h"

#include <cmath>

extern "C" int mhagen_kv_quantize_i8(const float *src, int64_t rows,
                                     int64_t width, int8_t *dst,
                                     float *scales) {
  using mhagen::rt::fail;
  if (!src || !dst || !scales)
    return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                "mhagen_kv_quantize_i8: src, dst and scales must be non-NULL");
  if (rows < 0 || width < 1)
    return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                "mhagen_kv_quantize_i8: rows must be >= 0 and width >= 1 "
                "(got rows " +
                    std::to_string(rows) + ", width " + std::to_string(width) +
                    ")");
  int64_t total = 0;
  if (__builtin_mul_overflow(rows, width, &total))
    return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                "mhagen_kv_quantize_i8: rows * width overflows");
  for (int64_t i = 0; i < total; ++i)
    if (!std::isfinite(src[i]))
      return fail(MHAGEN_ERR_INVALID_ARGUMENT, "mhagen_kv_quantize_i8: src[" +
                                                   std::to_string(i) +
                                                   "] is not finite");
  for (int64_t r = 0; r < rows; ++r) {
    const float *x = src + r * width;
    float amax = 0.0f;
    for (int64_t c = 0; c < width; ++c)
      amax = std::fmax(amax, std::fabs(x[c]));
    const float s = amax / 127.0f;
    // x / s with s = amax / 127 stays in [-127, 127] (|x| <= amax). In
    // double, so that 127 / amax stays finite for denormal rows too.
    const double inv = amax > 0.0f ? 127.0 / static_cast<double>(amax) : 0.0;
    for (int64_t c = 0; c < width; ++c)
      dst[r * width + c] = static_cast<int8_t>(
          std::fmax(-127.0, std::fmin(127.0, std::nearbyint(x[c] * inv))));
    scales[r] = s;
  }
  mhagen::rt::clearError();
  return MHAGEN_OK;
}
