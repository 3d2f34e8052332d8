// The spec language: parsing, printing, defaults, validation messages.
#include "mhagen/spec/AttentionSpec.h"
#include "mhagen/spec/SpecParser.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace mhagen;

namespace {

AttentionSpec one(const std::string &text) {
  auto specs = parseSpecs(text, "t.mha");
  EXPECT_EQ(specs.size(), 1u);
  return specs.at(0);
}

// The first diagnostic a bad spec text produces.
SpecDiagnostic firstError(const std::string &text) {
  try {
    parseSpecs(text, "bad.mha");
  } catch (const SpecError &e) {
    EXPECT_FALSE(e.diagnostics().empty());
    return e.diagnostics().at(0);
  }
  ADD_FAILURE() << "expected a SpecError for:\n" << text;
  return {};
}

} // namespace

TEST(Spec, DefaultsFollowDesign) {
  AttentionSpec s = one("spec a { d = 4096\n h = 32 }");
  EXPECT_EQ(s.op, Op::Layer);
  EXPECT_EQ(s.n_kv, 32); // kv defaults to h
  EXPECT_EQ(s.d_k, 128); // dk defaults to d / h
  EXPECT_EQ(s.d_v, 128); // dv defaults to dk
  EXPECT_TRUE(s.mask.isNone());
  EXPECT_EQ(s.dtype, DType::F32);
  EXPECT_FALSE(s.scale.has_value());
  EXPECT_DOUBLE_EQ(s.effectiveScale(), 1.0 / std::sqrt(128.0));
  EXPECT_EQ(s.target.kind, TargetKind::Host);
  EXPECT_EQ(s.backend, Backend::Halide);
}

TEST(Spec, ParsesEveryField) {
  AttentionSpec s = one(R"(# a comment
spec gemma {          // another comment
  op = sdpa
  d = 3072; h = 16; kv = 1
  dk = 256
  dv = 128
  mask = causal & window(512) & padding
  dtype = bf16
  scale = 0.0625
  target = avx512_bf16
  backend = mlir
  T = 128
  Tkv = 4096
  B = 2
})");
  EXPECT_EQ(s.name, "gemma");
  EXPECT_EQ(s.op, Op::Sdpa);
  EXPECT_EQ(s.d, 3072);
  EXPECT_EQ(s.h, 16);
  EXPECT_EQ(s.n_kv, 1);
  EXPECT_EQ(s.d_k, 256);
  EXPECT_EQ(s.d_v, 128);
  EXPECT_EQ(s.mask.single().window, 512);
  EXPECT_TRUE(s.mask.isCausal());
  EXPECT_TRUE(s.mask.hasPadding());
  EXPECT_EQ(s.dtype, DType::BF16);
  EXPECT_DOUBLE_EQ(*s.scale, 0.0625);
  EXPECT_EQ(s.target.kind, TargetKind::Avx512Bf16);
  EXPECT_EQ(s.backend, Backend::Mlir);
  EXPECT_EQ(*s.T, 128);
  EXPECT_EQ(*s.T_kv, 4096);
  EXPECT_EQ(*s.B, 2);
}

TEST(Spec, SeveralSpecsPerFileAndAliases) {
  auto specs = parseSpecs("spec a { d = 64\n h = 4 }\n"
                          "spec b { d = 64; h = 4; n_kv = 2; d_k = 8 }\n",
                          "two.mha");
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[1].n_kv, 2);
  EXPECT_EQ(specs[1].d_k, 8);
}

TEST(Spec, CanonicalTextRoundTripsExactly) {
  const char *texts[] = {
      "spec a { d = 4096\n h = 32\n kv = 8\n mask = causal }",
      "spec b { op = sdpa; d = 3072; h = 16; dk = 256; mask = window(64) & "
      "padding; dtype = f16; scale = 0.1; T = 7 }",
      "spec c { d = 768; h = 12; bias = true; target = cuda_sm90; B = 3 }",
  };
  for (const char *t : texts) {
    AttentionSpec s = one(t);
    std::string printed = s.canonical();
    AttentionSpec again = one(printed);
    EXPECT_EQ(again, s) << printed;
    EXPECT_EQ(again.canonical(), printed);
  }
}

