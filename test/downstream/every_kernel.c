/* Compiled as C11 with -Wall -Wextra -Werror -pedantic: every generated
 * header (op x dtype x backend, every_kernel.mha) must compile as C, and
 * each kernel is called through its header's convenience function and
 * checked against a reference written here from the definition of
 * attention. 16-bit kernels take inputs rounded to their dtype, so the
 * reference sees the same values; the tolerance covers the 16-bit output
 * and the rounding of P. */
#include "every_kernel_kernels.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

enum { T = 9, H = 4, KV = 2, D = 64, DK = 16, SDK = 16 };

typedef enum { F32, BF16, F16 } dtype;

static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
  return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* f32 -> f16 for the small normal values used here (|x| in [2^-14, 2]),
 * and zero; round to nearest even. */
static uint16_t to_f16(float f) {
  uint32_t u, sign, mant;
  int exp;
  memcpy(&u, &f, sizeof u);
  sign = (u >> 16) & 0x8000u;
  exp = (int)((u >> 23) & 0xffu) - 127 + 15;
  mant = u & 0x7fffffu;
  if (exp <= 0)
    return (uint16_t)sign; /* below the normal range: zero */
  {
    uint32_t half = ((uint32_t)exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u)))
      ++half;
    return (uint16_t)(sign | half);
  }
}

static float from_f16(uint16_t h) {
  int exp = (h >> 10) & 0x1f;
  float mant = (float)(h & 0x3ff);
  float v = exp == 0 ? ldexpf(mant, -24) : ldexpf(1024.0f + mant, exp - 25);
  return (h & 0x8000u) ? -v : v;
}

/* Rounds x to the dtype in place and writes its storage form to bits. */
static void store(float *x, uint16_t *bits, int n, dtype t) {
  int i;
  for (i = 0; i < n; ++i) {
    if (t == BF16) {
      bits[i] = to_bf16(x[i]);
      x[i] = from_bf16(bits[i]);
    } else if (t == F16) {
      bits[i] = to_f16(x[i]);
      x[i] = from_f16(bits[i]);
    }
  }
}

static float load(const void *out, int i, dtype t) {
  if (t == F32)
    return ((const float *)out)[i];
  if (t == BF16)
    return from_bf16(((const uint16_t *)out)[i]);
  return from_f16(((const uint16_t *)out)[i]);
}

static uint32_t rng_state = 12345u;
static float uniform(float scale) {
  rng_state = rng_state * 1664525u + 1013904223u;
  return scale * ((float)(rng_state >> 8) / 8388608.0f - 1.0f);
}

/* Causal GQA attention of one sequence: q [T, H, dk], k/v [T, KV, dk]. */
static void attention(const double *q, const double *k, const double *v, int dk,
                      double *out) {
  int hd, i, j, c;
  for (hd = 0; hd < H; ++hd) {
    int g = hd / (H / KV);
    for (i = 0; i < T; ++i) {
      double s[T], mx = -1e300, sum = 0;
      for (j = 0; j <= i; ++j) {
        double dot = 0;
        for (c = 0; c < dk; ++c)
          dot += q[(i * H + hd) * dk + c] * k[(j * KV + g) * dk + c];
        s[j] = dot / sqrt((double)dk);
        if (s[j] > mx)
          mx = s[j];
      }
      for (j = 0; j <= i; ++j)
        sum += (s[j] = exp(s[j] - mx));
      for (c = 0; c < dk; ++c) {
        double acc = 0;
        for (j = 0; j <= i; ++j)
          acc += s[j] / sum * v[(j * KV + g) * dk + c];
        out[(i * H + hd) * dk + c] = acc;
      }
    }
  }
}

/* y [rows, n] = x [rows, m] W [m, n] + b */
static void project(const double *x, int rows, int m, const float *w, int n,
                    const float *b, double *y) {
  int r, o, i;
  for (r = 0; r < rows; ++r)
    for (o = 0; o < n; ++o) {
      double acc = b[o];
      for (i = 0; i < m; ++i)
        acc += x[r * m + i] * w[i * n + o];
      y[r * n + o] = acc;
    }
}

static int report(const char *name, int rc, const void *out, const double *ref,
                  int n, dtype t) {
  double err = 0, tol = t == F32 ? 1e-4 : 3e-2;
  int i;
  if (rc != MHAGEN_OK) {
    printf("%s: rc %d: %s\n", name, rc, mhagen_last_error());
    return 1;
  }
  for (i = 0; i < n; ++i) {
    double e = fabs((double)load(out, i, t) - ref[i]);
    if (!(e <= err))
      err = e; /* NaN propagates */
  }
  printf("%s (C11 header call): max |err| %.3g\n", name, err);
  return !(err <= tol);
}

