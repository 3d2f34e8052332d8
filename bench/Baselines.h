// The baselines mhagen is compared with, all on the same inputs and layout
// as the generated kernels (q [B,Tq,h,dk], k/v [B,Tkv,kv,dk], out [B,Tq,h,dv]):
//   - unfused per-head OpenBLAS: cblas_sgemm for
//     S = Q K^T and O = P V per head, a masked softmax pass in between;
//   - unfused oneDNN: batched matmuls over all heads (GQA by broadcasting
//     the K/V head over its query heads), the same softmax pass;
//   - the naive reference loops (mhagen's reference, f32 accumulation).
#ifndef MHAGEN_BENCH_BASELINES_H
#define MHAGEN_BENCH_BASELINES_H

#include <cstdint>
#include <memory>
#include <vector>

namespace mhagen::bench {

struct AttnShape {
  int64_t B, Tq, Tkv, h, kv, dk;
  bool causal;
  bool bf16;
};

/// Sets the thread count of OpenBLAS, oneDNN/OpenMP and the softmax pass.
void setBaselineThreads(int n);

/// In-place masked, scaled softmax over rows of S [rows, Tkv]; row r is
/// query token r % Tq. Hidden keys get 0.
void maskedSoftmax(float *S, int64_t rows, int64_t Tq, int64_t Tkv,
                   bool causal);

/// Unfused per-head OpenBLAS attention, f32 (Debian's OpenBLAS 0.3.21 is
/// built without bf16 GEMM, so there is no bf16 variant of this baseline).
class BlasAttention {
public:
  explicit BlasAttention(const AttnShape &s);
  void run(const float *q, const float *k, const float *v, float *out);

private:
  AttnShape s_;
  std::vector<float> S_;
};

/// Unfused oneDNN matmul attention (primitives created once, reused).
class DnnlAttention {
public:
  explicit DnnlAttention(const AttnShape &s);
  ~DnnlAttention();
  void run(const void *q, const void *k, const void *v, float *out);

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// oneDNN sgemm for the four projections of a layer (x [T, d] times
/// W_Q, W_K, W_V, and O [T, h*dv] times W_O).
class DnnlProjections {
public:
  DnnlProjections(int64_t T, int64_t d, int64_t h, int64_t kv, int64_t dk);
  ~DnnlProjections();
  void run(const float *x, const float *wq, const float *wk, const float *wv,
           const float *o, const float *wo, float *q, float *k, float *v,
           float *y);

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace mhagen::bench

#endif