TEST(Spec, UnnamedSpecRoundTripsThroughDerivedName) {
  AttentionSpec s;
  s.d = 4096;
  s.h = 32;
  s.n_kv = 8;
  s.d_k = s.d_v = 128;
  MaskClause causal;
  causal.causal = true;
  s.mask = MaskSpec::of(causal);
  EXPECT_EQ(s.derivedName(), "mha_d4096_h32_kv8_dk128_causal_f32");
  AttentionSpec again = one(s.canonical());
  EXPECT_EQ(again, s); // the derived name reads back as "unnamed"
}

TEST(Spec, MaskAlgebraNormalises) {
  EXPECT_EQ(one("spec a { d = 8; h = 1; mask = padding & causal }").mask.str(),
            "causal & padding");
  // window implies causal, so the canonical form drops "causal".
  EXPECT_EQ(
      one("spec a { d = 8; h = 1; mask = causal & window(3) }").mask.str(),
      "window(3)");
  EXPECT_EQ(one("spec a { d = 8; h = 1; mask = none }").mask.str(), "none");
}

TEST(Spec, MaskUnionsDistributeAndAbsorb) {
  auto mask = [](const std::string &m) {
    return one("spec a { d = 8; h = 1; mask = " + m + " }").mask;
  };
  // & distributes over |: StreamingLLM's window beside the first keys.
  MaskSpec s = mask("causal & (window(4096) | sink(4))");
  ASSERT_EQ(s.anyOf.size(), 2u);
  EXPECT_EQ(s.str(), "window(4096) | causal & sink(4)");
  EXPECT_EQ(s.shortName(), "win4096_or_causal_sink4");
  EXPECT_TRUE(s.isCausal());
  EXPECT_FALSE(s.hasPadding());
  EXPECT_EQ(mask(s.str()), s); // the canonical text reads back
  // A clause implied by another one is absorbed: causal | window(8) is
  // causal (the window hides more, so adds nothing to the union).
  EXPECT_EQ(mask("causal | window(8)").str(), "causal");
  EXPECT_EQ(mask("window(8) | window(64)").str(), "window(64)");
  EXPECT_EQ(mask("sink(2) | sink(2)").str(), "sink(2)");
  // The order of alternatives does not matter.
  EXPECT_EQ(mask("sink(4) & causal | window(16)"),
            mask("window(16) | causal & sink(4)"));
  // Padding in a union makes the kernel take kv_lens; the union of two
  // non-causal clauses is not causal.
  MaskSpec p = mask("(window(16) | sink(4)) & padding");
  EXPECT_EQ(p.str(), "window(16) & padding | padding & sink(4)");
  EXPECT_TRUE(p.hasPadding());
  EXPECT_FALSE(mask("sink(4) | window(16)").isCausal());
  // Nested parentheses.
  EXPECT_EQ(mask("((causal) & ((sink(1))))").str(), "causal & sink(1)");
}

TEST(SpecErrors, MaskUnionErrorsNameTheRule) {
  auto rule = [](const std::string &m) {
    return firstError("spec a { d = 64; h = 4; mask = " + m + " }").rule;
  };
  EXPECT_NE(rule("causal & (sink(4)").find("missing ')'"), std::string::npos);
  EXPECT_NE(rule("sink(0)").find("sink size must be > 0"), std::string::npos);
  EXPECT_NE(rule("sink").find("sink needs a size"), std::string::npos);
  EXPECT_NE(rule("causal | none").find("'none' cannot be combined"),
            std::string::npos);
  EXPECT_NE(rule("sink(2) & sink(3)").find("two different sink sizes"),
            std::string::npos);
  // Five alternatives none of which implies another.
  EXPECT_NE(rule("window(2) & sink(50) | window(4) & sink(40) | window(8) & "
                 "sink(30) | window(16) & sink(20) | window(32) & sink(10)")
                .find("at most 4"),
            std::string::npos);
  EXPECT_NE(rule(std::string(40, '(') + "causal" + std::string(40, ')'))
                .find("deeper than"),
            std::string::npos);
  EXPECT_NE(rule("causal |").find("expected a mask term"), std::string::npos);
}

