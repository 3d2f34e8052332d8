/* The binary contract between generated kernels and the mhagen runtime
 * (docs/design.md §5). Every backend produces exactly this ABI for
 * the same spec, so kernels from different backends are interchangeable.
 *
 * The tensors, from the ABI model (mhagen/abi_model.hpp, whose table
 * this is; row-major, outermost first; element type = the spec's dtype,
 * and for k and v its kv_dtype: f32 = float, bf16/f16 = uint16_t bit
 * patterns, i8 = int8_t; "(when)" says which kernels have the tensor):
 *   q        [B, Tq, h, dk]    queries (uniform, strided)
 *   q        [Nq, h, dk]       packed queries (ragged, strided)
 *   k        [B, Tkv, kv, dk]  keys (sdpa or layer cache, contiguous, strided)
 *   v        [B, Tkv, kv, dv]  values (sdpa or layer cache, contiguous, strided)
 *   k_scale  [B, Tkv, kv]      int8 key row scales (kv_dtype i8, strided)
 *   v_scale  [B, Tkv, kv]      int8 value row scales (kv_dtype i8, strided)
 *   k        [NB, BLOCK, kv, dk] keys in blocks (paged)
 *   v        [NB, BLOCK, kv, dv] values in blocks (paged)
 *   k_scale  [NB, BLOCK, kv]   int8 key scales (paged, kv_dtype i8)
 *   v_scale  [NB, BLOCK, kv]   int8 value scales (paged, kv_dtype i8)
 *   x        [B, Tq, d]        input tokens (layer)
 *   w_q      [d, h*dk]         query projection (layer)
 *   w_k      [d, kv*dk]        key projection (layer)
 *   w_v      [d, kv*dv]        value projection (layer)
 *   w_o      [h*dv, d]         output projection (layer)
 *   b_q      [h*dk]            query bias (layer, bias)
 *   b_k      [kv*dk]           key bias (layer, bias)
 *   b_v      [kv*dv]           value bias (layer, bias)
 *   b_o      [d]               output bias (layer, bias)
 *   q_norm   [dk]              query norm weight (layer, qk_norm head)
 *   k_norm   [dk]              key norm weight (layer, qk_norm head)
 *   q_norm   [h*dk]            query norm weight (layer, qk_norm projection)
 *   k_norm   [kv*dk]           key norm weight (layer, qk_norm projection)
 *   kv_lens  [B]               int32 keys per batch (padding/paged/ragged/layer cache)
 *   positions [B, Tq]          int32 position of each token (layer, positions runtime)
 *   block_table [B, ceil(Tkv/BLOCK)] int32 block indices (paged)
 *   q_offsets [B+1]            int32 cumulative query offsets (ragged)
 *   sinks    [h]               learned sink logit per head (sinks learned)
 *   alibi_slopes [h]           ALiBi slope per head (alibi runtime)
 *   scale    [1]               score scale, finite and > 0 (scale runtime)
 *   out      [B, Tq, h, dv]    attention output (uniform, output, strided)
 *   out      [Nq, h, dv]       packed output (ragged, output, strided)
 *   out      [B, Tq, d]        layer output (layer, output, strided)
 *   lse      [B, Tq, h]        log-sum-exp of each row (lse, output)
 *   lse      [Nq, h]           packed log-sum-exp per row (ragged, lse, output)
 * For op = layer, Tq is its token count T; it attends over its own tokens,
 * or with kv_cache = contiguous over its cache k, v of Tkv tokens, into
 * which it writes its tokens' K/V rows: rows [kv_lens[b] - Tq, kv_lens[b])
 * of sequence b (kv_lens[b] >= Tq, its length after the call), and with
 * kv_dtype = i8 the rows' scales into k_scale, v_scale. Those tensors are
 * then written though their pointers are const.
 * Nq is a ragged batch's packed query rows, q_offsets[B].
 * Within a token, heads and features are dense. Between tokens and between
 * batches of a "strided" tensor a stride (in elements) may be given, so
 * Q/K/V can be views into a fused QKV buffer; 0 means dense. */
