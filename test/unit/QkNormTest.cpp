// The qk_norm field: its text, its rules, and the reference layer's
// RMSNorm, checked by what an RMSNorm must do: a head's (or a token's)
// output does not change when its q or k columns are scaled, and the
// weights scale each channel.
#include "mhagen/spec/QkNorm.h"
#include "mhagen/reference/Reference.h"
#include "mhagen/spec/SpecParser.h"

#include "RandomData.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace mhagen;

namespace {

QkNormSpec norm(const std::string &text) {
  QkNormSpec n;
  EXPECT_EQ(parseQkNorm(text, n), "") << text;
  return n;
}

std::string why(const std::string &text) {
  QkNormSpec n;
  return parseQkNorm(text, n);
}

using test::randomVec;

// One small GQA layer (h 4, kv 2, dk 3) with its weights, run by the
// reference with a chosen W_Q, W_K and norm weights.
struct SmallLayer {
  static constexpr int64_t B = 1, T = 6, d = 8, h = 4, kv = 2, dk = 3;
  std::vector<float> x = randomVec(B * T * d, 1), wq = randomVec(d * h * dk, 2),
                     wk = randomVec(d * kv * dk, 3),
                     wv = randomVec(d * kv * dk, 4),
                     wo = randomVec(h * dk * d, 5);

