// Calls kernels generated at build time, through the header's entry point
// and through the runtime's lookup, and checks them against a reference
// written here from the definition of attention (no mhagen code).
#include "demo_layer_kernels.h"
#include "demo_sdpa_kernels.h"

#include <mhagen/runtime.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

extern "C" int run_every_kernel_c(void);
extern "C" int check_every_kernel_cxx(void);

namespace {

// Causal GQA attention, one sequence: q [T, h, dk], k/v [T, kv, dk].
std::vector<double> attention(const std::vector<float> &q,
                              const std::vector<float> &k,
                              const std::vector<float> &v, int T, int h, int kv,
                              int dk) {
  std::vector<double> out(static_cast<size_t>(T * h * dk), 0.0);
  for (int hd = 0; hd < h; ++hd) {
    int g = hd / (h / kv);
    for (int i = 0; i < T; ++i) {
      std::vector<double> s(static_cast<size_t>(i + 1));
      double mx = -1e300;
      for (int j = 0; j <= i; ++j) {
        double dot = 0;
        for (int c = 0; c < dk; ++c)
          dot += double(q[(i * h + hd) * dk + c]) * k[(j * kv + g) * dk + c];
        s[j] = dot / std::sqrt(double(dk));
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (double &x : s)
        sum += (x = std::exp(x - mx));
      for (int c = 0; c < dk; ++c) {
        double acc = 0;
        for (int j = 0; j <= i; ++j)
          acc += s[j] / sum * v[(j * kv + g) * dk + c];
        out[(i * h + hd) * dk + c] = acc;
      }
    }
  }
  return out;
}

std::vector<float> random(size_t n, std::mt19937 &rng, float scale) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> x(n);
  for (float &e : x)
    e = u(rng);
  return x;
}

double maxErr(const std::vector<float> &got, const std::vector<double> &want) {
  double e = 0;
  for (size_t i = 0; i < got.size(); ++i)
    e = std::max(e, std::fabs(got[i] - want[i]));
  return e;
}

// y = x W (+ b): x [rows, in], W [in, out].
std::vector<double> project(const std::vector<double> &x, int rows, int in,
                            const std::vector<float> &w, int out,
                            const std::vector<float> &b) {
  std::vector<double> y(static_cast<size_t>(rows * out));
  for (int r = 0; r < rows; ++r)
    for (int o = 0; o < out; ++o) {
      double acc = b[o];
      for (int i = 0; i < in; ++i)
        acc += x[r * in + i] * w[i * out + o];
      y[r * out + o] = acc;
    }
  return y;
}

} // namespace

