// Helpers for callers that keep a K/V cache in a kv_dtype other than f32
// (runtime.h, "K/V caches"; docs/design.md §5).
#include "RuntimeInternal.h"

#include "mhagen/runtime.h"

#include <cmath>
#include <cstring>
#include <string>

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

namespace {

// f32 -> bf16 bits, round to nearest even (NaN stays a quiet NaN).
uint16_t toBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if (std::isnan(x))
    return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

// The compiler's IEEE binary16 type: GCC 12 has _Float16 in C++ on x86-64
// only; AArch64's __fp16 is the same format.
#if defined(__aarch64__)
using Half = __fp16;
#else
using Half = _Float16;
#endif

// f32 -> f16 bits, round to nearest even (overflow to Inf, subnormals
// kept).
uint16_t toF16(float x) {
  const Half h = static_cast<Half>(x);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}

} // namespace

extern "C" int mhagen_kv_append_paged(
    const float *src, int64_t n, int64_t first_pos, const int32_t *table,
    int64_t table_len, int64_t block, int64_t num_blocks, int64_t kv_heads,
    int64_t width, enum mhagen_kv_dtype kv_dtype, void *cache, float *scales) {
  using mhagen::rt::fail;
  const std::string fn = "mhagen_kv_append_paged: ";
  auto str = [](int64_t v) { return std::to_string(v); };
  if (!src || !table || !cache)
    return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                fn + "src, table and cache must be non-NULL");
  if (kv_dtype < MHAGEN_KV_F32 || kv_dtype > MHAGEN_KV_I8)
    return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                fn + "kv_dtype " + str(kv_dtype) + " is not a mhagen_kv_dtype");
  const bool i8 = kv_dtype == MHAGEN_KV_I8;
  if (i8 != (scales != nullptr))
    return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                fn + (i8 ? "kv_dtype i8 writes one scale per row: scales "
                           "must be non-NULL"
                         : "scales belong to kv_dtype i8: pass NULL"));
  if (n < 0 || first_pos < 0 || table_len < 0 || block < 1 || num_blocks < 1 ||
      kv_heads < 1 || width < 1)
    return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                fn +
                    "n, first_pos and table_len must be >= 0 and block, "
                    "num_blocks, kv_heads and width >= 1 (got n " +
                    str(n) + ", first_pos " + str(first_pos) + ", table_len " +
                    str(table_len) + ", block " + str(block) + ", num_blocks " +
                    str(num_blocks) + ", kv_heads " + str(kv_heads) +
                    ", width " + str(width) + ")");
  int64_t rowElems = 0, blockElems = 0, cacheElems = 0, end = 0, capacity = 0,
          srcElems = 0;
  if (__builtin_mul_overflow(kv_heads, width, &rowElems) ||
      __builtin_mul_overflow(rowElems, block, &blockElems) ||
      __builtin_mul_overflow(blockElems, num_blocks, &cacheElems) ||
      __builtin_mul_overflow(cacheElems, int64_t(4), &cacheElems) ||
      __builtin_add_overflow(first_pos, n, &end) ||
      __builtin_mul_overflow(table_len, block, &capacity) ||
      __builtin_mul_overflow(n, rowElems, &srcElems))
    return fail(MHAGEN_ERR_INVALID_ARGUMENT, fn + "sizes overflow");
  if (end > capacity)
    return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                fn + "tokens " + str(first_pos) + ".." + str(end - 1) +
                    " need " + str((end + block - 1) / block) +
                    " blocks but the table holds " + str(table_len));
  for (int64_t j = first_pos / block; n > 0 && j <= (end - 1) / block; ++j)
    if (table[j] < 0 || table[j] >= num_blocks)
      return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                  fn + "table[" + str(j) + "] = " + str(table[j]) +
                      " is outside [0, num_blocks = " + str(num_blocks) + ")");
  if (i8)
    for (int64_t i = 0; i < srcElems; ++i)
      if (!std::isfinite(src[i]))
        return fail(MHAGEN_ERR_INVALID_ARGUMENT,
                    fn + "src[" + str(i) + "] is not finite");
  for (int64_t r = 0; r < n; ++r) {
    const int64_t pos = first_pos + r;
    // The token's place: row `slot` of the cache, [num_blocks * block].
    const int64_t slot = int64_t(table[pos / block]) * block + pos % block;
    const float *x = src + r * rowElems;
    const int64_t at = slot * rowElems;
    switch (kv_dtype) {
    case MHAGEN_KV_F32:
      std::memcpy(static_cast<float *>(cache) + at, x, rowElems * 4);
      break;
    case MHAGEN_KV_BF16:
    case MHAGEN_KV_F16: {
      uint16_t *out = static_cast<uint16_t *>(cache) + at;
      for (int64_t c = 0; c < rowElems; ++c)
        out[c] = kv_dtype == MHAGEN_KV_BF16 ? toBf16(x[c]) : toF16(x[c]);
      break;
    }
    case MHAGEN_KV_I8:
      // One scale per (token, kv head) row, as the contiguous cache.
      if (int rc = mhagen_kv_quantize_i8(x, kv_heads, width,
                                         static_cast<int8_t *>(cache) + at,
                                         scales + slot * kv_heads);
          rc != MHAGEN_OK)
        return rc;
      break;
    }
  }
  mhagen::rt::clearError();
  return MHAGEN_OK;
}
