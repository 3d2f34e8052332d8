// The figures `mhagen explain` must reproduce (issue: foundation).
#include "mhagen/spec/CostModel.h"
#include "mhagen/spec/SpecParser.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

using namespace mhagen;

static AttentionSpec spec(const std::string &fields) {
  return parseSpecs("spec s { " + fields + " }", "t").at(0);
}

TEST(CostModel, Gpt2SmallParameters) {
  // d = 768, h = 12, biases: 4*d^2 + 4*d = 2,362,368 per layer.
  CostReport r =
      computeCost(spec("d = 768; h = 12; bias = true"), 1024, 1024, 1);
  EXPECT_EQ(r.paramsWq, 768 * 768);
  EXPECT_EQ(r.paramsBias, 4 * 768);
  EXPECT_EQ(r.paramsTotal, 2362368);
}

TEST(CostModel, Llama3GqaShapes) {
  CostReport r = computeCost(spec("d = 4096; h = 32; kv = 8"), 2048, 2048, 1);
  EXPECT_EQ(r.paramsWk, 4096 * 1024); // W_K is 4096 x 1024
  EXPECT_EQ(r.paramsWv, 4096 * 1024);
  EXPECT_EQ(r.paramsWq, 4096 * 4096);
  EXPECT_EQ(r.kvBytesPerToken, 2 * 8 * 128 * 4);
}

TEST(CostModel, DecodeReadsTheWholeCacheOnce) {
  // S4: one token against 4096 cached tokens of 8 K/V heads, dk = dv = 128,
  // for a batch of 3: 3 * 4096 * 8 * 256 * 4 bytes; at 25 GB/s in ms.
  CostReport r =
      computeCost(spec("op = sdpa; d = 4096; h = 32; kv = 8; dtype = f32"), 1,
                  4096, 3, 25.0);
  EXPECT_EQ(r.kvBytesPerCall, int64_t(3) * 4096 * 8 * 256 * 4);
  EXPECT_NEAR(r.kvFloorMs, 3.0 * 4096 * 8 * 256 * 4 / 25e9 * 1e3, 1e-9);
  // bf16 halves it; no bandwidth, no floor.
  CostReport h = computeCost(
      spec("op = sdpa; d = 4096; h = 32; kv = 8; dtype = bf16"), 1, 4096, 3);
  EXPECT_EQ(h.kvBytesPerCall, r.kvBytesPerCall / 2);
  EXPECT_EQ(h.kvFloorMs, 0.0);
}

// The keys some query sees, against a brute-force count over maskAllows:
// what explain's bytes and floor and run's K/V bandwidth are made of.
TEST(CostModel, VisitedKeysAreTheKeysSomeQuerySees) {
  for (const char *mask :
       {"none", "causal", "window(5)", "causal & sink(3)", "padding",
        "causal & (window(4) | sink(2))", "window(3) | padding",
        "causal & padding"}) {
    AttentionSpec s =
        spec(std::string("op = sdpa; d = 64; h = 2; mask = ") + mask);
    for (int64_t tkv : {1, 7, 33})
      for (int64_t tq : {int64_t(1), int64_t(3), tkv})
        for (int64_t len : {tkv, (tkv + 1) / 2}) {
          if (tq > tkv)
            continue;
          std::vector<bool> seen(static_cast<size_t>(tkv), false);
          for (int64_t i = 0; i < tq; ++i)
            for (int64_t j = 0; j < tkv; ++j)
              if (maskAllows(s.mask, i, j, tq, tkv, len))
                seen[static_cast<size_t>(j)] = true;
          const int64_t want = std::count(seen.begin(), seen.end(), true);
          EXPECT_EQ(visitedKeys(s.mask, tq, tkv, len), want)
              << mask << " Tq " << tq << " Tkv " << tkv << " len " << len;
        }
  }
  // Decode under window(64): 64 keys of 4096 are read, not the cache.
  CostReport r = computeCost(
      spec("op = sdpa; d = 4096; h = 32; kv = 8; mask = window(64)"), 1, 4096,
      1, 20.0);
  EXPECT_EQ(r.visitedKeys, 64);
  EXPECT_EQ(r.kvBytesPerCall, int64_t(64) * 8 * 256 * 4);
  EXPECT_NEAR(r.kvFloorMs, 64.0 * 8 * 256 * 4 / 20e9 * 1e3, 1e-12);
}

TEST(CostModel, GemmaWideHeads) {
  CostReport r = computeCost(spec("d = 3072; h = 16; dk = 256"), 16, 16, 1);
  EXPECT_EQ(r.paramsWq, 3072 * 4096); // h*dk = 4096 > d
  EXPECT_EQ(r.paramsWo, 4096 * 3072);
}

