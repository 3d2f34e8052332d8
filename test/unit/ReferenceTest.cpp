// The reference kernels are the oracle of every numerical test, so their
// own tests are worked by hand.
#include "mhagen/reference/Reference.h"
#include "mhagen/reference/Numerics.h"
#include "mhagen/reference/Tolerance.h"
#include "mhagen/spec/ScoreModifiers.h"
#include "mhagen/spec/SpecParser.h"

#include "RandomData.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace mhagen;

namespace {

AttentionSpec spec(const std::string &fields) {
  return parseSpecs("spec s { " + fields + " }", "t").at(0);
}

using test::randomVec;

} // namespace

TEST(Reference, SplitHeadsIsByFeatureColumns) {
  const int64_t B = 2, T = 3, heads = 4, width = 5;
  std::vector<float> x(B * T * heads * width);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t f = 0; f < heads * width; ++f)
        x[(b * T + t) * heads * width + f] =
            float(100000 * b + 1000 * t + f); // traceable: token, feature
  std::vector<float> split = ref::splitHeads(x, B, T, heads, width);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t hd = 0; hd < heads; ++hd)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < width; ++c)
          ASSERT_EQ(split[((b * heads + hd) * T + t) * width + c],
                    float(100000 * b + 1000 * t + hd * width + c));
  // The wrong split -- reshaping [B,T,h*dk] straight to [B,h,T,dk] --
  // has the right shape and the wrong contents; this check tells them
  // apart: head 1, token 0 must hold features 5..9 of token 0.
  std::vector<float> reshaped = x; // same memory, reinterpreted
  EXPECT_NE(reshaped[((0 * heads + 1) * T + 0) * width + 0],
            split[((0 * heads + 1) * T + 0) * width + 0]);
  EXPECT_EQ(split[((0 * heads + 1) * T + 0) * width + 0], 5.0f);
  EXPECT_EQ(reshaped[((0 * heads + 1) * T + 0) * width + 0], 15.0f);
}

TEST(Reference, MergeInvertsSplitBitForBit) {
  std::vector<float> x = randomVec(2 * 7 * 3 * 6, 1);
  std::vector<float> back =
      ref::mergeHeads(ref::splitHeads(x, 2, 7, 3, 6), 2, 7, 3, 6);
  ASSERT_EQ(back.size(), x.size());
  EXPECT_EQ(0, std::memcmp(back.data(), x.data(), x.size() * sizeof(float)));
}

TEST(Reference, SoftmaxWorkedByHand) {
  std::vector<bool> all(3, true);
  // [2, 0, 2]: e^0 / (2 e^0 + e^-2) = 1 / 2.1353 = 0.4683; e^-2 / ... = 0.0634
  auto p = ref::softmax<double>({2, 0, 2}, all);
  EXPECT_NEAR(p[0], 0.468, 5e-4);
  EXPECT_NEAR(p[1], 0.063, 5e-4);
  EXPECT_NEAR(p[2], 0.468, 5e-4);
  // [3, 0, 0]: 1 / (1 + 2 e^-3) = 0.9094
  auto q = ref::softmax<double>({3, 0, 0}, all);
  EXPECT_NEAR(q[0], 0.909, 5e-4);
  // Huge logits do not overflow (the max is subtracted first).
  auto big = ref::softmax<float>({1e4f, 0.f, -1e4f}, all);
  EXPECT_FLOAT_EQ(big[0], 1.0f);
  EXPECT_FLOAT_EQ(big[2], 0.0f);
  // Masked entries get 0; a fully masked row is zeros, not NaN.
  auto masked = ref::softmax<double>({5, 1, 1}, {false, true, true});
  EXPECT_DOUBLE_EQ(masked[0], 0.0);
  EXPECT_DOUBLE_EQ(masked[1], 0.5);
  auto none = ref::softmax<double>({5, 1}, {false, false});
  EXPECT_EQ(none[0], 0.0);
  EXPECT_EQ(none[1], 0.0);
}