#ifndef MHAGEN_ABI_H
#define MHAGEN_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Bumped whenever mhagen_call_args or mhagen_kernel_desc change.
 * 2: k_scale/v_scale (kv_dtype = i8).
 * 3: sinks, alibi_slopes (score modifiers).
 * 4: lse (each row's log-sum-exp).
 * 5: scale (scale = runtime).
 * 6: block_table, num_blocks (kv_cache = paged(BLOCK)).
 * 7: q_offsets (ragged = true).
 * 8: q_norm, k_norm (qk_norm), positions (positions = runtime).
 * 9: cuda_stream (backend = cuda). */
#define MHAGEN_ABI_VERSION 9

/** Error codes: every entry point returns MHAGEN_OK or one of these, and
 * mhagen_last_error() holds the message. */
enum mhagen_status {
  MHAGEN_OK = 0,
  MHAGEN_ERR_INVALID_ARGUMENT = 1, /* null pointer, bad size or stride */
  MHAGEN_ERR_SHAPE_MISMATCH = 2,   /* sizes disagree with the spec */
  MHAGEN_ERR_UNSUPPORTED_CPU = 3,  /* CPU lacks an instruction set */
  MHAGEN_ERR_NO_DEVICE = 4,        /* no CUDA/OpenCL device or driver */
  MHAGEN_ERR_ABI_MISMATCH = 5,     /* kernel or caller of another ABI */
  MHAGEN_ERR_NOT_FOUND = 6,        /* no kernel matches a lookup */
  MHAGEN_ERR_LOAD_FAILED = 7,      /* dlopen or manifest problem */
  MHAGEN_ERR_KERNEL_FAILED = 8     /* the kernel itself reported an error */
};

/** The arguments of one kernel call. Fill abi_version with
 * MHAGEN_ABI_VERSION; unused pointers stay NULL. */
typedef struct mhagen_call_args {
  uint32_t abi_version;
  uint32_t flags; /* reserved, must be 0 */
  int64_t batch;  /* B */
  int64_t t_q;    /* query tokens (op = layer: tokens) */
  int64_t t_kv;   /* key/value tokens (op = layer: 0 or equal to t_q; with
                     kv_cache = contiguous, the cache's capacity) */

  /* op = sdpa */
  const void *q, *k, *v;
  int64_t q_token_stride, k_token_stride, v_token_stride; /* 0 = dense */
  int64_t q_batch_stride, k_batch_stride, v_batch_stride; /* 0 = dense */

  /* op = layer */
  const void *x;
  const void *w_q, *w_k, *w_v, *w_o;
  const void *b_q, *b_k, *b_v, *b_o; /* spec with bias = true only */

  /* output (both ops) */
  void *out;
  int64_t out_token_stride, out_batch_stride; /* 0 = dense */

  /* mask `padding` (and paged or ragged): batch b sees keys
   * [0, kv_lens[b]) */
  const int32_t *kv_lens;

  /* GPU kernels: nonzero when the tensor pointers above are device
   * pointers (CUDA) already; 0 copies host memory in and out. */
  int32_t device_pointers;
  int32_t reserved0;

  /* kv_dtype = i8: row (b, t, g) of k is k_scale[b, t, g] times its int8
   * values (likewise v); strides in floats, 0 = dense [B, Tkv, kv]. */
  const float *k_scale, *v_scale;
  int64_t k_scale_token_stride, v_scale_token_stride; /* 0 = dense */
  int64_t k_scale_batch_stride, v_scale_batch_stride; /* 0 = dense */

  /* score modifiers (docs/design.md §2): sinks = learned: one logit per
   * query head in every row's softmax denominator; alibi = runtime: one
   * ALiBi slope per query head. */
  const float *sinks;
  const float *alibi_slopes;

  /* lse = true: out's second output, [B, Tq, h] f32, dense: each row's
   * log(sum_j exp(s_ij)) over its visible scores (and its sink), -inf
   * for a row that sees no key (docs/design.md §1, "Logsumexp"). */
  float *lse;

  /* scale = runtime: the score scale s = scale * q.k of this call, one
   * float (finite, > 0; a device pointer like the others when
   * device_pointers is set). */
  const float *scale;

  /* kv_cache = paged(BLOCK) (docs/design.md §5, "Paged K/V"): k and v are
   * [num_blocks, BLOCK, kv, dk|dv] (k_scale/v_scale [num_blocks, BLOCK,
   * kv]), dense; token t of sequence b is slot t % BLOCK of block
   * block_table[b * ceil(t_kv / BLOCK) + t / BLOCK]. kv_lens[b] is the
   * sequence's length (<= t_kv, the table's capacity in tokens) and its
   * t_q queries are its last t_q tokens. Entries past a sequence's length
   * never choose a block (they may hold anything; a sequence of length 0
   * may have its first entry loaded and ignored); the others must lie in
   * [0, num_blocks). */
  const int32_t *block_table;
  int64_t num_blocks;

  /* ragged = true (docs/design.md §5, "Ragged batches"): q, out and lse
   * hold every sequence's rows packed, [q_offsets[B], h, dk|dv] ([.., h]
   * for lse); sequence b's queries are rows [q_offsets[b], q_offsets[b +
   * 1]), q_offsets[0] = 0, non-decreasing, B + 1 entries in host memory.
   * They are the sequence's last tokens: its count is at most t_q (the
   * longest sequence's) and at most kv_lens[b], its key length. Token
   * strides apply; batch strides of q and out must be 0. */
  const int32_t *q_offsets;

  /* qk_norm (docs/design.md §1, "QK-norm"): the RMSNorm weights of the
   * projected queries and keys, in the spec's dtype: [dk] each for
   * qk_norm = head, [h*dk] and [kv*dk] for qk_norm = projection. */
  const void *q_norm, *k_norm;

  /* positions = runtime (docs/design.md §1, "Rotary positions"): the
   * position of every token of the call, [B, t_q] int32 in host memory,
   * each in [0, 2^24]. */
  const int32_t *positions;

  /* backend = cuda: the CUDA stream (a CUstream or cudaStream_t) the call
   * runs on; NULL: the default stream. With device_pointers set and a
   * stream given the call is asynchronous: it returns once the kernels
   * are queued on the stream (a key split's workspace is allocated and
   * freed in stream order); otherwise it returns when the kernels are
   * done. Other kernels take NULL only. */
  void *cuda_stream;
} mhagen_call_args;

/** What a generated kernel exports. The runtime reads the manifest (JSON)
 * once at registration; `run` is called only after the runtime checked the
 * CPU, the device and every argument against it. */
typedef struct mhagen_kernel_desc {
  uint32_t abi_version;
  const char *symbol;        /* entry point name of this variant */
  const char *manifest_json; /* KernelManifest, see manifest.hpp */
  /* Runs the kernel on validated arguments; returns 0 or writes at most
   * errlen bytes of message to err and returns nonzero. */
  int (*run)(const mhagen_call_args *args, char *err, size_t errlen);
} mhagen_kernel_desc;

/** A shared library of kernels exports this symbol: a NULL-terminated
 * array of descriptors. */
#define MHAGEN_LIBRARY_SYMBOL "mhagen_library_kernels"

/* Called by generated code (and by the header's entry points). */
int mhagen_register_kernel(const mhagen_kernel_desc *desc);
int mhagen_invoke(const mhagen_kernel_desc *desc, const mhagen_call_args *a);

#ifdef __cplusplus
}
#endif

#endif
