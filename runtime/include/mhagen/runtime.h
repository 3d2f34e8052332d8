/* The mhagen runtime: finds, checks and calls generated attention kernels.
 *
 * Kernels arrive two ways: linked into the program (each generated object
 * registers itself before main) or from a shared library built with
 * `mhagen --shared` and opened with mhagen_load_library(). Every function
 * returns a status (abi.h) and leaves a message in mhagen_last_error(); none
 * aborts, none prints unless mhagen_set_verbose(1) was called.
 *
 * Thread safety: every function may be called from any thread. Lookups and
 * calls run concurrently; loading takes a lock. Kernels run on a shared
 * thread pool whose size mhagen_set_num_threads() sets (default: the number
 * of CPUs, or $MHAGEN_NUM_THREADS). */
#ifndef MHAGEN_RUNTIME_H
#define MHAGEN_RUNTIME_H

#include "mhagen/abi.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mhagen_kernel mhagen_kernel;   /* a registered kernel */
typedef struct mhagen_library mhagen_library; /* an opened shared library */

/** The calling thread's last error message ("" if none). */
const char *mhagen_last_error(void);
/** 1: print errors to stderr as they happen. */
void mhagen_set_verbose(int on);

/* ---- threads ---- */
/** The most threads a kernel call may use, for both backends: Halide's
 * thread pool holds at most 256 workers, and an OpenMP team (MLIR kernels)
 * of more threads than that only adds start-up time and memory. */
#define MHAGEN_MAX_THREADS 256
/** Threads used by every kernel call from now on, 1 <= n <=
 * MHAGEN_MAX_THREADS; anything else is MHAGEN_ERR_INVALID_ARGUMENT and
 * leaves the count as it was. */
int mhagen_set_num_threads(int n);
int mhagen_get_num_threads(void);

/* ---- CPU features ---- */
/** 1 if the running CPU (and OS) supports the feature named as in
 * manifests: on x86-64 sse41, avx, avx2, fma, f16c, avx512f, avx512cd,
 * avx512bw, avx512dq, avx512vl, avx512ifma, avx512vbmi, avx512_vnni,
 * avx512_bf16, avx512_fp16, amx_bf16; on AArch64 (Linux's HWCAP names)
 * asimd, fphp, asimdhp, asimddp, sve, i8mm, bf16. */
int mhagen_cpu_has(const char *feature);
/** Space-separated list of the supported features.
 *
 * $MHAGEN_CPU_CLASS=avx2 | avx512 | avx512_bf16 | avx512_amx | neon | none
 * makes the machine present itself as that lesser class, for mhagen and the
 * runtime alike: every detected feature outside the class is dropped (none are
 * added), so `host` resolves as it would there and kernels the class lacks are
 * refused. The test suite runs this way on AVX-512 machines to exercise the
 * AVX2 path. An unknown class is ignored (see mhagen_cpu_class_note). */
const char *mhagen_cpu_features(void);
/** "" when $MHAGEN_CPU_CLASS is unset; otherwise what it did. */
const char *mhagen_cpu_class_note(void);
/** Testing hook: pretend the CPU has exactly these (space- or
 * comma-separated) features; NULL restores detection. */
void mhagen_override_cpu_features(const char *features);

/* ---- devices ---- */
/** MHAGEN_OK if a device of this kind ("cuda", "opencl") and its driver
 * are present; otherwise MHAGEN_ERR_NO_DEVICE and mhagen_last_error() says
 * what is missing. $MHAGEN_HIDE_DEVICES=cuda,opencl hides them (testing). */
int mhagen_device_available(const char *device);

/* ---- loading and lookup ---- */
/** Opens a shared library of kernels and registers each of them. Before
 * dlopen runs any of its code, the file is checked: a regular file, an ELF
 * shared object of this machine whose segments and dynamic tables lie in
 * the file, and the integrity digest mhagen sealed it with (a damaged or
 * edited library is refused, MHAGEN_ERR_LOAD_FAILED). Kernels whose ABI
 * version or manifest is unusable are refused (the call fails and names
 * them). A path without '/' is searched as dlopen searches. */
int mhagen_load_library(const char *path, mhagen_library **out);
/** Appends (or replaces) the integrity digest mhagen_load_library checks.
 * `mhagen --shared` seals the libraries it links; call this (or `mhagen
 * seal`) after stripping or otherwise rewriting one. It detects damage,
 * not tampering: anyone can compute it. */
int mhagen_seal_library(const char *path);
/** Number of kernels a library brought, and each of them. */
int mhagen_library_kernel_count(const mhagen_library *lib);
const mhagen_kernel *mhagen_library_kernel(const mhagen_library *lib, int i);

int mhagen_kernel_count(void);
const mhagen_kernel *mhagen_kernel_at(int i);

/** Finds the best kernel for a key: a variant symbol, a kernel name, a spec
 * hash, a semantic key or a canonical spec text. Among variants of one spec
 * it picks the best the running CPU supports (avx512_amx > avx512_bf16 >
 * avx512 > avx2, then the first registered); $MHAGEN_FORCE_TARGET forces one
 * target. */