TEST(Reference, SdpaSingleQueryByHand) {
  // One head, dk = 2, two keys: q = [1, 0], k0 = [2, 0], k1 = [0, 0],
  // scale 1: scores [2, 0] -> p = [0.8808, 0.1192]; v0 = [1, 0], v1 = [0, 1].
  AttentionSpec s = spec("op = sdpa; d = 2; h = 1; dk = 2; scale = 1");
  std::vector<float> q = {1, 0}, k = {2, 0, 0, 0}, v = {1, 0, 0, 1};
  ref::SdpaArgs a;
  a.B = 1;
  a.Tq = 1;
  a.Tkv = 2;
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  auto out = ref::sdpa<double>(s, a);
  double p0 = 1.0 / (1.0 + std::exp(-2.0));
  EXPECT_NEAR(out[0], p0, 1e-12);
  EXPECT_NEAR(out[1], 1 - p0, 1e-12);
}

TEST(Reference, CausalKvCacheOffsetAndPadding) {
  // Tq = 1 query at position Tkv-1 sees every key; with padding length 1
  // it sees only key 0, so the output is exactly v0.
  AttentionSpec s = spec("op = sdpa; d = 2; h = 1; dk = 2; mask = causal & "
                         "padding");
  std::vector<float> q = {1, 1}, k = randomVec(3 * 2, 2),
                     v = {7, 8, 1, 2, 3, 4};
  std::vector<int32_t> lens = {1};
  ref::SdpaArgs a;
  a.Tq = 1;
  a.Tkv = 3;
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  a.kvLens = lens.data();
  auto out = ref::sdpa<double>(s, a);
  EXPECT_DOUBLE_EQ(out[0], 7);
  EXPECT_DOUBLE_EQ(out[1], 8);
  lens[0] = 0; // nothing visible: zeros, not NaN
  out = ref::sdpa<double>(s, a);
  EXPECT_EQ(out[0], 0.0);
  EXPECT_EQ(out[1], 0.0);
}

TEST(Reference, PagedSequencesEndAtTheirOwnLength) {
  // A paged cache: sequence b's T_q = 2 queries are its last two tokens.
  // With L = 2 of T_kv = 4, query 0 sits at position 0 (sees key 0 alone:
  // the output is v0) and query 1 at position 1 (keys 0 and 1); a
  // contiguous cache with padding would put them at 2 and 3. q = 0 gives
  // equal weights, so query 1's output is the mean of v0 and v1.
  AttentionSpec s = spec("op = sdpa; d = 2; h = 1; dk = 2; mask = causal; "
                         "kv_cache = paged(2)");
  std::vector<float> q(2 * 2, 0.0f), k = randomVec(4 * 2, 3),
                                     v = {1, 2, 3, 4, 50, 60, 70, 80};
  std::vector<int32_t> lens = {2};
  ref::SdpaArgs a;
  a.Tq = 2;
  a.Tkv = 4;
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  a.kvLens = lens.data();
  auto out = ref::sdpa<double>(s, a);
  EXPECT_DOUBLE_EQ(out[0], 1);
  EXPECT_DOUBLE_EQ(out[1], 2);
  EXPECT_DOUBLE_EQ(out[2], 2);
  EXPECT_DOUBLE_EQ(out[3], 3);
  // mask none: still only the sequence's own keys (a padding term).
  s = spec("op = sdpa; d = 2; h = 1; dk = 2; kv_cache = paged(2)");
  lens[0] = 1;
  out = ref::sdpa<double>(s, a);
  for (int i : {0, 2})
    EXPECT_DOUBLE_EQ(out[i], 1);
  // Longer than T_q queries: a query before the first key sees nothing.
  lens[0] = 0;
  out = ref::sdpa<double>(s, a);
  for (double x : out)
    EXPECT_EQ(x, 0.0);
}

