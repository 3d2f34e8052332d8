// The rope field: its text, its rules, and its inverse frequencies against
// values computed with transformers' formulas (modeling_rope_utils.py:
// default, linear, llama3, yarn) in double.
#include "mhagen/spec/Rope.h"
#include "mhagen/reference/Reference.h"
#include "mhagen/spec/SpecParser.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace mhagen;

namespace {

RopeSpec rope(const std::string &text) {
  RopeSpec r;
  const std::string why = parseRope(text, r);
  EXPECT_EQ(why, "") << text;
  return r;
}

void expectNear(double got, double want) {
  EXPECT_NEAR(got, want, 1e-13 * std::fabs(want)) << "want " << want;
}

} // namespace

TEST(Rope, TextRoundTrips) {
  for (const char *text :
       {"none", "half(theta = 500000)", "interleaved(theta = 10000, dim = 32)",
        "half(theta = 10000, scaling = linear(factor = 2))",
        "half(theta = 500000, scaling = llama3(factor = 8, low_freq_factor = "
        "1, high_freq_factor = 4, original_max_position_embeddings = 8192))",
        "half(theta = 1000000, dim = 64, scaling = yarn(factor = 4, "
        "original_max_position_embeddings = 32768, beta_fast = 32, beta_slow "
        "= 1, attention_factor = 1.2))"}) {
    const RopeSpec r = rope(text);
    EXPECT_EQ(r.str(), text);
    EXPECT_EQ(rope(r.str()), r);
  }
  // Spacing and argument order are free; yarn's betas have defaults.
  EXPECT_EQ(rope("half( dim=64 ,theta=1e4)").str(),
            "half(theta = 10000, dim = 64)");
  EXPECT_EQ(rope("half(theta = 1e6, scaling = yarn(factor = 4, "
                 "original_max_position_embeddings = 32768))")
                .str(),
            "half(theta = 1000000, scaling = yarn(factor = 4, "
            "original_max_position_embeddings = 32768, beta_fast = 32, "
            "beta_slow = 1))");
}

TEST(Rope, BadTextSaysWhat) {
  auto why = [](const std::string &text) {
    RopeSpec r;
    return parseRope(text, r);
  };
  EXPECT_NE(why("half").find("expected none, half(theta = T, ...)"),
            std::string::npos);
  EXPECT_NE(why("spiral(theta = 10)").find("unknown pairing 'spiral'"),
            std::string::npos);
  EXPECT_NE(why("half(dim = 32)").find("theta is required"), std::string::npos);
  EXPECT_NE(
      why("half(theta = 1e4, phase = 2)").find("unknown argument 'phase'"),
      std::string::npos);
  EXPECT_NE(why("half(theta = 1e4, theta = 2)").find("given twice"),
            std::string::npos);
  EXPECT_NE(why("half(theta = x)").find("theta must be a number"),
            std::string::npos);
  EXPECT_NE(why("half(theta = 1e4, scaling = ntk(factor = 2))")
                .find("unknown kind 'ntk'"),
            std::string::npos);
  EXPECT_NE(why("half(theta = 1e4, scaling = llama3(factor = 8))")
                .find("low_freq_factor is required"),
            std::string::npos);
  EXPECT_NE(why("half(theta = 1e4, dim = 3.5)").find("dim must be a whole"),
            std::string::npos);
  EXPECT_NE(why("half(theta = 1e4").find("expected none, half"),
            std::string::npos);
}

TEST(Rope, RulesNameTheLimit) {
  EXPECT_EQ(ropeRule(rope("half(theta = 1e4)"), 128), "");
  EXPECT_NE(ropeRule(rope("half(theta = 1)"), 128).find("theta must be > 1"),
            std::string::npos);
  EXPECT_NE(ropeRule(rope("half(theta = 1e4)"), 75).find("must be even"),
            std::string::npos);
  EXPECT_EQ(ropeRule(rope("half(theta = 1e4, dim = 74)"), 75), "");
  EXPECT_NE(
      ropeRule(rope("half(theta = 1e4, dim = 130)"), 128).find("at most dk"),
      std::string::npos);
  EXPECT_NE(
      ropeRule(rope("half(theta = 1e4, scaling = linear(factor = 0.5))"), 64)
          .find("factor must be >= 1"),
      std::string::npos);
  EXPECT_NE(ropeRule(rope("half(theta = 1e4, scaling = llama3(factor = 8, "
                          "low_freq_factor = 4, high_freq_factor = 1, "
                          "original_max_position_embeddings = 8192))"),
                     64)
                .find("low_freq_factor < high_freq_factor"),
            std::string::npos);
}

