/* The one parameter of mhagen's tensor-core attention kernels, shared by
 * the kernel template (tensor_core_attention.cuh) and the C ABI wrapper
 * that fills it (cuda_wrapper.c.in): one definition, one layout. Strides
 * are in elements; pointers are device pointers. */
#ifndef MHAGEN_TENSOR_CORE_PARAMS_H
#define MHAGEN_TENSOR_CORE_PARAMS_H

#include <stdint.h>

/* A TMA descriptor (the driver's CUtensorMap: 128 bytes, 128-byte
 * aligned), filled by cuTensorMapEncodeTiled. */
typedef struct __attribute__((aligned(128))) mh_tensor_map {
  uint64_t opaque[16];
} mh_tensor_map;

typedef struct mh_tc_params {
  /* sm_90a: K and V as [B][T_kv][kv heads][dk] boxes of 64 channels x
   * key_tile rows, 128-byte swizzled; unused by the sm_80 kernel. */
  mh_tensor_map tm_k, tm_v;
  const void *q, *k, *v;
  void *out;
  float *lse;             /* [B, T_q, h], or null */
  const int32_t *kv_lens; /* padding: [B] */
  int64_t q_bs, q_ts, k_bs, k_ts, v_bs, v_ts, o_bs, o_ts;
  int32_t batch, tq, tkv;
  int32_t splits;  /* key slices per row block; 1: no split */
  float *part_o;   /* splits > 1: [B, h, T_q, splits, dv] */
  float *part_lse; /* splits > 1: [B, h, T_q, splits], log2 units */
} mh_tc_params;

#endif
