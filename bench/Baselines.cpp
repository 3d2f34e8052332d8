#include "Baselines.h"

#include "mhagen/reference/Numerics.h"

#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

extern "C" void openblas_set_num_threads(int);

namespace mhagen::bench {

void setBaselineThreads(int n) {
  openblas_set_num_threads(n);
  omp_set_num_threads(n); // oneDNN's runtime and the softmax pass
}

void maskedSoftmax(float *S, int64_t rows, int64_t Tq, int64_t Tkv,
                   bool causal) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float *row = S + r * Tkv;
    const int64_t pos = r % Tq + Tkv - Tq;
    const int64_t n =
        causal ? std::min<int64_t>(std::max<int64_t>(pos + 1, 0), Tkv) : Tkv;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j)
      mx = std::max(mx, row[j]);
    float sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      row[j] = std::exp(row[j] - mx);
      sum += row[j];
    }
    const float inv = n ? 1.0f / sum : 0.0f;
    for (int64_t j = 0; j < n; ++j)
      row[j] *= inv;
    for (int64_t j = n; j < Tkv; ++j)
      row[j] = 0;
  }
}

// ---- OpenBLAS, one head at a time ------------------------------------------

BlasAttention::BlasAttention(const AttnShape &s) : s_(s) {
  S_.resize(static_cast<size_t>(s.Tq * s.Tkv));
}

void BlasAttention::run(const float *q, const float *k, const float *v,
                        float *out) {
  const AttnShape &s = s_;
  const int64_t group = s.h / s.kv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.dk));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t i = 0; i < s.h; ++i) {
      const int64_t g = i / group;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.Tq, s.Tkv, s.dk,
                  scale, q + (b * s.Tq * s.h + i) * s.dk, s.h * s.dk,
                  k + (b * s.Tkv * s.kv + g) * s.dk, s.kv * s.dk, 0.0f,
                  S_.data(), s.Tkv);
      maskedSoftmax(S_.data(), s.Tq, s.Tq, s.Tkv, s.causal);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.Tq, s.dk, s.Tkv,
                  1.0f, S_.data(), s.Tkv, v + (b * s.Tkv * s.kv + g) * s.dk,
                  s.kv * s.dk, 0.0f, out + (b * s.Tq * s.h + i) * s.dk,
                  s.h * s.dk);
    }
}

// ---- oneDNN, all heads in one batched matmul
// ---------------------------------

using namespace dnnl;

struct DnnlAttention::Impl {
  AttnShape s;
  engine eng{engine::kind::cpu, 0};
  stream strm{eng};
  matmul qk, pv;
  memory::desc qMd, kMd, sMd, pMd, vMd, oMd;
  std::vector<float> S;
  std::vector<uint16_t> P16;
};

DnnlAttention::DnnlAttention(const AttnShape &s) : impl_(new Impl) {
  Impl &m = *impl_;
  m.s = s;
  const int64_t group = s.h / s.kv;
  const auto dt = s.bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  // Dims (b, g, i, t, c): batch, K/V head, query head within its group,
  // token, channel. K and V have a size-1 i dimension that broadcasts
  // over the group: GQA without copies.
  m.qMd = memory::desc({s.B, s.kv, group, s.Tq, s.dk}, dt,
                       {s.Tq * s.h * s.dk, group * s.dk, s.dk, s.h * s.dk, 1});
  m.kMd = memory::desc({s.B, s.kv, 1, s.dk, s.Tkv}, dt,
                       {s.Tkv * s.kv * s.dk, s.dk, 1, 1, s.kv * s.dk});
  m.sMd = memory::desc({s.B, s.kv, group, s.Tq, s.Tkv}, memory::data_type::f32,
                       memory::format_tag::abcde);
  m.pMd = memory::desc({s.B, s.kv, group, s.Tq, s.Tkv}, dt,
                       memory::format_tag::abcde);
  m.vMd = memory::desc({s.B, s.kv, 1, s.Tkv, s.dk}, dt,
                       {s.Tkv * s.kv * s.dk, s.dk, 1, s.kv * s.dk, 1});
  m.oMd = memory::desc({s.B, s.kv, group, s.Tq, s.dk}, memory::data_type::f32,
                       {s.Tq * s.h * s.dk, group * s.dk, s.dk, s.h * s.dk, 1});
  primitive_attr scaled;
  scaled.set_output_scales(0, {1.0f / std::sqrt(static_cast<float>(s.dk))});
  m.qk = matmul(
      matmul::primitive_desc(matmul::desc(m.qMd, m.kMd, m.sMd), scaled, m.eng));
  m.pv =
      matmul(matmul::primitive_desc(matmul::desc(m.pMd, m.vMd, m.oMd), m.eng));
  m.S.resize(static_cast<size_t>(s.B * s.h * s.Tq * s.Tkv));
  if (s.bf16)
    m.P16.resize(m.S.size());
}