TEST(Spec, ScaleAtRuntime) {
  AttentionSpec s = one("spec a { d = 64; h = 4; scale = runtime }");
  EXPECT_TRUE(s.scaleAtRuntime);
  EXPECT_FALSE(s.scale.has_value());
  EXPECT_NE(s.canonical().find("scale = runtime"), std::string::npos);
  EXPECT_EQ(one(s.canonical()), s);
  AttentionSpec fixed = one("spec a { d = 64; h = 4 }");
  EXPECT_NE(s.semanticKey(), fixed.semanticKey());
  EXPECT_NE(s.derivedName(), fixed.derivedName());
}

TEST(Spec, HashIsStableAndIgnoresNameTargetBackend) {
  AttentionSpec a = one("spec a { d = 4096; h = 32; kv = 8; mask = causal }");
  AttentionSpec b = one("spec other { d = 4096; h = 32; kv = 8; mask = causal;"
                        " target = avx2; backend = mlir }");
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_EQ(a.hash().size(), 16u);
  // A fixed value: the hash must not change between versions or machines.
  EXPECT_EQ(a.semanticKey(), "op=layer;d=4096;h=32;kv=8;dk=128;dv=128;"
                             "mask=causal;dtype=f32;bias=0;scale="
                             "0.08838834764831843");
  EXPECT_EQ(a.hash(), "dea5dcccd67890bf");
  AttentionSpec c = one("spec a { d = 4096; h = 32; kv = 4; mask = causal }");
  EXPECT_NE(a.hash(), c.hash());
}

TEST(SpecErrors, HeadsNotDivisibleByKv) {
  SpecDiagnostic d = firstError("spec a {\n  d = 4096\n  h = 32\n  kv = 5\n}");
  EXPECT_EQ(d.field, "kv");
  EXPECT_EQ(d.value, "5");
  EXPECT_EQ(d.loc.line, 4);
  EXPECT_EQ(d.loc.col, 8);
  EXPECT_NE(d.rule.find("divisible"), std::string::npos);
  EXPECT_EQ(d.message(), "bad.mha:4:8: error: field 'kv' = '5': h (32) must "
                         "be divisible by kv (5)");
}

TEST(SpecErrors, ZeroAndNegativeSizes) {
  EXPECT_EQ(firstError("spec a { d = 64; h = 4; dk = 0 }").field, "dk");
  EXPECT_EQ(firstError("spec a { d = 64; h = 4; dk = 0 }").rule, "must be > 0");
  EXPECT_EQ(firstError("spec a { d = -64; h = 4 }").rule, "must be > 0");
  EXPECT_EQ(firstError("spec a { d = 64; h = four }").rule,
            "must be a positive integer");
}

TEST(SpecErrors, DkRequiredWhenDNotDivisible) {
  SpecDiagnostic d = firstError("spec a { d = 100; h = 7 }");
  EXPECT_EQ(d.field, "dk");
  EXPECT_NE(d.rule.find("give the head width dk explicitly"),
            std::string::npos);
  // ... and with dk given it is fine (Gemma-like h*dk != d).
  EXPECT_NO_THROW(parseSpecs("spec a { d = 100; h = 7; dk = 16 }", "ok"));
}

