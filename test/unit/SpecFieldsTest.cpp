// The field table (mhagen/spec/SpecFields.h): every row is complete, and
// the keys, names and canonical texts it derives are the ones kernels
// already carry (symbols, cache and tuning keys must not move).
#include "mhagen/spec/SpecFields.h"
#include "mhagen/spec/SpecParser.h"

#include <gtest/gtest.h>

#include <set>

using namespace mhagen;

TEST(SpecFields, EveryRowIsComplete) {
  std::set<std::string> spellings, flags;
  for (const SpecField &f : specFields()) {
    SCOPED_TRACE(f.name);
    EXPECT_TRUE(spellings.insert(f.name).second);
    for (const std::string &a : f.aliases)
      EXPECT_TRUE(spellings.insert(a).second) << a;
    EXPECT_FALSE(f.values.empty());
    EXPECT_FALSE(f.defaultText.empty());
    EXPECT_FALSE(f.meaning.empty());
    EXPECT_TRUE(f.parse && f.print && f.same);
    ASSERT_NE(f.flagForm, FlagForm::None);
    EXPECT_EQ(f.flag.rfind("--", 0), 0u);
    EXPECT_TRUE(flags.insert(f.flag).second);
    EXPECT_FALSE(f.flagHelp.empty());
    EXPECT_EQ(f.flagForm == FlagForm::SwitchOrValue, !f.flagImplied.empty());
    EXPECT_EQ(findSpecField(f.name), &f);
    for (const std::string &a : f.aliases)
      EXPECT_EQ(findSpecField(a), &f);
  }
  EXPECT_EQ(findSpecField("n_kv")->name, "kv");
  EXPECT_EQ(findSpecField("nope"), nullptr);
  EXPECT_EQ(specFieldNames().size(), specFields().size());
}

// Values written by the code before the table existed: a spec with every
// field away from its default, and one with the layer's fields.
TEST(SpecFields, KeysNamesAndCanonicalTextsStayAsTheyWere) {
  AttentionSpec a = parseSpecs(
      "spec x { op = sdpa; d = 4096; h = 32; kv = 8; dv = 64; mask = causal & "
      "(window(4096) | sink(4)); dtype = bf16; kv_dtype = i8; kv_cache = "
      "paged(16); ragged = true; scale = 0.125; softcap = 30.5; alibi = "
      "runtime; sinks = learned; lse = true; target = avx2; backend = mlir; "
      "B = 4 }",
      "t.mha")[0];
  EXPECT_EQ(a.semanticKey(),
            "op=sdpa;d=4096;h=32;kv=8;dk=128;dv=64;mask=window(4096) | causal "
            "& sink(4);dtype=bf16;bias=0;scale=0.125;kv_dtype=i8;kv_cache="
            "paged(16);ragged=1;softcap=30.5;alibi=runtime;sinks=learned;"
            "lse=1;B=4");
  EXPECT_EQ(a.derivedName(), "mha_sdpa_d4096_h32_kv8_dk128_dv64_win4096_or_"
                             "causal_sink4_bf16_kvi8_paged16_ragged_cap30p5_"
                             "alibirt_sinks_lse_s6c4a7e_B4");
  EXPECT_EQ(a.hash(), "6c4a7e4dfae3b9f7");
  EXPECT_EQ(a.canonical(),
            "spec x {\n  op = sdpa\n  d = 4096\n  h = 32\n  kv = 8\n  dk = "
            "128\n  dv = 64\n  mask = window(4096) | causal & sink(4)\n  dtype "
            "= bf16\n  kv_dtype = i8\n  kv_cache = paged(16)\n  ragged = "
            "true\n  bias = false\n  scale = 0.125\n  softcap = 30.5\n  alibi "
            "= runtime\n  sinks = learned\n  lse = true\n  target = avx2\n  "
            "backend = mlir\n  B = 4\n}\n");

  AttentionSpec b = parseSpecs("spec x { d = 768; h = 12; bias = true; scale "
                               "= runtime; alibi = true; T = 64; Tkv = 64; "
                               "B = 2 }",
                               "t.mha")[0];
  EXPECT_EQ(b.semanticKey(), "op=layer;d=768;h=12;kv=12;dk=64;dv=64;mask=none;"
                             "dtype=f32;bias=1;scale=runtime;alibi=true;T=64;"
                             "Tkv=64;B=2");
  EXPECT_EQ(b.derivedName(),
            "mha_d768_h12_kv12_dk64_none_f32_bias_alibi_srt_T64_Tkv64_B2");
  EXPECT_EQ(b.hash(), "588e0fb9b38ebed4");
}

TEST(SpecFields, EveryFieldTakesPartInEquality) {
  const AttentionSpec base =
      parseSpecs("spec x { op = sdpa; d = 4096; h = 32; kv = 8 }", "t.mha")[0];
  for (const SpecField &f : specFields()) {
    SCOPED_TRACE(f.name);
    // The spec with this one field given another value that parses.
    bool differed = false;
    for (const char *v : {"2", "64", "true", "learned", "runtime", "i8",
                          "paged(16)", "causal", "bf16", "0.5", "mlir", "avx2",
                          "layer", "4", "half(theta = 10000)", "head"}) {
      AttentionSpec s = base;
      std::vector<SpecDiagnostic> diags;
      if (!f.parse(RawField{v, {}}, s, diags).empty() || !diags.empty())
        continue;
      if (!(s == base)) {
        differed = true;
        EXPECT_NE(f.print(s), f.print(base));
        break;
      }
    }
    EXPECT_TRUE(differed);
  }
}

TEST(SpecFields, ScaleAtRuntimeHasNoValue) {
  AttentionSpec s = parseSpecs(
      "spec x { op = sdpa; d = 64; h = 1; scale = runtime }", "t.mha")[0];
  s.scale = 0.5;
  auto diags = validateSpec(s);
  ASSERT_EQ(diags.size(), 1u);
  EXPECT_EQ(diags[0].field, "scale");
  EXPECT_NE(diags[0].rule.find("no compiled-in value"), std::string::npos);
}