TEST(Reference, GqaWithKvEqualHIsMha) {
  // n_kv = h: each head has its own K/V; computing head by head with h = 1
  // specs must give the same numbers.
  const int64_t T = 5, h = 3, dk = 4;
  AttentionSpec s = spec("op = sdpa; d = 12; h = 3; mask = causal");
  AttentionSpec one =
      spec("op = sdpa; d = 4; h = 1; mask = causal; scale = 0.5");
  std::vector<float> q = randomVec(T * h * dk, 3), k = randomVec(T * h * dk, 4),
                     v = randomVec(T * h * dk, 5);
  ref::SdpaArgs a;
  a.Tq = a.Tkv = T;
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  auto all = ref::sdpa<double>(s, a);
  for (int64_t i = 0; i < h; ++i) {
    std::vector<float> qi, ki, vi;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < dk; ++c) {
        qi.push_back(q[(t * h + i) * dk + c]);
        ki.push_back(k[(t * h + i) * dk + c]);
        vi.push_back(v[(t * h + i) * dk + c]);
      }
    ref::SdpaArgs ai = a;
    ai.q = qi.data();
    ai.k = ki.data();
    ai.v = vi.data();
    auto head = ref::sdpa<double>(one, ai); // scale 0.5 = 1/sqrt(4)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < dk; ++c)
        ASSERT_DOUBLE_EQ(all[(t * h + i) * dk + c], head[t * dk + c]);
  }
}

TEST(Reference, MqaEqualsEveryHeadReadingOneKv) {
  // n_kv = 1: the same as n_kv = h with the one K/V copied to every head.
  const int64_t T = 6, h = 4, dk = 3;
  AttentionSpec mqa = spec("op = sdpa; d = 12; h = 4; kv = 1");
  AttentionSpec mha = spec("op = sdpa; d = 12; h = 4; kv = 4");
  std::vector<float> q = randomVec(T * h * dk, 6), k1 = randomVec(T * dk, 7),
                     v1 = randomVec(T * dk, 8);
  std::vector<float> kh, vh;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < h; ++i)
      for (int64_t c = 0; c < dk; ++c) {
        kh.push_back(k1[t * dk + c]);
        vh.push_back(v1[t * dk + c]);
      }
  ref::SdpaArgs a;
  a.Tq = a.Tkv = T;
  a.q = q.data();
  a.k = k1.data();
  a.v = v1.data();
  auto outMqa = ref::sdpa<double>(mqa, a);
  a.k = kh.data();
  a.v = vh.data();
  auto outMha = ref::sdpa<double>(mha, a);
  for (size_t i = 0; i < outMqa.size(); ++i)
    ASSERT_DOUBLE_EQ(outMqa[i], outMha[i]);
}

TEST(Reference, ConcatThenProjectEqualsSumOfPerHeadProjections) {
  // Y = concat(O_1..O_h) W_O == sum_i O_i W_O[i*dv:(i+1)*dv, :].
  const int64_t rows = 5, h = 3, dv = 4, d = 6;
  std::vector<float> O = randomVec(rows * h * dv, 9),
                     W = randomVec(h * dv * d, 10);
  auto concat =
      ref::project<double>(O.data(), rows, h * dv, W.data(), d, nullptr);
  std::vector<double> sum(rows * d, 0.0);
  for (int64_t i = 0; i < h; ++i) {
    std::vector<float> Oi,
        Wi(W.begin() + i * dv * d, W.begin() + (i + 1) * dv * d);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < dv; ++c)
        Oi.push_back(O[r * h * dv + i * dv + c]);
    auto part =
        ref::project<double>(Oi.data(), rows, dv, Wi.data(), d, nullptr);
    for (size_t j = 0; j < sum.size(); ++j)
      sum[j] += part[j];
  }
  for (size_t j = 0; j < sum.size(); ++j)
    EXPECT_NEAR(concat[j], sum[j], 1e-12);
}