TEST(SpecErrors, UnknownNames) {
  EXPECT_EQ(firstError("spec a { d = 64; h = 4; dtype = f64 }").rule,
            "unknown dtype; expected f32, bf16 or f16");
  SpecDiagnostic m = firstError("spec a { d = 64; h = 4; mask = causl }");
  EXPECT_EQ(m.field, "mask");
  EXPECT_EQ(m.value, "causl");
  EXPECT_NE(m.rule.find("unknown mask term 'causl'"), std::string::npos);
  SpecDiagnostic t = firstError("spec a { d = 64; h = 4; target = arm }");
  EXPECT_EQ(t.field, "target");
  SpecDiagnostic f = firstError("spec a { d = 64; heads = 4 }");
  EXPECT_EQ(f.field, "heads");
  EXPECT_NE(f.rule.find("unknown field"), std::string::npos);
}

TEST(SpecErrors, MaskColumnsPointIntoTheExpression) {
  SpecDiagnostic d =
      firstError("spec a {\n  d = 64; h = 4\n  mask = causal & window(0)\n}");
  EXPECT_EQ(d.loc.line, 3);
  EXPECT_EQ(d.loc.col, 26); // the '0'
  EXPECT_NE(d.rule.find("window size must be > 0"), std::string::npos);
  EXPECT_NE(firstError("spec a { d = 64; h = 4; mask = none & causal }")
                .rule.find("'none' cannot be combined"),
            std::string::npos);
  EXPECT_NE(firstError("spec a { d = 64; h = 4; mask = causal padding }")
                .rule.find("expected '&'"),
            std::string::npos);
}

TEST(SpecErrors, SyntaxAndDuplicates) {
  EXPECT_NE(firstError("spec a { d = 64\n h = 4")
                .rule.find("missing its "
                           "closing"),
            std::string::npos);
  EXPECT_NE(firstError("spec a { d = 64; d = 65; h = 4 }")
                .rule.find("field given twice"),
            std::string::npos);
  EXPECT_NE(firstError("spec a { d = 64; h = 4 }\nspec a { d = 64; h = 4 }")
                .rule.find("defined twice"),
            std::string::npos);
  EXPECT_NE(firstError("spek a { }").rule.find("expected 'spec NAME {'"),
            std::string::npos);
  EXPECT_NE(firstError("spec a { d 64 }").rule.find("expected '='"),
            std::string::npos);
}

TEST(SpecErrors, SemanticRules) {
  EXPECT_NE(firstError("spec a { op = sdpa; d = 64; h = 4; bias = true }")
                .rule.find("needs op = layer"),
            std::string::npos);
  EXPECT_EQ(firstError("spec a { d = 64; h = 4; scale = 0 }").field, "scale");
  EXPECT_EQ(firstError("spec a { d = 64; h = 4; kv = 8 }").field, "kv");
  EXPECT_EQ(firstError("spec a { d = 64; h = 4; T = 0 }").field, "T");
  EXPECT_EQ(firstError("spec a { d = 64; h = 4; T = 4; Tkv = 8 }").field,
            "Tkv");
  EXPECT_EQ(firstError("spec a { d = 64; h = 4; target = cuda_sm7 }").field,
            "target");
}

TEST(Spec, KvDtypeIsItsOwnFieldAndKeepsOldKeys) {
  AttentionSpec s =
      one("spec a { op = sdpa; d = 4096; h = 32; kv = 8; kv_dtype = int8 }");
  ASSERT_TRUE(s.kv_dtype.has_value());
  EXPECT_EQ(*s.kv_dtype, KvType::I8);
  EXPECT_TRUE(s.kvQuantized());
  EXPECT_EQ(s.derivedName(), "mha_sdpa_d4096_h32_kv8_dk128_none_f32_kvi8");
  // 8 heads x (128 + 128) int8 values + 2 x 8 f32 scales per token.
  EXPECT_EQ(s.kvBytesPerToken(), 8 * 256 + 64);
  AttentionSpec again = one(s.canonical());
  EXPECT_EQ(again, s) << s.canonical();
  EXPECT_NE(s.canonical().find("kv_dtype = i8"), std::string::npos);
  // Stored as the dtype is the default: no field, the same key and hash.
  AttentionSpec plain = one("spec a { op = sdpa; d = 4096; h = 32; kv = 8 }");
  AttentionSpec same = one("spec a { op = sdpa; d = 4096; h = 32; kv = 8; "
                           "dtype = bf16; kv_dtype = bf16 }");
  EXPECT_FALSE(same.kv_dtype.has_value());
  EXPECT_EQ(same.kvType(), KvType::BF16);
  EXPECT_EQ(plain.semanticKey().find("kv_dtype"), std::string::npos);
  EXPECT_NE(plain.hash(), s.hash());
  EXPECT_EQ(plain.kvBytesPerToken(), 8 * 256 * 4);
}