int main() {
  std::mt19937 rng(7);
  int failures = 0;

  // --- sdpa: T = 37, h = 4, kv = 2, dk = 64 -----------------------------
  const int T = 37, h = 4, kv = 2, dk = 64;
  auto q = random(T * h * dk, rng, 1), k = random(T * kv * dk, rng, 1),
       v = random(T * kv * dk, rng, 1);
  std::vector<double> want = attention(q, k, v, T, h, kv, dk);
  std::vector<float> out(q.size());

  // Through the header's entry point of the avx2 variant (any x86-64 CPU
  // with AVX2 runs it; the call is refused with a message otherwise).
  int rc =
      demo_sdpa_avx2_sdpa(q.data(), k.data(), v.data(), out.data(), 1, T, T);
  if (rc != MHAGEN_OK) {
    std::printf("demo_sdpa_avx2: %s\n", mhagen_last_error());
    ++failures;
  } else {
    double e = maxErr(out, want);
    std::printf("demo_sdpa_avx2 (header entry point): max |err| %.3g\n", e);
    failures += e > 1e-4;
  }

  // Through the runtime: the best variant this CPU runs.
  const mhagen_kernel *kernel = nullptr;
  if (mhagen_find("demo_sdpa", &kernel) != MHAGEN_OK) {
    std::printf("lookup: %s\n", mhagen_last_error());
    return 1;
  }
  mhagen_call_args a{};
  a.abi_version = MHAGEN_ABI_VERSION;
  a.batch = 1;
  a.t_q = a.t_kv = T;
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  a.out = out.data();
  std::fill(out.begin(), out.end(), 0.0f);
  if (mhagen_call(kernel, &a) != MHAGEN_OK) {
    std::printf("%s: %s\n", mhagen_kernel_symbol(kernel), mhagen_last_error());
    ++failures;
  } else {
    double e = maxErr(out, want);
    std::printf("%s (runtime lookup): max |err| %.3g\n",
                mhagen_kernel_symbol(kernel), e);
    failures += e > 1e-4;
  }
  // A wrong call is an error code and a message, not a crash.
  a.t_q = 0;
  if (mhagen_call(kernel, &a) != MHAGEN_ERR_INVALID_ARGUMENT) {
    std::printf("a call with t_q = 0 was not refused\n");
    ++failures;
  }

  // --- layer: d = 64, h = 4, kv = 2, dk = 16, biases, T = 21 --------------
  const int L = 21, d = 64, ldk = 16;
  auto x = random(L * d, rng, 1);
  float ws = 1.0f / std::sqrt(float(d));
  auto wq = random(d * h * ldk, rng, ws), wk = random(d * kv * ldk, rng, ws),
       wv = random(d * kv * ldk, rng, ws), wo = random(h * ldk * d, rng, ws);
  auto bq = random(h * ldk, rng, 0.1f), bk = random(kv * ldk, rng, 0.1f),
       bv = random(kv * ldk, rng, 0.1f), bo = random(d, rng, 0.1f);
  std::vector<double> xd(x.begin(), x.end());
  auto toF = [](const std::vector<double> &s) {
    return std::vector<float>(s.begin(), s.end());
  };
  auto Q = toF(project(xd, L, d, wq, h * ldk, bq));
  auto K = toF(project(xd, L, d, wk, kv * ldk, bk));
  auto V = toF(project(xd, L, d, wv, kv * ldk, bv));
  std::vector<double> O = attention(Q, K, V, L, h, kv, ldk);
  std::vector<double> Y = project(O, L, h * ldk, wo, d, bo);
  std::vector<float> y(static_cast<size_t>(L * d));
  const mhagen_kernel *layer = nullptr;
  if (mhagen_find("demo_layer", &layer) != MHAGEN_OK) {
    std::printf("lookup: %s\n", mhagen_last_error());
    return 1;
  }
  mhagen_call_args la{};
  la.abi_version = MHAGEN_ABI_VERSION;
  la.batch = 1;
  la.t_q = L;
  la.x = x.data();
  la.w_q = wq.data();
  la.w_k = wk.data();
  la.w_v = wv.data();
  la.w_o = wo.data();
  la.b_q = bq.data();
  la.b_k = bk.data();
  la.b_v = bv.data();
  la.b_o = bo.data();
  la.out = y.data();
  if (mhagen_call(layer, &la) != MHAGEN_OK) {
    std::printf("%s: %s\n", mhagen_kernel_symbol(layer), mhagen_last_error());
    ++failures;
  } else {
    double e = maxErr(y, Y);
    std::printf("%s (layer): max |err| %.3g\n", mhagen_kernel_symbol(layer), e);
    failures += e > 2e-4;
  }
  // Spec fields given to mhagen_add_attention as arguments reach the
  // kernels: their manifests say so.
  struct Expected {
    const char *key; // a kernel name, or "" for the spec from flags
    std::vector<const char *> fields;
  };
  const Expected expected[] = {
      {"cache_sdpa",
       {R"("kv_dtype": "i8")", R"("kv_block": 16)", R"("ragged": true)",
        R"("lse": true)", R"("softcap": 30)", R"("alibi": "runtime")",
        R"("sinks": true)", "window(64)", "sink(4)"}},
      {"", {R"("kv_dtype": "f16")", R"("scale": "runtime")", R"("d": 128)"}}};
  for (const Expected &e : expected) {
    std::string manifest;
    for (int i = 0; i < mhagen_kernel_count(); ++i) {
      const mhagen_kernel *kk = mhagen_kernel_at(i);
      const std::string m = mhagen_kernel_manifest(kk);
      const bool named = *e.key != 0;
      if (named ? std::string(mhagen_kernel_name(kk)) == e.key
                : m.find(R"("d": 128)") != std::string::npos &&
                      m.find(R"("h": 2,)") != std::string::npos &&
                      m.find(R"("n_kv": 1,)") != std::string::npos)
        manifest = m;
    }
    if (manifest.empty()) {
      std::printf("no kernel for %s\n", *e.key ? e.key : "the flags spec");
      ++failures;
      continue;
    }
    for (const char *field : e.fields)
      if (manifest.find(field) == std::string::npos) {
        std::printf("%s: manifest lacks %s\n", *e.key ? e.key : "flags spec",
                    field);
        ++failures;
      }
  }
  std::printf("spec fields from mhagen_add_attention arguments: checked\n");

  // Every op x dtype x backend through its header, from C11 and C++17.
  failures += run_every_kernel_c();
  failures += check_every_kernel_cxx();
  std::printf("%s\n", failures ? "FAILED" : "OK");
  return failures ? 1 : 0;
}