TEST(Reference, LayerEqualsProjectionsAroundSdpa) {
  // op = layer must be exactly: project, attend (sdpa on the projections
  // in [B,T,heads,width] layout), project -- with biases.
  const int64_t B = 2, T = 5, d = 8, h = 4, kv = 2, dk = 3, dv = 2;
  AttentionSpec l = spec("d = 8; h = 4; kv = 2; dk = 3; dv = 2; bias = true;"
                         " mask = causal");
  AttentionSpec s = spec("op = sdpa; d = 8; h = 4; kv = 2; dk = 3; dv = 2;"
                         " mask = causal");
  auto x = randomVec(B * T * d, 11), wq = randomVec(d * h * dk, 12),
       wk = randomVec(d * kv * dk, 13), wv = randomVec(d * kv * dv, 14),
       wo = randomVec(h * dv * d, 15), bq = randomVec(h * dk, 16),
       bk = randomVec(kv * dk, 17), bv = randomVec(kv * dv, 18),
       bo = randomVec(d, 19);
  ref::LayerArgs la;
  la.B = B;
  la.T = T;
  la.x = x.data();
  la.wq = wq.data();
  la.wk = wk.data();
  la.wv = wv.data();
  la.wo = wo.data();
  la.bq = bq.data();
  la.bk = bk.data();
  la.bv = bv.data();
  la.bo = bo.data();
  auto y = ref::layer<double>(l, la);

  auto toF = [](const std::vector<double> &v) {
    return std::vector<float>(v.begin(), v.end());
  };
  auto Q = toF(
      ref::project<double>(x.data(), B * T, d, wq.data(), h * dk, bq.data()));
  auto K = toF(
      ref::project<double>(x.data(), B * T, d, wk.data(), kv * dk, bk.data()));
  auto V = toF(
      ref::project<double>(x.data(), B * T, d, wv.data(), kv * dv, bv.data()));
  ref::SdpaArgs sa;
  sa.B = B;
  sa.Tq = sa.Tkv = T;
  sa.q = Q.data();
  sa.k = K.data();
  sa.v = V.data();
  auto O = toF(ref::sdpa<double>(s, sa));
  auto y2 =
      ref::project<double>(O.data(), B * T, h * dv, wo.data(), d, bo.data());
  for (size_t i = 0; i < y.size(); ++i)
    EXPECT_NEAR(y[i], y2[i], 1e-5); // y2 went through f32 intermediates
}

TEST(Numerics, Bf16AndF16RoundToNearestEven) {
  EXPECT_EQ(floatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16ToFloat(0x3f80), 1.0f);
  // 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
  EXPECT_EQ(roundToBf16(1.0f + 1.0f / 256), 1.0f);
  EXPECT_EQ(roundToBf16(1.0f + 3.0f / 256), 1.0f + 4.0f / 256);
  EXPECT_EQ(floatToF16(1.0f), 0x3c00);
  EXPECT_EQ(f16ToFloat(0x3c00), 1.0f);
  EXPECT_EQ(floatToF16(65504.0f), 0x7bff);
  EXPECT_EQ(floatToF16(1e6f), 0x7c00);             // overflow: inf
  EXPECT_EQ(f16ToFloat(0x0001), 5.9604645e-8f);    // smallest subnormal
  EXPECT_EQ(roundToF16(1.0f + 1.0f / 2048), 1.0f); // tie to even
  EXPECT_EQ(roundToF16(-2.5f), -2.5f);
}

TEST(Reference, ScoreModifiersByHand) {
  // One head, dk = 2, scale 1, two keys: q = [1, 0], k0 = [2, 0], k1 = 0:
  // raw scores [2, 0] at positions 0 and 1 (the query sits at 1).
  std::vector<float> q = {1, 0}, k = {2, 0, 0, 0}, v = {1, 0, 0, 1};
  ref::SdpaArgs a;
  a.Tq = 1;
  a.Tkv = 2;
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  auto p0Of = [](double s0, double s1) {
    return std::exp(s0) / (std::exp(s0) + std::exp(s1));
  };
  // softcap 1: scores tanh(2), tanh(0) = 0.
  auto out = ref::sdpa<double>(
      spec("op = sdpa; d = 2; h = 1; dk = 2; scale = 1; softcap = 1"), a);
  EXPECT_NEAR(out[0], p0Of(std::tanh(2.0), 0), 1e-12);
  // ALiBi with slope 0.5 (runtime): key 0 is 1 behind: 2 - 0.5, key 1: 0.
  const float slope = 0.5f;
  a.modifiers.alibiSlopes = &slope;
  out = ref::sdpa<double>(
      spec("op = sdpa; d = 2; h = 1; dk = 2; scale = 1; alibi = runtime"), a);
  EXPECT_NEAR(out[0], p0Of(1.5, 0), 1e-12);
  // A sink of logit 1 takes e^1 of the denominator and outputs nothing.
  const float sink = 1.0f;
  a.modifiers.sinks = &sink;
  out = ref::sdpa<double>(
      spec("op = sdpa; d = 2; h = 1; dk = 2; scale = 1; sinks = learned"), a);
  const double den = std::exp(2.0) + std::exp(0.0) + std::exp(1.0);
  EXPECT_NEAR(out[0], std::exp(2.0) / den, 1e-12);
  EXPECT_NEAR(out[1], std::exp(0.0) / den, 1e-12);
  // A modifier the spec names but the call lacks is an error, not a guess.
  a.modifiers = {};
  EXPECT_THROW(ref::sdpa<double>(spec("op = sdpa; d = 2; h = 1; dk = 2; "
                                      "sinks = learned"),
                                 a),
               std::invalid_argument);
}