TEST(Spec, PagedKvCacheIsItsOwnFieldAndKeepsOldKeys) {
  AttentionSpec s = one("spec a { op = sdpa; d = 4096; h = 32; kv = 8; "
                        "mask = causal; kv_cache = paged(16) }");
  EXPECT_EQ(s.kv_block, 16);
  EXPECT_TRUE(s.pagedKv());
  EXPECT_EQ(s.derivedName(), "mha_sdpa_d4096_h32_kv8_dk128_causal_f32_paged16");
  EXPECT_NE(s.canonical().find("kv_cache = paged(16)"), std::string::npos);
  EXPECT_EQ(one(s.canonical()), s) << s.canonical();
  // Every clause of the mask in effect hides the keys past the length.
  EXPECT_EQ(s.effectiveMask().str(), "causal & padding");
  EXPECT_EQ(s.mask.str(), "causal");
  AttentionSpec none = one("spec a { op = sdpa; d = 64; h = 4; "
                           "kv_cache = paged(8) }");
  EXPECT_EQ(none.effectiveMask().str(), "padding");
  // contiguous is the default: no field, the same key and hash as before.
  AttentionSpec plain = one("spec a { op = sdpa; d = 4096; h = 32; kv = 8; "
                            "mask = causal; kv_cache = contiguous }");
  EXPECT_FALSE(plain.pagedKv());
  EXPECT_EQ(plain.semanticKey().find("kv_cache"), std::string::npos);
  EXPECT_EQ(plain.effectiveMask(), plain.mask);
  EXPECT_NE(plain.hash(), s.hash());
}

// op = layer with kv_cache = contiguous: a layer that appends to its cache.
// It prints and keys apart from the cacheless layer, adds the padding term
// (keys per sequence), and is refused where it is not built; for op = sdpa
// `contiguous` is the default and changes nothing.
TEST(SpecErrors, LayerCacheRules) {
  const AttentionSpec cached = one("spec a { d = 64; h = 4; mask = causal; "
                                   "kv_cache = contiguous }");
  const AttentionSpec plain = one("spec a { d = 64; h = 4; mask = causal }");
  EXPECT_TRUE(cached.cachedLayer());
  EXPECT_TRUE(cached.keysPerSequence());
  EXPECT_TRUE(cached.effectiveMask().hasPadding());
  EXPECT_FALSE(plain.cachedLayer());
  EXPECT_NE(cached.semanticKey(), plain.semanticKey());
  EXPECT_NE(cached.canonical().find("kv_cache = contiguous"),
            std::string::npos);
  EXPECT_NE(cached.derivedName().find("_kvc"), std::string::npos);
  EXPECT_EQ(one(cached.canonical()).semanticKey(), cached.semanticKey());
  EXPECT_EQ(one("spec a { d = 64; h = 4; kv_cache = none }").semanticKey(),
            one("spec a { d = 64; h = 4 }").semanticKey());
  EXPECT_EQ(one("spec a { op = sdpa; d = 64; h = 4; kv_cache = contiguous }")
                .semanticKey(),
            one("spec a { op = sdpa; d = 64; h = 4 }").semanticKey());
  struct Case {
    const char *extra, *field, *rule;
  };
  for (Case c : {Case{"backend = mlir", "kv_cache", "needs backend = halide"},
                 Case{"target = cuda_sm90", "kv_cache", "CPU targets only"},
                 Case{"Tkv = 512", "kv_cache", "drop the static Tkv"}}) {
    SpecDiagnostic d = firstError(std::string("spec a { d = 64; h = 4; ") +
                                  c.extra + "; kv_cache = contiguous }");
    EXPECT_EQ(d.field, c.field) << c.extra;
    EXPECT_NE(d.rule.find(c.rule), std::string::npos) << d.rule;
  }
  // A cache stored as another type than the dtype is a layer's too (i8
  // with the row scales the layer writes).
  for (const char *kv : {"bf16", "f16", "i8"}) {
    const AttentionSpec s = one(std::string("spec a { d = 64; h = 4; "
                                            "kv_cache = contiguous; "
                                            "kv_dtype = ") +
                                kv + " }");
    EXPECT_EQ(toString(s.kvType()), std::string(kv));
  }
  EXPECT_EQ(firstError("spec a { d = 64; h = 4; kv_dtype = bf16 }").field,
            "kv_dtype");
}