DnnlAttention::~DnnlAttention() = default;

void DnnlAttention::run(const void *q, const void *k, const void *v,
                        float *out) {
  Impl &m = *impl_;
  const AttnShape &s = m.s;
  memory qM(m.qMd, m.eng, const_cast<void *>(q));
  memory kM(m.kMd, m.eng, const_cast<void *>(k));
  memory sM(m.sMd, m.eng, m.S.data());
  m.qk.execute(
      m.strm, {{DNNL_ARG_SRC, qM}, {DNNL_ARG_WEIGHTS, kM}, {DNNL_ARG_DST, sM}});
  m.strm.wait();
  maskedSoftmax(m.S.data(), s.B * s.h * s.Tq, s.Tq, s.Tkv, s.causal);
  void *p = m.S.data();
  if (s.bf16) {
#pragma omp parallel for schedule(static)
    for (int64_t e = 0; e < static_cast<int64_t>(m.S.size()); ++e)
      m.P16[e] = floatToBf16(m.S[e]);
    p = m.P16.data();
  }
  memory pM(m.pMd, m.eng, p);
  memory vM(m.vMd, m.eng, const_cast<void *>(v));
  memory oM(m.oMd, m.eng, out);
  m.pv.execute(
      m.strm, {{DNNL_ARG_SRC, pM}, {DNNL_ARG_WEIGHTS, vM}, {DNNL_ARG_DST, oM}});
  m.strm.wait();
}

struct DnnlProjections::Impl {
  engine eng{engine::kind::cpu, 0};
  stream strm{eng};
  int64_t T, d, h, kv, dk;
  matmul q, k, v, o;
  memory::desc xMd, wqMd, wkMd, wvMd, qMd, kMd, oinMd, woMd, yMd;
};

DnnlProjections::DnnlProjections(int64_t T, int64_t d, int64_t h, int64_t kv,
                                 int64_t dk)
    : impl_(new Impl) {
  Impl &m = *impl_;
  m.T = T;
  m.d = d;
  m.h = h;
  m.kv = kv;
  m.dk = dk;
  const auto f32 = memory::data_type::f32;
  const auto ab = memory::format_tag::ab;
  m.xMd = memory::desc({T, d}, f32, ab);
  m.wqMd = memory::desc({d, h * dk}, f32, ab);
  m.wkMd = memory::desc({d, kv * dk}, f32, ab);
  m.qMd = memory::desc({T, h * dk}, f32, ab);
  m.kMd = memory::desc({T, kv * dk}, f32, ab);
  m.oinMd = memory::desc({T, h * dk}, f32, ab);
  m.woMd = memory::desc({h * dk, d}, f32, ab);
  m.yMd = memory::desc({T, d}, f32, ab);
  auto make = [&](const memory::desc &a, const memory::desc &b,
                  const memory::desc &c) {
    return matmul(matmul::primitive_desc(matmul::desc(a, b, c), m.eng));
  };
  m.q = make(m.xMd, m.wqMd, m.qMd);
  m.k = make(m.xMd, m.wkMd, m.kMd);
  m.v = m.k;
  m.o = make(m.oinMd, m.woMd, m.yMd);
}

DnnlProjections::~DnnlProjections() = default;

void DnnlProjections::run(const float *x, const float *wq, const float *wk,
                          const float *wv, const float *o, const float *wo,
                          float *q, float *k, float *v, float *y) {
  Impl &m = *impl_;
  auto mem = [&](const memory::desc &md, const float *p) {
    return memory(md, m.eng, const_cast<float *>(p));
  };
  m.q.execute(m.strm, {{DNNL_ARG_SRC, mem(m.xMd, x)},
                       {DNNL_ARG_WEIGHTS, mem(m.wqMd, wq)},
                       {DNNL_ARG_DST, mem(m.qMd, q)}});
  m.k.execute(m.strm, {{DNNL_ARG_SRC, mem(m.xMd, x)},
                       {DNNL_ARG_WEIGHTS, mem(m.wkMd, wk)},
                       {DNNL_ARG_DST, mem(m.kMd, k)}});
  m.v.execute(m.strm, {{DNNL_ARG_SRC, mem(m.xMd, x)},
                       {DNNL_ARG_WEIGHTS, mem(m.wkMd, wv)},
                       {DNNL_ARG_DST, mem(m.kMd, v)}});
  m.o.execute(m.strm, {{DNNL_ARG_SRC, mem(m.oinMd, o)},
                       {DNNL_ARG_WEIGHTS, mem(m.woMd, wo)},
                       {DNNL_ARG_DST, mem(m.yMd, y)}});
  m.strm.wait();
}

} // namespace mhagen::bench