TEST(CostModel, FlopsAndVisitedPairs) {
  // T = 4: causal visits 1+2+3+4 = 10 of 16 pairs.
  AttentionSpec s = spec("op = sdpa; d = 64; h = 2; dk = 8; mask = causal");
  CostReport r = computeCost(s, 4, 4, 3);
  EXPECT_EQ(r.visitedPairs, 10);
  EXPECT_EQ(r.totalPairs, 16);
  EXPECT_DOUBLE_EQ(r.flopsScores, 3.0 * 2 * 10 * 2 * 8);
  EXPECT_DOUBLE_EQ(r.flopsWeighted, 3.0 * 2 * 10 * 2 * 8);
  EXPECT_DOUBLE_EQ(r.flopsProjections, 0.0); // sdpa has none
  EXPECT_DOUBLE_EQ(r.flopsNominalAttention, 4.0 * 3 * 2 * 4 * 4 * 8);
  // window(2), T = 4: rows see 1, 2, 2, 2 keys.
  EXPECT_EQ(visitedPairs(spec("d = 8; h = 1; mask = window(2)").mask, 4, 4), 7);
  // KV cache: Tq = 2, Tkv = 5: the queries sit at positions 3 and 4.
  EXPECT_EQ(visitedPairs(s.mask, 2, 5), 4 + 5);
  // Layer projections: 2*T*d*(h*dk) + 2*T*d*kv*(dk+dv) + 2*T*h*dv*d.
  AttentionSpec l = spec("d = 16; h = 4; kv = 2");
  CostReport lr = computeCost(l, 3, 3, 1);
  EXPECT_DOUBLE_EQ(lr.flopsProjections, 2.0 * 3 * 16 * 16 +
                                            2.0 * 3 * 16 * 2 * 8 +
                                            2.0 * 3 * 16 * 16);
}

TEST(CostModel, MaskAllowsMatchesDesign) {
  MaskClause c;
  c.causal = true;
  const MaskSpec causal = MaskSpec::of(c);
  // Bottom-right alignment with a KV cache: Tq = 2, Tkv = 4; query 0 sits
  // at position 2.
  EXPECT_TRUE(maskAllows(causal, 0, 2, 2, 4, 4));
  EXPECT_FALSE(maskAllows(causal, 0, 3, 2, 4, 4));
  MaskClause p;
  p.padding = true;
  const MaskSpec pad = MaskSpec::of(p);
  EXPECT_TRUE(maskAllows(pad, 0, 2, 4, 4, 3));
  EXPECT_FALSE(maskAllows(pad, 0, 3, 4, 4, 3));
  MaskClause w;
  w.window = 2;
  const MaskSpec win = MaskSpec::of(w);
  EXPECT_FALSE(maskAllows(win, 3, 1, 4, 4, 4)); // pos 3 - 2 < j required
  EXPECT_TRUE(maskAllows(win, 3, 2, 4, 4, 4));
}

TEST(CostModel, UnionsCountEachVisiblePairOnce) {
  // causal & (window(2) | sink(1)), T = 5: row i sees key 0 and keys
  // i-1..i: 1, 2, 3, 3, 3 keys.
  const MaskSpec m =
      spec("d = 8; h = 1; mask = causal & (window(2) | sink(1))").mask;
  EXPECT_EQ(visitedPairs(m, 5, 5), 1 + 2 + 3 + 3 + 3);
  int64_t brute = 0;
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 5; ++j)
      brute += maskAllows(m, i, j, 5, 5, 5);
  EXPECT_EQ(brute, 12);
}

// The tile-skipping rule both kernels use: a key tile is skipped only when
// the whole expression hides it from every row of the query tile, and
// (without padding) every visited tile holds a visible pair.
TEST(CostModel, TileSkippingIsExactForUnions) {
  const char *masks[] = {"causal",
                         "window(7)",
                         "causal & (window(9) | sink(4))",
                         "sink(3) | window(5)",
                         "causal & sink(20) | window(3)",
                         "sink(6)",
                         "none"};
  for (const char *text : masks) {
    const MaskSpec m = spec(std::string("d = 8; h = 1; mask = ") + text).mask;
    for (auto [Tq, Tkv] :
         {std::pair<int64_t, int64_t>{37, 37}, {5, 53}, {64, 64}, {1, 40}}) {
      for (int64_t QT : {1, 4, 16})
        for (int64_t KT : {1, 8, 16}) {
          int64_t tiled = 0;
          for (int64_t first = 0; first < Tq; first += QT) {
            const int64_t last = std::min(first + QT, Tq) - 1;
            for (int64_t kt = 0; kt * KT < Tkv; ++kt) {
              bool inRange = m.isNone();
              for (const MaskClause &c : m.anyOf) {
                KeyTileRange r = clauseKeyTiles(c, first + Tkv - Tq,
                                                last + Tkv - Tq, Tkv, Tkv, KT);
                inRange = inRange || (kt >= r.lo && kt <= r.hi);
              }
              int64_t visible = 0;
              for (int64_t i = first; i <= last; ++i)
                for (int64_t j = kt * KT; j < std::min((kt + 1) * KT, Tkv); ++j)
                  visible += maskAllows(m, i, j, Tq, Tkv, Tkv);
              EXPECT_EQ(inRange, visible > 0)
                  << text << " Tq " << Tq << " Tkv " << Tkv << " QT " << QT
                  << " KT " << KT << " query tile " << first << " key tile "
                  << kt;
              if (inRange)
                tiled += (last - first + 1) *
                         (std::min((kt + 1) * KT, Tkv) - kt * KT);
            }
          }
          EXPECT_EQ(tiledPairs(m, Tq, Tkv, QT, KT), tiled) << text;
          if (QT == 1 && KT == 1)
            EXPECT_EQ(tiled, visitedPairs(m, Tq, Tkv)) << text;
        }
    }
  }
}