TEST(SpecErrors, PagedKvCacheRules) {
  for (const char *bad :
       {"paged(0)", "paged(-4)", "paged(x)", "paged(16", "paged()", "blocks"}) {
    SpecDiagnostic d = firstError(std::string("spec a { op = sdpa; d = 64; "
                                              "h = 4; kv_cache = ") +
                                  bad + " }");
    EXPECT_EQ(d.field, "kv_cache") << bad;
    EXPECT_EQ(d.value, bad);
    EXPECT_NE(d.rule.find("expected none, contiguous or paged(BLOCK)"),
              std::string::npos)
        << d.rule;
  }
  struct Case {
    const char *extra, *rule;
  };
  for (Case c : {Case{"op = layer", "needs op = sdpa"},
                 Case{"op = sdpa; target = cuda_sm90", "CPU targets only"},
                 Case{"op = sdpa; Tkv = 512", "drop the static Tkv"}}) {
    SpecDiagnostic d = firstError(std::string("spec a { d = 64; h = 4; ") +
                                  c.extra + "; kv_cache = paged(16) }");
    EXPECT_EQ(d.field, "kv_cache") << c.extra;
    EXPECT_EQ(d.value, "paged(16)");
    EXPECT_NE(d.rule.find(c.rule), std::string::npos) << d.rule;
  }
  // Both CPU backends read a paged cache.
  EXPECT_TRUE(one("spec a { op = sdpa; d = 64; h = 4; backend = mlir; "
                  "kv_cache = paged(16) }")
                  .pagedKv());
  SpecDiagnostic d = firstError("spec a { op = sdpa; d = 64; h = 4; "
                                "kv_cache = paged(65537) }");
  EXPECT_NE(d.rule.find("BLOCK must be <= 65536"), std::string::npos);
}

TEST(Spec, RaggedBatchIsItsOwnFieldAndHidesKeysPastEachLength) {
  AttentionSpec s = one("spec a { op = sdpa; d = 4096; h = 32; kv = 8; "
                        "mask = causal; ragged = true }");
  EXPECT_TRUE(s.ragged);
  EXPECT_EQ(s.derivedName(), "mha_sdpa_d4096_h32_kv8_dk128_causal_f32_ragged");
  EXPECT_NE(s.canonical().find("ragged = true"), std::string::npos);
  EXPECT_EQ(one(s.canonical()), s) << s.canonical();
  // Each sequence ends at its own length: the mask in effect says so.
  EXPECT_EQ(s.effectiveMask().str(), "causal & padding");
  AttentionSpec paged = one("spec a { op = sdpa; d = 64; h = 4; "
                            "kv_cache = paged(8); ragged = true }");
  EXPECT_TRUE(paged.ragged && paged.pagedKv());
  // A uniform batch is the default: no field, the same key as before.
  AttentionSpec plain = one("spec a { op = sdpa; d = 4096; h = 32; kv = 8; "
                            "mask = causal; ragged = false }");
  EXPECT_EQ(plain.semanticKey().find("ragged"), std::string::npos);
  EXPECT_NE(plain.hash(), s.hash());
}