/* Inputs in f32 (rounded to the dtype) and their 16-bit storage. */
static float qf[T * H * SDK], kf[T * KV * SDK], vf[T * KV * SDK];
static uint16_t qb[T * H * SDK], kb[T * KV * SDK], vb[T * KV * SDK];
static float xf[T * D], wqf[D * H * DK], wkf[D * KV * DK], wvf[D * KV * DK],
    wof[H * DK * D], bqf[H * DK], bkf[KV * DK], bvf[KV * DK], bof[D];
static uint16_t xb[T * D], wqb[D * H * DK], wkb[D * KV * DK], wvb[D * KV * DK],
    wob[H * DK * D], bqb[H * DK], bkb[KV * DK], bvb[KV * DK], bob[D];
static float outf[T * D];
static uint16_t outb[T * D];

#define FILL(arr, scale)                                                       \
  do {                                                                         \
    int i_;                                                                    \
    for (i_ = 0; i_ < (int)(sizeof arr / sizeof arr[0]); ++i_)                 \
      arr[i_] = uniform(scale);                                                \
  } while (0)
#define STORE(f, b, t) store(f, b, (int)(sizeof f / sizeof f[0]), t)

/* The reference output of the sdpa inputs qf, kf, vf (as stored). */
static void reference_of_inputs(double *ref) {
  static double q[T * H * SDK], k[T * KV * SDK], v[T * KV * SDK];
  int i;
  for (i = 0; i < T * H * SDK; ++i)
    q[i] = qf[i];
  for (i = 0; i < T * KV * SDK; ++i) {
    k[i] = kf[i];
    v[i] = vf[i];
  }
  attention(q, k, v, SDK, ref);
}

static int check_sdpa(dtype t,
                      int (*f32)(const float *, const float *, const float *,
                                 float *, int64_t, int64_t, int64_t),
                      int (*b16)(const uint16_t *, const uint16_t *,
                                 const uint16_t *, uint16_t *, int64_t, int64_t,
                                 int64_t),
                      const char *name) {
  static double ref[T * H * SDK];
  int rc;
  FILL(qf, 1.0f);
  FILL(kf, 1.0f);
  FILL(vf, 1.0f);
  STORE(qf, qb, t);
  STORE(kf, kb, t);
  STORE(vf, vb, t);
  reference_of_inputs(ref);
  rc = t == F32 ? f32(qf, kf, vf, outf, 1, T, T)
                : b16(qb, kb, vb, outb, 1, T, T);
  return report(name, rc, t == F32 ? (void *)outf : (void *)outb, ref,
                T * H * SDK, t);
}

typedef int (*layer_f32_fn)(const float *, const float *, const float *,
                            const float *, const float *, const float *,
                            const float *, const float *, const float *,
                            float *, int64_t, int64_t);
typedef int (*layer_b16_fn)(const uint16_t *, const uint16_t *,
                            const uint16_t *, const uint16_t *,
                            const uint16_t *, const uint16_t *,
                            const uint16_t *, const uint16_t *,
                            const uint16_t *, uint16_t *, int64_t, int64_t);

static int check_layer(dtype t, layer_f32_fn f32, layer_b16_fn b16,
                       const char *name) {
  static double x[T * D], q[T * H * DK], k[T * KV * DK], v[T * KV * DK],
      o[T * H * DK], ref[T * D];
  const float ws = 0.125f; /* 1/sqrt(d) */
  int i, rc;
  FILL(xf, 1.0f);
  FILL(wqf, ws);
  FILL(wkf, ws);
  FILL(wvf, ws);
  FILL(wof, ws);
  FILL(bqf, 0.1f);
  FILL(bkf, 0.1f);
  FILL(bvf, 0.1f);
  FILL(bof, 0.1f);
  STORE(xf, xb, t);
  STORE(wqf, wqb, t);
  STORE(wkf, wkb, t);
  STORE(wvf, wvb, t);
  STORE(wof, wob, t);
  STORE(bqf, bqb, t);
  STORE(bkf, bkb, t);
  STORE(bvf, bvb, t);
  STORE(bof, bob, t);
  for (i = 0; i < T * D; ++i)
    x[i] = xf[i];
  project(x, T, D, wqf, H * DK, bqf, q);
  project(x, T, D, wkf, KV * DK, bkf, k);
  project(x, T, D, wvf, KV * DK, bvf, v);
  attention(q, k, v, DK, o);
  project(o, T, H * DK, wof, D, bof, ref);
  rc = t == F32 ? f32(xf, wqf, wkf, wvf, wof, bqf, bkf, bvf, bof, outf, 1, T)
                : b16(xb, wqb, wkb, wvb, wob, bqb, bkb, bvb, bob, outb, 1, T);
  return report(name, rc, t == F32 ? (void *)outf : (void *)outb, ref, T * D,
                t);
}

/* A paged cache: K and V appended by the runtime's helper into blocks of
 * 4 tokens in the order 4, 0, 2 of a pool of 5 (the other two stay NaN,
 * as slots no sequence wrote may), read by the kernel through the table. */