TEST(Reference, StandardAlibiSlopes) {
  // Power of two: 2^(-8 (k+1) / n).
  std::vector<double> s8 = standardAlibiSlopes(8);
  ASSERT_EQ(s8.size(), 8u);
  for (int k = 0; k < 8; ++k)
    EXPECT_DOUBLE_EQ(s8[k], std::exp2(-(k + 1.0)));
  // 12 heads (BLOOM's get_slopes): the 8 of n = 8, then 2^-0.5, 2^-1.5,
  // 2^-2.5, 2^-3.5.
  std::vector<double> s12 = standardAlibiSlopes(12);
  ASSERT_EQ(s12.size(), 12u);
  EXPECT_DOUBLE_EQ(s12[7], std::exp2(-8.0));
  EXPECT_DOUBLE_EQ(s12[8], std::exp2(-0.5));
  EXPECT_DOUBLE_EQ(s12[11], std::exp2(-3.5));
}

// The bound on the int8 rows a cached layer appends admits the kernel's
// own rounding (its f32 row a hair from the f64 one, which flips an
// integer only at a rounding boundary) and nothing wider: a truncating
// quantiser and one scaled by 1/128 instead of 1/127 both exceed it.
TEST(Tolerance, AppendedInt8RowsAdmitRoundingOnly) {
  const AttentionSpec s = spec("d = 256; h = 4; kv = 2; kv_cache = "
                               "contiguous; kv_dtype = i8");
  const int64_t width = 64, rows = 200;
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(-2.0, 2.0), hair(-1e-6, 1e-6);
  // x stored as q * scale, q = round(x * top / max) (or truncated).
  auto store = [](const std::vector<double> &x, double top, bool truncate) {
    double amax = 0;
    for (double e : x)
      amax = std::max(amax, std::fabs(e));
    const float scale = static_cast<float>(amax) / static_cast<float>(top);
    std::vector<double> out(x.size());
    for (size_t c = 0; c < x.size(); ++c) {
      const double level = x[c] * top / amax;
      out[c] = (truncate ? std::trunc(level) : std::nearbyint(level)) * scale;
    }
    return out;
  };
  int64_t roundingBeyond = 0, truncatingBeyond = 0, rescaledBeyond = 0;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> exact(width), kernel(width);
    double rowMax = 0;
    for (int64_t c = 0; c < width; ++c) {
      exact[c] = u(rng);
      rowMax = std::max(rowMax, std::fabs(exact[c]));
      kernel[c] = exact[c] * (1 + hair(rng));
    }
    const std::vector<double> want = store(exact, 127, false);
    const std::vector<double> rounded = store(kernel, 127, false);
    const std::vector<double> truncated = store(kernel, 127, true);
    const std::vector<double> rescaled = store(kernel, 128, false);
    for (int64_t c = 0; c < width; ++c) {
      const double bound = appendedCacheBound(s, want[c], exact[c], rowMax);
      roundingBeyond += std::fabs(rounded[c] - want[c]) > bound;
      truncatingBeyond += std::fabs(truncated[c] - want[c]) > bound;
      rescaledBeyond += std::fabs(rescaled[c] - want[c]) > bound;
    }
  }
  EXPECT_EQ(roundingBeyond, 0);
  EXPECT_GT(truncatingBeyond, rows * width / 4);
  EXPECT_GT(rescaledBeyond, rows * width / 4);
}