  std::vector<double> run(const std::string &qkNorm,
                          const std::vector<float> &wQ,
                          const std::vector<float> &wK,
                          const std::vector<float> &qNorm,
                          const std::vector<float> &kNorm) const {
    const AttentionSpec s =
        parseSpecs("spec n { d = 8; h = 4; kv = 2; dk = 3; mask = causal; "
                   "qk_norm = " +
                       qkNorm + "; rope = half(theta = 10000, dim = 2) }",
                   "t")
            .at(0);
    ref::LayerArgs a;
    a.B = B;
    a.T = T;
    a.x = x.data();
    a.wq = wQ.data();
    a.wk = wK.data();
    a.wv = wv.data();
    a.wo = wo.data();
    a.qNorm = qNorm.data();
    a.kNorm = kNorm.data();
    return ref::layer<double>(s, a);
  }
};

// W [d, n] with the columns of head `head` (width dk) scaled by `by`.
std::vector<float> scaleHead(std::vector<float> w, int64_t n, int64_t head,
                             int64_t dk, float by) {
  for (size_t r = 0; r < w.size() / n; ++r)
    for (int64_t c = head * dk; c < (head + 1) * dk; ++c)
      w[r * n + c] *= by;
  return w;
}

double maxDiff(const std::vector<double> &a, const std::vector<double> &b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

} // namespace

TEST(QkNorm, TextRoundTrips) {
  for (const char *text :
       {"none", "head(eps = 1e-06)", "projection(eps = 1e-05)"}) {
    const QkNormSpec n = norm(text);
    EXPECT_EQ(n.str(), text);
    EXPECT_EQ(norm(n.str()), n);
  }
  // A bare scope takes eps = 1e-6; spacing is free.
  EXPECT_EQ(norm("head"), norm("head( eps=1e-6 )"));
  EXPECT_EQ(norm("projection").str(), "projection(eps = 1e-06)");
  EXPECT_NE(norm("head"), norm("projection"));
  EXPECT_NE(norm("head(eps = 1e-5)"), norm("head"));
}

TEST(QkNorm, BadTextSaysWhat) {
  EXPECT_NE(why("rms").find("unknown scope 'rms'"), std::string::npos);
  EXPECT_NE(why("head(epsilon = 1)").find("unknown argument 'epsilon'"),
            std::string::npos);
  EXPECT_NE(why("head(eps = x)").find("eps must be a number"),
            std::string::npos);
  EXPECT_NE(why("head(eps = 1, eps = 2)").find("given twice"),
            std::string::npos);
  EXPECT_NE(why("head(eps = 1").find("expected none, head(eps = E)"),
            std::string::npos);
  EXPECT_EQ(qkNormRule(norm("head(eps = 1e-6)")), "");
  for (const char *bad : {"head(eps = 0)", "head(eps = -1)",
                          "head(eps = 1e-40)", "projection(eps = 1e39)"}) {
    QkNormSpec n;
    if (parseQkNorm(bad, n).empty())
      EXPECT_NE(qkNormRule(n).find("eps must be a positive normal f32"),
                std::string::npos)
          << bad;
  }
}

TEST(QkNorm, SpecFieldAndItsRules) {
  const AttentionSpec s =
      parseSpecs(
          "spec q { d = 5120; h = 64; kv = 8; dk = 128; qk_norm = head }", "t")
          .at(0);
  EXPECT_EQ(s.qk_norm.scope, QkNormScope::Head);
  EXPECT_NE(s.canonical().find("qk_norm = head(eps = 1e-06)"),
            std::string::npos);
  EXPECT_NE(s.semanticKey().find("qk_norm=head(eps = 1e-06)"),
            std::string::npos);
  EXPECT_NE(s.derivedName().find("_qknh"), std::string::npos);
  AttentionSpec other = s;
  other.qk_norm = norm("head(eps = 1e-5)");
  EXPECT_NE(other.derivedName(), s.derivedName());
  EXPECT_NE(other.hash(), s.hash());
  AttentionSpec plain = s;
  plain.qk_norm = QkNormSpec{};
  EXPECT_EQ(plain.derivedName().find("_qkn"), std::string::npos);
  EXPECT_EQ(plain.semanticKey().find("qk_norm"), std::string::npos);
  EXPECT_EQ(parseSpecs(s.canonical(), "t").at(0).qk_norm, s.qk_norm);
  try {
    parseSpecs("spec q { op = sdpa; d = 64; h = 2; qk_norm = head }", "t");
    FAIL() << "qk_norm on op = sdpa was accepted";
  } catch (const SpecError &e) {
    EXPECT_NE(std::string(e.what()).find("qk_norm needs op = layer"),
              std::string::npos)
        << e.what();
  }
}

TEST(QkNorm, HeadNormIgnoresEachHeadsScale) {
  const SmallLayer L;
  const int64_t h = SmallLayer::h, kv = SmallLayer::kv, dk = SmallLayer::dk;
  const std::vector<float> qn = randomVec(dk, 6, 0.5f, 1.5f),
                           kn = randomVec(dk, 7, 0.5f, 1.5f);
  const auto base = L.run("head(eps = 1e-12)", L.wq, L.wk, qn, kn);
  // Scaling one query head and one key head by different factors leaves
  // every head's normalised q and k, so the output, as it was.
  const auto wq2 = scaleHead(L.wq, h * dk, 1, dk, 7.0f);
  const auto wk2 = scaleHead(L.wk, kv * dk, 0, dk, 0.25f);
  EXPECT_LT(maxDiff(base, L.run("head(eps = 1e-12)", wq2, wk2, qn, kn)), 1e-6);
  // The projection form sees one head grow against the others.
  const std::vector<float> qp = randomVec(h * dk, 8, 0.5f, 1.5f),
                           kp = randomVec(kv * dk, 9, 0.5f, 1.5f);
  const auto proj = L.run("projection(eps = 1e-12)", L.wq, L.wk, qp, kp);
  EXPECT_GT(maxDiff(proj, L.run("projection(eps = 1e-12)", wq2, wk2, qp, kp)),
            1e-3);
  // ... but not the whole projection scaled at once.
  std::vector<float> wq3 = L.wq;
  for (float &w : wq3)
    w *= 3.0f;
  EXPECT_LT(maxDiff(proj, L.run("projection(eps = 1e-12)", wq3, L.wk, qp, kp)),
            1e-6); // the scaled weights round in f32
  // Without the norm, the scale reaches the scores.
  EXPECT_GT(maxDiff(base, L.run("none", wq2, wk2, qn, kn)), 1e-3);
}

TEST(QkNorm, WeightsScaleTheirChannels) {
  // All q weights w times a factor c: the scores are c times as large,
  // which the softmax sees; all ones and unit weights times 1 agree.
  const SmallLayer L;
  const int64_t dk = SmallLayer::dk;
  const std::vector<float> ones(dk, 1.0f), twos(dk, 2.0f);
  const auto unit = L.run("head", L.wq, L.wk, ones, ones);
  EXPECT_GT(maxDiff(unit, L.run("head", L.wq, L.wk, twos, ones)), 1e-3);
  // q_norm 2 with k_norm 1 is k_norm 2 with q_norm 1: a score is their
  // product.
  EXPECT_LT(maxDiff(L.run("head", L.wq, L.wk, twos, ones),
                    L.run("head", L.wq, L.wk, ones, twos)),
            1e-12);
}

TEST(QkNorm, ValuesAreNotNormalised) {
  // One token attends only to itself, so the layer with identity weights
  // returns its value: x, whatever the norm does to q and k.
  const AttentionSpec s =
      parseSpecs("spec n { d = 4; h = 1; kv = 1; dk = 4; qk_norm = head(eps = "
                 "1e-12) }",
                 "t")
          .at(0);
  const std::vector<float> x = {0.5f, -1.0f, 2.0f, 0.25f};
  std::vector<float> eye(16, 0.0f);
  for (int i = 0; i < 4; ++i)
    eye[i * 4 + i] = 1.0f;
  const std::vector<float> w = {1.0f, 2.0f, 0.5f, 1.0f};
  ref::LayerArgs a;
  a.x = x.data();
  a.wq = a.wk = a.wv = a.wo = eye.data();
  a.qNorm = a.kNorm = w.data();
  const auto y = ref::layer<double>(s, a);
  for (int i = 0; i < 4; ++i)
    EXPECT_NEAR(y[i], x[i], 1e-12);
  EXPECT_THROW(
      {
        ref::LayerArgs missing = a;
        missing.kNorm = nullptr;
        ref::layer<double>(s, missing);
      },
      std::invalid_argument);
}