int mhagen_find(const char *key, const mhagen_kernel **out);
/** Like mhagen_find but forces the target (e.g. "avx2") and/or backend
 * ("halide", "mlir"); NULL leaves that choice free. A forced variant the CPU
 * cannot run is refused with MHAGEN_ERR_UNSUPPORTED_CPU. */
int mhagen_find_variant(const char *key, const char *target,
                        const char *backend, const mhagen_kernel **out);

/* ---- a kernel ---- */
const char *mhagen_kernel_symbol(const mhagen_kernel *k);
const char *mhagen_kernel_name(const mhagen_kernel *k);
const char *mhagen_kernel_target(const mhagen_kernel *k);
const char *mhagen_kernel_backend(const mhagen_kernel *k);
const char *mhagen_kernel_hash(const mhagen_kernel *k);
const char *mhagen_kernel_manifest(const mhagen_kernel *k);
/** MHAGEN_OK if this machine can run the kernel (CPU features, device). */
int mhagen_kernel_usable(const mhagen_kernel *k);

/** Validates every argument against the kernel's spec, then runs it. */
int mhagen_call(const mhagen_kernel *k, const mhagen_call_args *args);

/* ---- K/V caches ---- */
/** Stores `rows` rows of `width` floats as a kv_dtype = i8 cache does:
 * row r becomes dst[r * width + c] = round(src / s) with
 * s = max_c |src[r * width + c]| / 127, written to scales[r] (0 for an
 * all-zero row; symmetric, as llama.cpp's q8_0 with one block per row).
 * Call it per (token, kv head) row: width = dk for K, dv for V. Every
 * value of a row is within s / 2 of its stored value. Non-finite input is
 * refused (MHAGEN_ERR_INVALID_ARGUMENT) and nothing is written. */
int mhagen_kv_quantize_i8(const float *src, int64_t rows, int64_t width,
                          int8_t *dst, float *scales);

/** The storage types of a K/V cache (the spec's kv_dtype). */
enum mhagen_kv_dtype {
  MHAGEN_KV_F32 = 0,
  MHAGEN_KV_BF16 = 1, /* uint16_t bits, rounded to nearest even */
  MHAGEN_KV_F16 = 2,  /* uint16_t bits, rounded to nearest even */
  MHAGEN_KV_I8 = 3    /* int8_t with one f32 scale per (slot, kv head) */
};

/** A paged cache (kv_cache = paged(BLOCK), abi.h): appends `n` new tokens
 * of one sequence to K (or V), cache [num_blocks, block, kv_heads, width].
 * src is [n, kv_heads, width] f32; its row r is token first_pos + r,
 * stored in slot (first_pos + r) % block of block
 * table[(first_pos + r) / block], where `table` is the sequence's row of
 * the block table (table_len entries). kv_dtype i8 quantises each
 * (token, kv head) row as mhagen_kv_quantize_i8 does and writes its scale
 * to scales [num_blocks, block, kv_heads] (NULL otherwise). Refused,
 * with nothing written: a table too short for first_pos + n tokens, a
 * block index outside [0, num_blocks) among those the tokens land in,
 * non-finite input for i8, NULL pointers, sizes < 1. Then append the
 * sequence's length (kv_lens) by n before the next call. */
int mhagen_kv_append_paged(const float *src, int64_t n, int64_t first_pos,
                           const int32_t *table, int64_t table_len,
                           int64_t block, int64_t num_blocks, int64_t kv_heads,
                           int64_t width, enum mhagen_kv_dtype kv_dtype,
                           void *cache, float *scales);

/* ---- Partial results ---- */
/** Merges two attention results of the same queries over disjoint sets of
 * keys (two chunks of a KV cache, a cached prefix and new tokens, two
 * ranks of ring attention), each from a kernel with lse = true, into the
 * result over their union (docs/design.md §1, "Logsumexp"):
 *   lse = log(e^lse_a + e^lse_b),
 *   out = out_a e^(lse_a - lse) + out_b e^(lse_b - lse),
 * row by row: `rows` rows (B * Tq * h) of `width` (dv) floats, dense, and
 * one lse per row. A row whose two lse are -inf (no key in either) gets
 * lse -inf and zeros. out and lse may alias out_a/lse_a (or _b): each row
 * is read before it is written. A learned sink belongs to one of the two
 * parts only. A row with a NaN lse in either part (it saw a non-finite
 * input, docs/design.md §1) gets NaN values and a NaN lse. An lse of +inf
 * is refused (MHAGEN_ERR_INVALID_ARGUMENT) and nothing is written. */
int mhagen_merge_attention(int64_t rows, int64_t width, const float *out_a,
                           const float *lse_a, const float *out_b,
                           const float *lse_b, float *out, float *lse);

#ifdef __cplusplus
}
#endif

#endif