// The spec language carries the field: canonical text, key and kernel name,
// and the rule that it needs op = layer.
TEST(Rope, SpecFieldAndItsRules) {
  AttentionSpec s = parseSpecs("spec r { d = 4096; h = 32; kv = 8; "
                               "rope = half(theta = 500000) }",
                               "t")
                        .at(0);
  EXPECT_EQ(s.rope.str(), "half(theta = 500000)");
  EXPECT_NE(s.canonical().find("rope = half(theta = 500000)"),
            std::string::npos);
  EXPECT_NE(s.semanticKey().find("rope=half(theta = 500000)"),
            std::string::npos);
  EXPECT_NE(s.derivedName().find("_ropeh"), std::string::npos);
  AttentionSpec plain = s;
  plain.rope = RopeSpec{};
  EXPECT_NE(plain.derivedName(), s.derivedName());
  EXPECT_EQ(plain.derivedName().find("_rope"), std::string::npos);
  try {
    parseSpecs("spec r { op = sdpa; d = 64; h = 2; rope = half(theta = 1e4) }",
               "t");
    FAIL() << "rope on op = sdpa was accepted";
  } catch (const SpecError &e) {
    EXPECT_NE(std::string(e.what()).find("rope needs op = layer"),
              std::string::npos)
        << e.what();
  }
}

TEST(Rope, DefaultFrequencies) {
  const std::vector<double> inv =
      ropeInverseFrequencies(rope("half(theta = 10000)"), 128);
  ASSERT_EQ(inv.size(), 64u);
  expectNear(inv[0], 1.0);
  expectNear(inv[32], 0.01); // 10000^(-64/128)
  expectNear(inv[63], std::pow(10000.0, -126.0 / 128));
  // Partial rotation (GPT-NeoX, Phi-2): the exponent runs over dim, not dk.
  const std::vector<double> partial =
      ropeInverseFrequencies(rope("half(theta = 10000, dim = 32)"), 128);
  ASSERT_EQ(partial.size(), 16u);
  expectNear(partial[1], 0.5623413251903491);
  expectNear(partial[15], 0.00017782794100389227);
  EXPECT_EQ(ropeAttentionFactor(rope("half(theta = 10000)")), 1.0);
}

TEST(Rope, LinearScalingDividesEveryFrequency) {
  const std::vector<double> plain =
      ropeInverseFrequencies(rope("half(theta = 10000)"), 64);
  const std::vector<double> scaled = ropeInverseFrequencies(
      rope("half(theta = 10000, scaling = linear(factor = 4))"), 64);
  for (size_t j = 0; j < plain.size(); ++j)
    expectNear(scaled[j], plain[j] / 4);
}

// Llama 3.1 8B: theta 500000, factor 8, low 1, high 4, 8192 tokens.
TEST(Rope, Llama3ScalingMatchesTransformers) {
  const std::vector<double> inv = ropeInverseFrequencies(
      rope("half(theta = 500000, scaling = llama3(factor = 8, "
           "low_freq_factor = 1, high_freq_factor = 4, "
           "original_max_position_embeddings = 8192))"),
      128);
  expectNear(inv[0], 1.0);                    // short wavelength: kept
  expectNear(inv[20], 0.016560440080994446);  // kept
  expectNear(inv[30], 0.0013718935677611381); // blended
  expectNear(inv[40], 3.428102195952591e-05); // divided by 8
  expectNear(inv[63], 3.068925988914511e-07); // divided by 8
}