TEST(SpecErrors, RaggedBatchRules) {
  SpecDiagnostic d =
      firstError("spec a { op = sdpa; d = 64; h = 4; ragged = yes }");
  EXPECT_EQ(d.field, "ragged");
  EXPECT_EQ(d.value, "yes");
  EXPECT_NE(d.rule.find("expected true"), std::string::npos) << d.rule;
  struct Case {
    const char *extra, *rule;
  };
  for (Case c : {Case{"op = layer", "needs op = sdpa"},
                 Case{"op = sdpa; target = cuda_sm90", "CPU targets only"},
                 Case{"op = sdpa; T = 16", "drop the static T"},
                 Case{"op = sdpa; Tkv = 512", "drop the static Tkv"}}) {
    d = firstError(std::string("spec a { d = 64; h = 4; ") + c.extra +
                   "; ragged = true }");
    EXPECT_EQ(d.field, "ragged") << c.extra;
    EXPECT_EQ(d.value, "true");
    EXPECT_NE(d.rule.find(c.rule), std::string::npos) << d.rule;
  }
}

TEST(SpecErrors, KvDtypeRules) {
  SpecDiagnostic d = firstError("spec a { op = sdpa; d = 64; h = 4; "
                                "kv_dtype = fp8 }");
  EXPECT_EQ(d.field, "kv_dtype");
  EXPECT_EQ(d.value, "fp8");
  EXPECT_NE(d.rule.find("expected f32, bf16, f16 or i8"), std::string::npos);
  d = firstError("spec a { d = 64; h = 4; kv_dtype = i8 }");
  EXPECT_EQ(d.field, "kv_dtype");
  EXPECT_NE(d.rule.find("needs op = sdpa"), std::string::npos);
  // Both backends build every K/V storage type for a contiguous cache.
  for (const char *kvd : {"f16", "bf16", "i8"})
    EXPECT_NO_THROW(parseSpecs(std::string("spec a { op = sdpa; d = 64; "
                                           "h = 4; backend = mlir; "
                                           "kv_dtype = ") +
                                   kvd + " }",
                               "ok"))
        << kvd;
  d = firstError("spec a { op = sdpa; d = 64; h = 4; kv_dtype = f16; "
                 "target = cuda_sm90 }");
  EXPECT_NE(d.rule.find("CPU targets"), std::string::npos);
}

TEST(SpecErrors, EveryProblemIsReported) {
  try {
    parseSpecs("spec a { d = 64; h = 4; dtype = f8; mask = bogus }", "x");
    FAIL();
  } catch (const SpecError &e) {
    EXPECT_EQ(e.diagnostics().size(), 2u);
  }
}

TEST(Spec, Targets) {
  Target t;
  ASSERT_TRUE(parseTarget("cuda", t));
  EXPECT_EQ(t.str(), "cuda_sm86");
  ASSERT_TRUE(parseTarget("cuda_sm90", t));
  EXPECT_EQ(t.cudaCapability, 90);
  ASSERT_TRUE(parseTarget("avx512_bf16", t));
  EXPECT_TRUE(t.isCpu());
  ASSERT_TRUE(parseTarget("neon", t));
  EXPECT_EQ(t.kind, TargetKind::Neon);
  EXPECT_EQ(t.str(), "neon");
  EXPECT_TRUE(t.isCpu());
  EXPECT_FALSE(parseTarget("avx512fp16", t));
  EXPECT_FALSE(parseTarget("arm64", t));
}