static int check_paged(void) {
  enum { BLK = 4, NBLK = 5, NTAB = (T + BLK - 1) / BLK };
  static const int32_t table[NTAB] = {4, 0, 2};
  static float kpool[NBLK * BLK * KV * SDK], vpool[NBLK * BLK * KV * SDK];
  static double ref[T * H * SDK];
  const int32_t lens[1] = {T};
  int i, rc;
  FILL(qf, 1.0f);
  FILL(kf, 1.0f);
  FILL(vf, 1.0f);
  for (i = 0; i < NBLK * BLK * KV * SDK; ++i)
    kpool[i] = vpool[i] = NAN;
  rc = mhagen_kv_append_paged(kf, T, 0, table, NTAB, BLK, NBLK, KV, SDK,
                              MHAGEN_KV_F32, kpool, NULL);
  if (rc == MHAGEN_OK)
    rc = mhagen_kv_append_paged(vf, T, 0, table, NTAB, BLK, NBLK, KV, SDK,
                                MHAGEN_KV_F32, vpool, NULL);
  if (rc != MHAGEN_OK)
    return report("ev_sdpa_paged (append)", rc, outf, ref, 0, F32);
  reference_of_inputs(ref);
  rc = ev_sdpa_paged_avx2_sdpa(qf, kpool, vpool, outf, 1, T, T, NBLK, lens,
                               table);
  return report("ev_sdpa_paged", rc, outf, ref, T * H * SDK, F32);
}

/* A ragged batch: sequence 0 has all T queries, sequence 1 only its last
 * R (rows T-R.. of the same attention, bottom-right), packed one after the
 * other; both read the same keys from their own rows of the cache. */
static int check_ragged(void) {
  enum { R = 4, ROWS = T + R, ROW = H * SDK, KVROW = KV * SDK };
  static float q2[ROWS * ROW], k2[2 * T * KVROW], v2[2 * T * KVROW],
      out2[ROWS * ROW];
  static double ref[T * ROW], want[ROWS * ROW];
  const int32_t lens[2] = {T, T}, offsets[3] = {0, T, T + R};
  int i, rc;
  FILL(qf, 1.0f);
  FILL(kf, 1.0f);
  FILL(vf, 1.0f);
  reference_of_inputs(ref);
  memcpy(q2, qf, sizeof qf);
  memcpy(q2 + T * ROW, qf + (T - R) * ROW, R * ROW * sizeof(float));
  for (i = 0; i < 2; ++i) {
    memcpy(k2 + i * T * KVROW, kf, sizeof kf);
    memcpy(v2 + i * T * KVROW, vf, sizeof vf);
  }
  for (i = 0; i < T * ROW; ++i)
    want[i] = ref[i];
  for (i = 0; i < R * ROW; ++i)
    want[T * ROW + i] = ref[(T - R) * ROW + i];
  rc = ev_sdpa_ragged_avx2_sdpa(q2, k2, v2, out2, 2, T, T, lens, offsets);
  return report("ev_sdpa_ragged", rc, out2, want, ROWS * ROW, F32);
}

int run_every_kernel_c(void) {
  int failures = 0;
  failures += check_sdpa(F32, ev_sdpa_f32_avx2_sdpa, NULL, "ev_sdpa_f32");
  failures += check_sdpa(BF16, NULL, ev_sdpa_bf16_avx2_sdpa, "ev_sdpa_bf16");
  failures += check_sdpa(F16, NULL, ev_sdpa_f16_avx2_sdpa, "ev_sdpa_f16");
  failures +=
      check_sdpa(F32, em_sdpa_f32_avx2_mlir_sdpa, NULL, "em_sdpa_f32 (mlir)");
  failures += check_sdpa(BF16, NULL, em_sdpa_bf16_avx2_mlir_sdpa,
                         "em_sdpa_bf16 (mlir)");
  failures +=
      check_sdpa(F16, NULL, em_sdpa_f16_avx2_mlir_sdpa, "em_sdpa_f16 (mlir)");
  failures += check_paged();
  failures += check_ragged();
  failures += check_layer(F32, ev_layer_f32_avx2_layer, NULL, "ev_layer_f32");
  failures +=
      check_layer(BF16, NULL, ev_layer_bf16_avx2_layer, "ev_layer_bf16");
  failures += check_layer(F16, NULL, ev_layer_f16_avx2_layer, "ev_layer_f16");
  failures += check_layer(F32, em_layer_f32_avx2_mlir_layer, NULL,
                          "em_layer_f32 (mlir)");
  failures += check_layer(BF16, NULL, em_layer_bf16_avx2_mlir_layer,
                          "em_layer_bf16 (mlir)");
  failures += check_layer(F16, NULL, em_layer_f16_avx2_mlir_layer,
                          "em_layer_f16 (mlir)");
  return failures;
}