// Qwen-style YaRN: theta 1e6, factor 4, 32768 tokens, betas 32 and 1.
TEST(Rope, YarnScalingMatchesTransformers) {
  const RopeSpec r = rope("half(theta = 1000000, scaling = yarn(factor = 4, "
                          "original_max_position_embeddings = 32768))");
  const std::vector<double> inv = ropeInverseFrequencies(r, 128);
  expectNear(inv[0], 1.0);
  expectNear(inv[10], 0.1154781984689458);
  expectNear(inv[20], 0.01333521432163324);
  expectNear(inv[40], 4.445698525097307e-05);
  expectNear(inv[63], 3.102344401879299e-07);
  expectNear(ropeAttentionFactor(r), 0.1 * std::log(4.0) + 1);
}

// Which channel pairs with which: half splits the rotated channels in two
// halves, interleaved pairs neighbours; the rest never enter.
TEST(Rope, PairingOfChannels) {
  const RopeSpec half = rope("half(theta = 10000, dim = 8)");
  EXPECT_EQ(ropeLane(half, 12, 0).partner, 4);
  EXPECT_EQ(ropeLane(half, 12, 0).sign, -1.0);
  EXPECT_EQ(ropeLane(half, 12, 5).partner, 1);
  EXPECT_EQ(ropeLane(half, 12, 5).freq, 1);
  EXPECT_EQ(ropeLane(half, 12, 5).sign, 1.0);
  const RopeSpec inter = rope("interleaved(theta = 10000)");
  EXPECT_EQ(ropeLane(inter, 8, 4).partner, 5);
  EXPECT_EQ(ropeLane(inter, 8, 4).freq, 2);
  EXPECT_EQ(ropeLane(inter, 8, 5).partner, 4);
  EXPECT_EQ(ropeLane(inter, 8, 5).sign, 1.0);
}

TEST(Rope, PositionsAtRuntime) {
  const AttentionSpec s =
      parseSpecs("spec p { d = 8; h = 2; kv = 1; mask = causal; rope = "
                 "half(theta = 10000); positions = runtime }",
                 "t")
          .at(0);
  EXPECT_TRUE(s.positionsAtRuntime);
  EXPECT_NE(s.canonical().find("positions = runtime"), std::string::npos);
  EXPECT_NE(s.derivedName().find("_prt"), std::string::npos);
  try {
    parseSpecs("spec p { d = 8; h = 2; positions = runtime }", "t");
    FAIL() << "positions = runtime without rope was accepted";
  } catch (const SpecError &e) {
    EXPECT_NE(std::string(e.what()).find("positions = runtime needs rope"),
              std::string::npos)
        << e.what();
  }
  // The reference reads the positions: 0, 1, 2, ... is the implicit
  // layer; shifting every position changes nothing the scores see (they
  // depend on differences of positions); spreading them does.
  AttentionSpec implicit = s;
  implicit.positionsAtRuntime = false;
  const int64_t T = 5, d = 8;
  std::vector<float> x(T * d), wq(d * 8), wk(d * 4), wv(d * 4), wo(8 * d);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = std::sin(0.7 * i);
  for (auto *w : {&wq, &wk, &wv, &wo})
    for (size_t i = 0; i < w->size(); ++i)
      (*w)[i] = std::cos(0.3 * i + w->size());
  ref::LayerArgs a;
  a.T = T;
  a.x = x.data();
  a.wq = wq.data();
  a.wk = wk.data();
  a.wv = wv.data();
  a.wo = wo.data();
  const auto want = ref::layer<double>(implicit, a);
  auto with = [&](std::vector<int32_t> positions) {
    ref::LayerArgs p = a;
    p.positions = positions.data();
    const auto y = ref::layer<double>(s, p);
    double diff = 0;
    for (size_t i = 0; i < y.size(); ++i)
      diff = std::max(diff, std::fabs(y[i] - want[i]));
    return diff;
  };
  EXPECT_LT(with({0, 1, 2, 3, 4}), 1e-15);
  EXPECT_LT(with({100, 101, 102, 103, 104}), 1e-9);
  EXPECT_GT(with({0, 2, 4, 6, 8}), 1e-3);
  EXPECT_THROW(ref::layer<double>(s, a), std::invalid_argument);
}