TEST(Spec, ScoreModifiersRoundTripAndKeepOldKeys) {
  AttentionSpec s = one("spec a { op = sdpa; d = 2304; h = 8; kv = 4; "
                        "dk = 256; softcap = 50; alibi = true; "
                        "sinks = learned }");
  ASSERT_TRUE(s.softcap.has_value());
  EXPECT_EQ(*s.softcap, 50.0);
  EXPECT_EQ(s.alibi, AlibiSlopes::Standard);
  EXPECT_TRUE(s.sinks);
  EXPECT_TRUE(s.hasScoreModifier());
  EXPECT_EQ(s.derivedName(),
            "mha_sdpa_d2304_h8_kv4_dk256_none_f32_cap50_alibi_sinks");
  EXPECT_EQ(one(s.canonical()), s) << s.canonical();
  AttentionSpec frac =
      one("spec a { d = 64; h = 4; softcap = 30.5; alibi = runtime }");
  EXPECT_EQ(frac.alibi, AlibiSlopes::Runtime);
  EXPECT_EQ(frac.derivedName(), "mha_d64_h4_kv4_dk16_none_f32_cap30p5_alibirt");
  EXPECT_EQ(one(frac.canonical()), frac) << frac.canonical();
  // Unset modifiers leave the semantic key (and the tuning records keyed by
  // its hash) as they were; each one set changes it.
  AttentionSpec plain = one("spec a { d = 64; h = 4 }");
  EXPECT_EQ(plain.semanticKey().find("softcap"), std::string::npos);
  EXPECT_EQ(plain.semanticKey().find("alibi"), std::string::npos);
  EXPECT_EQ(plain.semanticKey().find("sinks"), std::string::npos);
  EXPECT_NE(one("spec a { d = 64; h = 4; sinks = learned }").hash(),
            plain.hash());
  EXPECT_EQ(one("spec a { d = 64; h = 4; alibi = false; sinks = none; "
                "softcap = none }"),
            plain);
}

TEST(Spec, LseIsItsOwnField) {
  AttentionSpec s = one("spec a { op = sdpa; d = 64; h = 4; lse = true }");
  EXPECT_TRUE(s.lse);
  EXPECT_EQ(s.derivedName(), "mha_sdpa_d64_h4_kv4_dk16_none_f32_lse");
  EXPECT_EQ(one(s.canonical()), s) << s.canonical();
  AttentionSpec plain = one("spec a { op = sdpa; d = 64; h = 4 }");
  EXPECT_EQ(plain.semanticKey().find("lse"), std::string::npos);
  EXPECT_NE(plain.hash(), s.hash());
  SpecDiagnostic d = firstError("spec a { d = 64; h = 4; lse = yes }");
  EXPECT_EQ(d.field, "lse");
  d = firstError("spec a { d = 64; h = 4; lse = true; target = cuda_sm90 }");
  EXPECT_EQ(d.field, "lse");
  EXPECT_NE(d.rule.find("CPU targets"), std::string::npos);
}

TEST(SpecErrors, ScoreModifierRules) {
  SpecDiagnostic d = firstError("spec a { d = 64; h = 4; softcap = 0 }");
  EXPECT_EQ(d.field, "softcap");
  EXPECT_EQ(d.value, "0");
  EXPECT_NE(d.rule.find("finite number > 0"), std::string::npos);
  d = firstError("spec a { d = 64; h = 4; softcap = big }");
  EXPECT_EQ(d.field, "softcap");
  EXPECT_NE(d.rule.find("C tanh(s / C)"), std::string::npos);
  d = firstError("spec a { d = 64; h = 4; alibi = yes }");
  EXPECT_EQ(d.field, "alibi");
  EXPECT_NE(d.rule.find("runtime"), std::string::npos);
  d = firstError("spec a { d = 64; h = 4; sinks = 4 }");
  EXPECT_EQ(d.field, "sinks");
  EXPECT_NE(d.rule.find("learned"), std::string::npos);
}
