// The tuner: search-space constraints, the database format (round trip,
// torn lines, concurrent appends), resume, sharding, the fallback when a
// database has nothing for a spec, failed trials, and the search beating
// random sampling at equal budget. Trials run through a fake runner with a
// known landscape (FakeRunner.cpp).
#include "mhagen/driver/BackendRegistry.h"
#include "mhagen/machine/MachineModel.h"
#include "mhagen/spec/SpecParser.h"
#include "mhagen/support/Process.h"
#include "mhagen/tune/ScheduleSearch.h"
#include "mhagen/tune/TuneShard.h"
#include "mhagen/tune/TunedSchedule.h"
#include "mhagen/tune/Tuner.h"
#include "mhagen/tune/TuningDb.h"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <thread>

using namespace mhagen;

#ifndef FAKE_RUNNER
#error "FAKE_RUNNER must be defined"
#endif

namespace {

AttentionSpec testSpec() {
  AttentionSpec s = parseSpecs("spec tune_t { op = sdpa; d = 256; h = 4; "
                               "kv = 2; mask = causal; target = avx512 }",
                               "t")
                        .at(0);
  return s;
}

struct ScopedEnv {
  ScopedEnv(const char *name, const std::string &value) : name_(name) {
    const char *old = std::getenv(name);
    had_ = old != nullptr;
    if (had_)
      old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }
  const char *name_;
  bool had_ = false;
  std::string old_;
};

TuneOptions fakeOptions(const std::string &db, int budget) {
  TuneOptions o;
  o.spec = testSpec();
  o.dbPath = db;
  o.search.budget = budget;
  o.T = 64;
  o.reps = 1;
  o.remeasureTop = 2;
  o.remeasureReps = 1;
  o.trialTimeoutSeconds = 20;
  o.runner = std::make_shared<ProcessTrialRunner>(FAKE_RUNNER);
  return o;
}

} // namespace

TEST(SearchSpace, ConstraintsRuleOutInvalidPoints) {
  ScheduleSpace space =
      kernelBackend(Backend::Halide).scheduleSpace(testSpec());
  EXPECT_TRUE(space.valid(space.defaults)) << space.violation(space.defaults);
  ScheduleParams p = space.defaults;
  p["s_rows"] = 64;
  p["s_keys"] = 8; // 4*8 accumulators + 4 + 1 > 32 registers
  EXPECT_NE(space.violation(p).find("register"), std::string::npos);
  p = space.defaults;
  p["key_tile"] = 24;
  p["s_keys"] = 7;
  EXPECT_NE(space.violation(p).find("multiple of s_keys"), std::string::npos);
  p = space.defaults;
  p["channel_block"] = 7;
  EXPECT_NE(space.violation(p).find("not an allowed value"), std::string::npos);
  p = space.defaults;
  p["tokens_per_tile"] = 128;
  p["heads_per_tile"] = 2; // 256 rows ... fine, but scratch limits apply
  p["key_tile"] = 128;
  EXPECT_FALSE(space.violation(p).empty());
  p = space.defaults;
  p["q_tile"] = 64;
  EXPECT_NE(space.violation(p).find("unknown schedule parameter"),
            std::string::npos);
}

// K/V reuse: every row of a query tile uses each staged K/V
// tile. The long tile is the longest whose per-task scratch with its staged
// K/V tile fills at most a third of the L2 of the target's machine model
// (most rows first, then the longer key tile). A static T of at least 512
// takes it; with T unknown the kernel keeps a 64-row tile for short calls
// and compiles the long one as its long-call variant.
TEST(SearchSpace, LongCallsGetTheLongestQueryTileTheL2Holds) {
  struct Tile {
    int64_t rows, keys, longRows, longKeys, tiles, longTiles, maxKeys;
  };
  constexpr int64_t KiB = 1024, MiB = 1024 * KiB;
  auto tileFor = [](std::optional<int64_t> T, int64_t l2Bytes,
                    const std::string &dtype = "f32",
                    int64_t l3Bytes = int64_t{32} << 20) {
    AttentionSpec s =
        parseSpecs("spec reuse { op = sdpa; d = 4096; h = 32; kv = 8; "
                   "mask = causal; dtype = " +
                       dtype + "; target = avx512_bf16 }",
                   "t")
            .at(0);
    s.T = T;
    auto m =
        std::make_shared<MachineModel>(presetMachine(TargetKind::Avx512Bf16));
    m->l2Bytes = l2Bytes;
    m->l3Bytes = l3Bytes;
    m->cores = 2;
    s.target.machine = m;
    ScheduleSpace space = kernelBackend(Backend::Halide).scheduleSpace(s);
    const ScheduleParams &d = space.defaults;
    EXPECT_TRUE(space.valid(d)) << space.violation(d);
    return Tile{d.at("heads_per_tile") * d.at("tokens_per_tile"),
                d.at("key_tile"),
                d.at("heads_per_tile") * d.at("long_tokens_per_tile"),
                d.at("long_key_tile"),
                d.at("tiles_per_task"),
                d.at("long_tiles_per_task"),
                d.at("long_max_keys")};
  };
  // 1 MiB L2 (Zen 4): 128 rows x 64 keys, 330 KiB (256 x 32 is 500).
  // Each task holds 16 query tiles of one head block, so the 8 head
  // blocks give 2 cores 4 tasks each at 512 tokens, and copies their K/V
  // once: at most 16384 keys, 16 MiB, the core's share of a 32 MiB L3.
  Tile t = tileFor(std::nullopt, 1 * MiB);
  EXPECT_EQ(t.rows, 64);
  EXPECT_EQ(t.keys, 32);
  EXPECT_EQ(t.tiles, 1);
  EXPECT_EQ(t.longRows, 128);
  EXPECT_EQ(t.longKeys, 64);
  EXPECT_EQ(t.longTiles, 16);
  EXPECT_EQ(t.maxKeys, 16384);
  // A static T has one tile, and all of a head block's 64 query tiles in
  // one task at T 2048 (8 tasks).
  t = tileFor(2048, 1 * MiB);
  EXPECT_EQ(t.rows, 128);
  EXPECT_EQ(t.keys, 64);
  EXPECT_EQ(t.tiles, 64);
  EXPECT_EQ(t.longRows, 0);
  EXPECT_EQ(tileFor(511, 1 * MiB).rows, 64);
  EXPECT_EQ(tileFor(511, 1 * MiB).tiles, 1);
  EXPECT_EQ(tileFor(512, 1 * MiB).rows, 128);
  EXPECT_EQ(tileFor(512, 1 * MiB).tiles, 16);
  // 2 MiB L2 (Sapphire Rapids): 256 rows x 64 keys, 596 KiB.
  t = tileFor(std::nullopt, 2 * MiB);
  EXPECT_EQ(t.longRows, 256);
  EXPECT_EQ(t.longKeys, 64);
  EXPECT_EQ(t.longTiles, 8);
  EXPECT_EQ(tileFor(2048, 2 * MiB).rows, 256);
  // 512 KiB L2 (Zen 3): only the short tile fits a third (149 KiB); the
  // long-call variant is that tile, 32 of them per task.
  t = tileFor(std::nullopt, 512 * KiB);
  EXPECT_EQ(t.rows, 64);
  EXPECT_EQ(t.longRows, 64);
  EXPECT_EQ(t.longKeys, 32);
  EXPECT_EQ(t.longTiles, 32);
  EXPECT_EQ(tileFor(2048, 512 * KiB).rows, 64);
  // An L3 share below 1024 keys' copy (1 MiB) leaves no per-task copy:
  // the Zen 3 has no long-call variant then, and a static T none either.
  t = tileFor(std::nullopt, 512 * KiB, "f32", 1 * MiB);
  EXPECT_EQ(t.longRows, 0);
  EXPECT_EQ(t.longTiles, 1);
  EXPECT_EQ(tileFor(2048, 1 * MiB, "f32", 1 * MiB).tiles, 1);
  // The bf16 dot product reads K/V in place (nothing staged per tile to
  // save): its long-call variant is the short tile, whose tasks copy the
  // bf16 K rows and V pairs once, half the bytes of f32 per key.
  t = tileFor(std::nullopt, 1 * MiB, "bf16");
  EXPECT_EQ(t.rows, 64);
  EXPECT_EQ(t.longRows, 64);
  EXPECT_EQ(t.longKeys, 64);
  EXPECT_EQ(t.longTiles, 32);
  EXPECT_EQ(t.maxKeys, 32768);
}

// A tuner measuring calls shorter than every allowed long_min_tokens never
// runs the long-call variant: its parameters are pinned to their defaults,
// as the decode variant's are for calls longer than any decode tile.
TEST(SearchSpace, ShortCallsPinTheLongCallParameters) {
  AttentionSpec s = parseSpecs("spec pin { op = sdpa; d = 4096; h = 32; "
                               "kv = 8; mask = causal; target = avx512 }",
                               "t")
                        .at(0);
  auto pinnedAt = [&](int64_t tQ) {
    ScheduleSpace space = kernelBackend(Backend::Halide).scheduleSpace(s);
    return pinParamsUnusedAt(space, tQ);
  };
  auto has = [](const std::vector<std::string> &v, const char *name) {
    return std::find(v.begin(), v.end(), name) != v.end();
  };
  const std::vector<std::string> shortCall = pinnedAt(64);
  EXPECT_TRUE(has(shortCall, "long_tokens_per_tile"));
  EXPECT_TRUE(has(shortCall, "long_key_tile"));
  EXPECT_TRUE(has(shortCall, "long_min_tokens"));
  EXPECT_TRUE(has(shortCall, "long_tiles_per_task"));
  EXPECT_TRUE(has(shortCall, "long_max_keys"));
  EXPECT_TRUE(has(shortCall, "decode_layout"));
  const std::vector<std::string> longCall = pinnedAt(2048);
  EXPECT_FALSE(has(longCall, "long_tokens_per_tile"));
  EXPECT_TRUE(has(longCall, "decode_layout"));
  EXPECT_TRUE(has(pinnedAt(1), "long_key_tile"));
  EXPECT_FALSE(has(pinnedAt(1), "decode_layout"));
}

// The layer's packed GEMM: its chunk and task widths
// come from the L1d, the L2 and the cores of the target's machine model --
// the input panel and one register block's weights fit the L1d, the packed
// weight chunk at most half the L2, and the narrowest projection (kv x dk)
// still gives every core a task. Calls of at most one register block of
// rows stream the weights instead, in tasks of whole weight rows that give
// every core four of them.
TEST(SearchSpace, PackedGemmBlocksComeFromTheCaches) {
  struct Blocks {
    int64_t k, n, streamK;
  };
  auto blocksFor = [](TargetKind kind, int64_t l1d, int64_t l2, int cores,
                      const std::string &shape) {
    AttentionSpec s =
        parseSpecs("spec g { op = layer; " + shape + "; target = " +
                       (kind == TargetKind::Avx2 ? "avx2" : "avx512") + " }",
                   "t")
            .at(0);
    auto m = std::make_shared<MachineModel>(presetMachine(kind));
    m->l1dBytes = l1d;
    m->l2Bytes = l2;
    m->cores = cores;
    s.target.machine = m;
    ScheduleSpace space = kernelBackend(Backend::Halide).scheduleSpace(s);
    const ScheduleParams &d = space.defaults;
    EXPECT_TRUE(space.valid(d)) << space.violation(d);
    const int64_t cols = d.at("gemm_cols"), rows = d.at("gemm_rows");
    const int64_t kc = d.at("gemm_k_block"), nb = d.at("gemm_n_block");
    EXPECT_LE((rows + cols) * kc * 4, l1d);
    EXPECT_LE(nb * kc * 4, l2 / 2);
    EXPECT_GE(s.n_kv * s.d_k / nb, cores);
    EXPECT_EQ(d.at("gemm_stream_rows"), rows);
    const int64_t streamK = d.at("gemm_stream_k_block");
    EXPECT_GE(std::min(s.d, s.h * s.d_v) / streamK, 4 * cores);
    return Blocks{kc, nb, streamK};
  };
  const std::string llama = "d = 4096; h = 32; kv = 8; mask = causal";
  // Sapphire Rapids (48 KiB L1d, 2 MiB L2), 2 cores: 64 x 6 blocks.
  Blocks spr = blocksFor(TargetKind::Avx512, 48 << 10, 2 << 20, 2, llama);
  EXPECT_EQ(spr.k, 128);
  EXPECT_EQ(spr.n, 512);
  EXPECT_EQ(spr.streamK, 512);
  // Zen 4 (32 KiB L1d, 1 MiB L2): shorter chunks.
  Blocks zen4 = blocksFor(TargetKind::Avx512, 32 << 10, 1 << 20, 2, llama);
  EXPECT_EQ(zen4.k, 64);
  EXPECT_EQ(zen4.n, 512);
  // Zen 3 (AVX2, 24 x 4 blocks, 32 KiB L1d, 512 KiB L2): longer chunks,
  // so the packed weights bound the task at 256 features.
  Blocks zen3 = blocksFor(TargetKind::Avx2, 32 << 10, 512 << 10, 2, llama);
  EXPECT_EQ(zen3.k, 256);
  EXPECT_EQ(zen3.n, 256);
  // More cores: narrower tasks, so k and v still fill them.
  Blocks many = blocksFor(TargetKind::Avx512, 48 << 10, 2 << 20, 8, llama);
  EXPECT_EQ(many.n, 128);
  EXPECT_EQ(many.streamK, 128);
}

// A third CPU class (neon: the Neoverse N1 preset, 4 f32 lanes, 32
// registers, 64 KiB L1d) gets its schedule from the same rules as the x86
// classes, not from either of their numbers: a quarter of the registers
// for the QK^T and PV columns, the GEMM block with the most FMAs per loaded
// vector that fits the registers, and vector widths of its own lanes only.
TEST(SearchSpace, NeonDefaultsComeFromItsMachineModel) {
  const AttentionSpec layer =
      parseSpecs("spec n { op = layer; d = 4096; h = 32; kv = 8; "
                 "mask = causal; target = neon }",
                 "t")
          .at(0);
  const ScheduleSpace space =
      kernelBackend(Backend::Halide).scheduleSpace(layer);
  const ScheduleParams &d = space.defaults;
  EXPECT_TRUE(space.valid(d)) << space.violation(d);
  EXPECT_EQ(d.at("vector_width"), 4);
  EXPECT_EQ(d.at("s_keys"), 8);
  EXPECT_EQ(d.at("pv_chans"), 8);
  // 6 rows x 4 vectors: 24 accumulators, 4 loaded vectors, 1 broadcast.
  EXPECT_EQ(d.at("gemm_cols"), 16);
  EXPECT_EQ(d.at("gemm_rows"), 6);
  // (6 + 16) x 512 x 4 bytes fit the 64 KiB L1d.
  EXPECT_EQ(d.at("gemm_k_block"), 512);
  for (const ParamDecl &p : space.params)
    if (p.name == "vector_width")
      EXPECT_EQ(p.values, std::vector<int64_t>{4});
  if (!backendBuilt(Backend::Mlir))
    return;
  AttentionSpec sdpa = layer;
  sdpa.op = Op::Sdpa;
  sdpa.backend = Backend::Mlir;
  const ScheduleSpace mlir = kernelBackend(Backend::Mlir).scheduleSpace(sdpa);
  EXPECT_TRUE(mlir.valid(mlir.defaults)) << mlir.violation(mlir.defaults);
  EXPECT_EQ(mlir.defaults.at("vector_width"), 4);
}

// bf16: where the machine model says vdpbf16ps retires
// more FLOPs than the f32 FMA (Zen 4: 2x), the attention core's default
// is the pair dot product, reading K/V in place with 64-key tiles; where it
// retires fewer (Sapphire Rapids: 0.5x) or was never measured, bf16 is
// widened to f32 FMAs with staged K/V tiles. f32, a layer and a target
// without AVX512_BF16 never take it.
TEST(SearchSpace, Bf16DotIsTheDefaultWhereItRetiresMoreFlops) {
  EXPECT_EQ(bf16DotPerFmaOf("AuthenticAMD", 25), 2.0); // Zen 4
  EXPECT_EQ(bf16DotPerFmaOf("GenuineIntel", 6), 0.5);  // Sapphire Rapids
  EXPECT_EQ(bf16DotPerFmaOf("AuthenticAMD", 26), 0.0); // never measured
  EXPECT_EQ(presetMachine(TargetKind::Avx512Bf16).bf16DotPerFma, 2.0);
  EXPECT_EQ(presetMachine(TargetKind::Avx512).bf16DotPerFma, 0.0);
  auto defaults = [](const std::string &body, const std::string &target,
                     double rate) {
    AttentionSpec s = parseSpecs("spec b { d = 4096; h = 32; kv = 8; "
                                 "mask = causal; target = " +
                                     target + "; " + body + " }",
                                 "t")
                          .at(0);
    auto m = std::make_shared<MachineModel>(presetMachine(s.target.kind));
    m->bf16DotPerFma = rate;
    s.target.machine = m;
    ScheduleSpace space = kernelBackend(Backend::Halide).scheduleSpace(s);
    EXPECT_TRUE(space.valid(space.defaults)) << space.violation(space.defaults);
    return space.defaults;
  };
  const std::string sdpaBf16 = "op = sdpa; dtype = bf16";
  ScheduleParams zen4 = defaults(sdpaBf16, "avx512_bf16", 2.0);
  EXPECT_EQ(zen4.at("bf16_dot"), 1);
  EXPECT_EQ(zen4.at("stage_kv"), 0);
  EXPECT_EQ(zen4.at("key_tile"), 64);
  ScheduleParams spr = defaults(sdpaBf16, "avx512_bf16", 0.5);
  EXPECT_EQ(spr.at("bf16_dot"), 0);
  EXPECT_EQ(spr.at("stage_kv"), 1);
  EXPECT_EQ(spr.at("key_tile"), 32);
  EXPECT_EQ(defaults(sdpaBf16, "avx512_bf16", 0.0).at("bf16_dot"), 0);
  EXPECT_EQ(defaults(sdpaBf16, "avx512", 2.0).at("bf16_dot"), 0);
  EXPECT_EQ(defaults("op = sdpa", "avx512_bf16", 2.0).at("bf16_dot"), 0);
  EXPECT_EQ(
      defaults("op = layer; dtype = bf16", "avx512_bf16", 2.0).at("bf16_dot"),
      0);
  // An odd head width has no channel pairs: widened.
  EXPECT_EQ(defaults(sdpaBf16 + "; dk = 63", "avx512_bf16", 2.0).at("bf16_dot"),
            0);
}

// A tuner measuring prefill calls (T_q above every allowed decode_tokens)
// never runs the decode variant: its parameters are pinned to their
// defaults, and every other parameter keeps its values. A decode call
// (T_q 1) keeps them all.
TEST(SearchSpace, PrefillTuningPinsTheDecodeParameters) {
  for (Backend b : {Backend::Halide, Backend::Mlir}) {
    if (!backendBuilt(b))
      continue;
    AttentionSpec s = testSpec();
    s.backend = b;
    const ScheduleSpace full = kernelBackend(b).scheduleSpace(s);
    ScheduleSpace prefill = full;
    const std::vector<std::string> pinned = pinParamsUnusedAt(prefill, 512);
    EXPECT_NE(std::find(pinned.begin(), pinned.end(), "decode_tokens"),
              pinned.end());
    EXPECT_NE(std::find(pinned.begin(), pinned.end(), "split_tasks"),
              pinned.end());
    ASSERT_EQ(prefill.params.size(), full.params.size());
    for (size_t i = 0; i < full.params.size(); ++i) {
      const ParamDecl &before = full.params[i], &after = prefill.params[i];
      if (before.decodeOnly) {
        EXPECT_EQ(after.values,
                  std::vector<int64_t>{full.defaults.at(before.name)})
            << before.name;
      } else {
        EXPECT_EQ(after.values, before.values) << before.name;
      }
    }
    EXPECT_TRUE(prefill.valid(prefill.defaults));
    EXPECT_LT(prefill.size(), full.size());
    // Decode calls, and a prefill as short as the longest decode tile,
    // keep every parameter they run: only the long-call variant's are
    // pinned (its calls have at least 128 tokens).
    for (int64_t tQ : {1, 8}) {
      ScheduleSpace decode = full;
      for (const std::string &name : pinParamsUnusedAt(decode, tQ))
        EXPECT_EQ(name.rfind("long_", 0), 0u) << tQ << " " << name;
      for (size_t i = 0; i < full.params.size(); ++i)
        if (!full.params[i].longOnly)
          EXPECT_EQ(decode.params[i].values, full.params[i].values);
    }
  }
}

// A paged cache on the MLIR backend: every key tile in the space, and the
// default, divides the block (a tile is one slice of one block) and is at
// most 16 or a multiple of 16 (whole vectors: tiles of 24 ran 1.3x
// slower), so the manifest's key_tile is the tile the kernel walks.
TEST(SearchSpace, MlirPagedKeyTilesDivideTheBlock) {
  if (!backendBuilt(Backend::Mlir))
    GTEST_SKIP() << "this build has no MLIR backend (MHAGEN_ENABLE_MLIR=OFF)";
  const std::map<int64_t, int64_t> defaultTile = {
      {1, 1}, {7, 7}, {12, 12}, {16, 16}, {48, 16}, {64, 32}, {100, 10}};
  for (const auto &[block, want] : defaultTile) {
    AttentionSpec s =
        parseSpecs("spec p { op = sdpa; d = 256; h = 4; kv = 2; backend = "
                   "mlir; target = avx2; kv_cache = paged(" +
                       std::to_string(block) + ") }",
                   "t")
            .at(0);
    ScheduleSpace space = kernelBackend(Backend::Mlir).scheduleSpace(s);
    EXPECT_EQ(space.defaults.at("key_tile"), want) << "paged(" << block << ")";
    EXPECT_TRUE(space.valid(space.defaults)) << space.violation(space.defaults);
    EXPECT_EQ(block % space.defaults.at("decode_key_tile"), 0);
    for (const ParamDecl &d : space.params)
      if (d.name == "key_tile" || d.name == "decode_key_tile") {
        EXPECT_TRUE(std::is_sorted(d.values.begin(), d.values.end()));
        for (int64_t kt : d.values) {
          EXPECT_EQ(block % kt, 0)
              << d.name << " paged(" << block << "): " << kt;
          EXPECT_TRUE(kt <= 16 || kt % 16 == 0) << kt;
        }
      }
  }
}

// The split-KV form's key tile comes from the L1 data cache: the longest
// of 16, 32, 64 keys whose f32 K and V tiles of one head fill at most half
// of it. The presets model a 32 KiB L1d: 16 KiB for the two tiles.
TEST(SearchSpace, MlirDecodeKeyTileFitsHalfTheL1) {
  if (!backendBuilt(Backend::Mlir))
    GTEST_SKIP() << "this build has no MLIR backend (MHAGEN_ENABLE_MLIR=OFF)";
  // d_k -> tile: 128 x (16 + 16) x 4 = 16 KiB at 16 keys; 64 at 32; 32 at
  // 64 (the longest offered); 80 at 16 (32 keys would take 20 KiB).
  const std::map<int64_t, int64_t> want = {
      {128, 16}, {64, 32}, {32, 64}, {80, 16}};
  for (const char *target : {"avx2", "avx512"})
    for (const auto &[dk, tile] : want) {
      AttentionSpec s =
          parseSpecs("spec p { op = sdpa; d = " + std::to_string(4 * dk) +
                         "; h = 4; kv = 2; backend = mlir; target = " + target +
                         " }",
                     "t")
              .at(0);
      ASSERT_EQ(machineOf(s.target).l1dBytes, 32 * 1024) << target;
      ScheduleSpace space = kernelBackend(Backend::Mlir).scheduleSpace(s);
      EXPECT_EQ(space.defaults.at("decode_key_tile"), tile)
          << target << " d_k " << dk;
      EXPECT_TRUE(space.valid(space.defaults))
          << space.violation(space.defaults);
    }
}

TEST(SearchSpace, ProposalsAreValidAndNeverRepeat) {
  ScheduleSpace space =
      kernelBackend(Backend::Halide).scheduleSpace(testSpec());
  SearchOptions so;
  so.budget = 200;
  ScheduleSearch search(space, so);
  std::set<std::string> seen;
  for (int i = 0; i < 200; ++i) {
    std::string phase;
    auto p = search.next(&phase);
    ASSERT_TRUE(p);
    EXPECT_TRUE(space.valid(*p)) << space.violation(*p);
    EXPECT_TRUE(seen.insert(scheduleParamsToJson(*p)).second);
    if (i == 0)
      EXPECT_EQ(phase, "default");
    search.report(*p, true, 10.0 + i % 7);
  }
}

TEST(SearchSpace, ShardsPartitionTheSpace) {
  ScheduleSpace space =
      kernelBackend(Backend::Halide).scheduleSpace(testSpec());
  ScheduleParams p = space.defaults;
  int owners = 0;
  for (int i = 0; i < 3; ++i)
    owners += inShard(p, i, 3) ? 1 : 0;
  EXPECT_EQ(owners, 1);
  SearchOptions so;
  so.shardIndex = 1;
  so.shardCount = 3;
  ScheduleSearch search(space, so);
  for (int i = 0; i < 50; ++i) {
    auto q = search.next();
    ASSERT_TRUE(q);
    EXPECT_TRUE(inShard(*q, 1, 3));
    search.report(*q, true, 1);
  }
}

namespace {
// A correct trial of spec "abc" on avx512 (halide) that took 1.5 ms.
TrialRecord okRecord() {
  TrialRecord r;
  r.specHash = "abc";
  r.target = "avx512";
  r.backend = "halide";
  r.params = {{"key_tile", 32}, {"s_rows", 32}};
  r.status = TrialStatus::Ok;
  r.medianMs = 1.5;
  r.timesMs = {1.5};
  r.T = 64;
  r.Tkv = 64;
  return r;
}
} // namespace

TEST(Database, RoundTripAndTornLines) {
  TempDir dir("mhagen-db");
  const std::string path = dir.file("db.jsonl");
  TrialRecord r = okRecord();
  {
    TuningDb db(path);
    db.append(r);
  }
  // A writer killed mid-line leaves a torn record without a newline ...
  {
    std::ofstream out(path, std::ios::app);
    out << R"({"spec_hash":"abc","target":"avx512","backend":"hal)";
  }
  // ... and the next append starts on a fresh line.
  TrialRecord r2 = r;
  r2.medianMs = 1.2;
  r2.status = TrialStatus::Ok;
  {
    TuningDb db(path);
    db.append(r2);
  }
  TuningDb db(path);
  ASSERT_EQ(db.records().size(), 2u);
  ASSERT_EQ(db.warnings().size(), 1u);
  EXPECT_NE(db.warnings()[0].find("torn or invalid"), std::string::npos);
  TrialRecord back;
  ASSERT_TRUE(TrialRecord::fromJson(r.toJsonLine(), back, nullptr));
  EXPECT_EQ(back.toJsonLine(), r.toJsonLine());
  ASSERT_TRUE(db.best("abc", "avx512", "halide"));
  EXPECT_DOUBLE_EQ(db.best("abc", "avx512", "halide")->medianMs, 1.2);
  EXPECT_FALSE(db.best("abc", "avx2", "halide"));
}

TEST(Database, ConcurrentAppendsNeverInterleave) {
  TempDir dir("mhagen-db");
  const std::string path = dir.file("db.jsonl");
  const int kProcs = 6, kEach = 40;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = fork();
    if (pid == 0) {
      TuningDb db(path);
      TrialRecord r;
      r.specHash = "proc" + std::to_string(p);
      r.target = "avx512";
      r.backend = "halide";
      r.error = std::string(2000, 'x'); // long lines
      r.medianMs = 1.0;                 // a time a correct trial can take
      for (int i = 0; i < kEach; ++i) {
        r.params = {{"i", i}};
        db.append(r);
      }
      _exit(0);
    }
  }
  for (int p = 0; p < kProcs; ++p)
    wait(nullptr);
  TuningDb db(path);
  EXPECT_EQ(db.records().size(), static_cast<size_t>(kProcs * kEach));
  EXPECT_TRUE(db.warnings().empty());
}

TEST(Tuner, FindsTheBestAndRecordsEveryTrial) {
  TempDir dir("mhagen-tune");
  TuneOptions o = fakeOptions(dir.file("db.jsonl"), 40);
  TuneSummary s = runTuning(o);
  EXPECT_EQ(s.trials, 40);
  ASSERT_TRUE(s.best);
  ASSERT_TRUE(s.baseline);
  EXPECT_LE(s.best->medianMs, s.baseline->medianMs);
  TuningDb db(o.dbPath);
  EXPECT_EQ(db.records().size(), 40u + 3u); // + re-measured finalists
  int defaults = 0;
  for (const TrialRecord &r : db.records())
    defaults += r.phase == "default";
  EXPECT_EQ(defaults, 1);
}

TEST(Tuner, BeatsRandomSearchAtEqualBudget) {
  // On the fake landscape, averaged over seeds, the evolving search ends
  // closer to the optimum (10 ms) than random sampling with the same budget.
  double evolve = 0, random = 0;
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    for (const char *strategy : {"evolve", "random"}) {
      TempDir dir("mhagen-tune");
      TuneOptions o = fakeOptions(dir.file("db.jsonl"), 36);
      o.search.seed = seed;
      o.search.strategy = strategy;
      o.remeasureTop = 0;
      TuneSummary s = runTuning(o);
      ASSERT_TRUE(s.best);
      (std::string(strategy) == "evolve" ? evolve : random) +=
          s.best->medianMs - 10.0;
    }
  }
  EXPECT_LT(evolve, random) << "evolve excess " << evolve / 4
                            << " ms, random excess " << random / 4 << " ms";
  std::printf("mean excess over the optimum: evolve %.2f ms, random %.2f ms\n",
              evolve / 4, random / 4);
}

TEST(Tuner, ResumesFromItsDatabase) {
  TempDir dir("mhagen-tune");
  TuneOptions o = fakeOptions(dir.file("db.jsonl"), 10);
  o.remeasureTop = 0;
  runTuning(o);
  o.search.budget = 16;
  o.search.seed = 7;
  TuneSummary s = runTuning(o);
  EXPECT_EQ(s.resumed, 10);
  EXPECT_EQ(s.trials, 6); // only the rest of the budget
  TuningDb db(o.dbPath);
  std::set<std::string> points;
  for (const TrialRecord &r : db.records())
    if (r.phase != "remeasure")
      EXPECT_TRUE(points.insert(scheduleParamsToJson(r.params)).second)
          << "a point was measured twice";
}

TEST(Tuner, ShardDatabasesConcatenate) {
  TempDir dir("mhagen-tune");
  std::string all;
  for (int i = 0; i < 2; ++i) {
    TuneOptions o = fakeOptions(dir.file("shard" + std::to_string(i)), 8);
    o.search.shardIndex = i;
    o.search.shardCount = 2;
    o.remeasureTop = 0;
    runTuning(o);
    all += readFile(o.dbPath);
  }
  writeFile(dir.file("merged.jsonl"), all);
  TuningDb merged(dir.file("merged.jsonl"));
  EXPECT_EQ(merged.records().size(), 16u);
  std::set<std::string> points;
  for (const TrialRecord &r : merged.records()) {
    EXPECT_TRUE(points.insert(scheduleParamsToJson(r.params)).second);
    EXPECT_FALSE(r.shard.empty());
  }
  EXPECT_TRUE(merged.best(testSpec().hash(), "avx512", "halide"));
}

TEST(Tuner, CrashesHangsAndWrongResultsAreFailedTrials) {
  TempDir dir("mhagen-tune");
  // 24 trials: enough that the seeded sample of the (now 15-parameter)
  // space holds each fault below at least once.
  TuneOptions o = fakeOptions(dir.file("db.jsonl"), 24);
  o.trialTimeoutSeconds = 1;
  o.remeasureTop = 1;
  // The default point has key_tile = 32 (wrong results: fast, but never
  // allowed to win); stage_kv = 0 crashes, task_order = 1 hangs.
  ScopedEnv faults("FAKE_TRIAL_FAULTS",
                   "key_tile=32:wrong,stage_kv=0:crash,task_order=1:hang");
  TuneSummary s = runTuning(o);
  TuningDb db(o.dbPath);
  std::map<std::string, int> byStatus;
  for (const TrialRecord &r : db.records()) {
    ++byStatus[toString(r.status)];
    if (r.params.at("key_tile") == 32)
      EXPECT_EQ(r.status, TrialStatus::Wrong);
    else if (r.params.at("stage_kv") == 0)
      EXPECT_EQ(r.status, TrialStatus::Crash);
    else if (r.params.at("task_order") == 1)
      EXPECT_EQ(r.status, TrialStatus::Timeout);
    else
      EXPECT_EQ(r.status, TrialStatus::Ok);
  }
  EXPECT_GE(byStatus["wrong"], 1); // the default point at least
  EXPECT_GE(byStatus["crash"], 1);
  EXPECT_GE(byStatus["timeout"], 1);
  EXPECT_GE(byStatus["ok"], 1);
  // Never a failed schedule as the winner, however fast it claimed to be.
  ASSERT_TRUE(s.best);
  EXPECT_NE(s.best->params.at("key_tile"), 32);
  EXPECT_EQ(s.best->params.at("stage_kv"), 1);
  EXPECT_EQ(s.best->params.at("task_order"), 0);
  auto best = db.best(testSpec().hash(), "avx512", "halide");
  if (best)
    EXPECT_EQ(best->status, TrialStatus::Ok);
}

TEST(Tuner, GenerationFallsBackWithoutARecord) {
  TempDir dir("mhagen-tune");
  GenerateOptions g;
  EXPECT_FALSE(applyTuningDatabase(testSpec(), dir.file("missing.jsonl"), g));
  EXPECT_NE(g.scheduleSource.note.find("does not exist"), std::string::npos);
  TuneOptions o = fakeOptions(dir.file("db.jsonl"), 5);
  runTuning(o);
  AttentionSpec other = testSpec();
  other.n_kv = 4;
  EXPECT_FALSE(applyTuningDatabase(other, o.dbPath, g));
  EXPECT_NE(g.scheduleSource.note.find("no correct record"), std::string::npos);
  GenerateOptions h;
  ASSERT_TRUE(applyTuningDatabase(testSpec(), o.dbPath, h));
  EXPECT_EQ(h.scheduleSource.kind, "tuned");
  EXPECT_FALSE(h.schedule.empty());
}

// A record whose parameters the schedule space refuses (an unknown name,
// a value outside the space) is skipped with a warning naming it, even
// when it claims to be the fastest; with no other record, the default.
TEST(Tuner, GenerationSkipsRecordsTheScheduleSpaceRefuses) {
  TempDir dir("mhagen-tune");
  TuneOptions o = fakeOptions(dir.file("db.jsonl"), 5);
  runTuning(o);
  GenerateOptions good;
  ASSERT_TRUE(applyTuningDatabase(testSpec(), o.dbPath, good));
  std::optional<TrialRecord> chosen;
  const TuningDb written(o.dbPath);
  for (const TrialRecord &r : written.records())
    if (r.trialId == good.scheduleSource.trialId)
      chosen = r;
  ASSERT_TRUE(chosen);
  TrialRecord unknown = *chosen, outside = *chosen;
  unknown.trialId = "forged-unknown";
  unknown.medianMs = chosen->medianMs / 10;
  unknown.params["warp_speed"] = 9;
  outside.trialId = "forged-outside";
  outside.medianMs = chosen->medianMs / 10;
  outside.params["key_tile"] = 7;
  {
    TuningDb db(o.dbPath);
    db.append(unknown);
    db.append(outside);
  }
  GenerateOptions g;
  std::vector<std::string> warnings;
  ASSERT_TRUE(applyTuningDatabase(testSpec(), o.dbPath, g, &warnings));
  EXPECT_EQ(g.scheduleSource.trialId, chosen->trialId);
  EXPECT_EQ(g.schedule, chosen->params);
  auto warned = [&](const std::string &text) {
    for (const std::string &w : warnings)
      if (w.find(text) != std::string::npos)
        return true;
    return false;
  };
  std::string all;
  for (const std::string &w : warnings)
    all += w + "\n";
  EXPECT_TRUE(warned("record forged-unknown skipped: schedule: unknown "
                     "schedule parameter 'warp_speed'"))
      << all;
  EXPECT_TRUE(warned("record forged-outside skipped: schedule: key_tile = 7 "
                     "is not an allowed value (allowed: 16, 24, 32, 48, 64, "
                     "96, 128)"))
      << all;

  const std::string onlyForged = dir.file("forged.jsonl");
  {
    TuningDb db(onlyForged);
    db.append(unknown);
    db.append(outside);
  }
  GenerateOptions fallback;
  EXPECT_FALSE(applyTuningDatabase(testSpec(), onlyForged, fallback));
  EXPECT_NE(fallback.scheduleSource.note.find("no correct record"),
            std::string::npos)
      << fallback.scheduleSource.note;
  EXPECT_TRUE(fallback.schedule.empty());
}

// A correct trial whose time no call can take is a corrupted record: it is
// skipped with a warning, never ranked fastest (nor carried by --merge).
TEST(Database, ImpossibleTimesAreRefused) {
  TempDir dir("mhagen-db");
  const std::string path = dir.file("db.jsonl");
  const TrialRecord r = okRecord();
  {
    TuningDb db(path);
    db.append(r);
    for (double bad : {0.0, -5.0, 1e-300}) {
      TrialRecord forged = r;
      forged.medianMs = bad;
      db.append(forged);
    }
    TrialRecord failed = r; // a failed trial has no time
    failed.status = TrialStatus::Wrong;
    failed.medianMs = 0;
    db.append(failed);
  }
  TuningDb db(path);
  EXPECT_EQ(db.records().size(), 2u);
  ASSERT_EQ(db.warnings().size(), 3u);
  EXPECT_NE(db.warnings()[0].find("is not a call's time"), std::string::npos)
      << db.warnings()[0];
  ASSERT_TRUE(db.best("abc", "avx512", "halide"));
  EXPECT_DOUBLE_EQ(db.best("abc", "avx512", "halide")->medianMs, 1.5);
  const std::string merged = dir.file("merged.jsonl");
  TuningDbMerge m = mergeTuningDatabases({path}, merged);
  EXPECT_EQ(m.records, 2);
  EXPECT_EQ(m.warnings.size(), 3u);
  EXPECT_EQ(TuningDb(merged).records().size(), 2u);
  EXPECT_TRUE(TuningDb(merged).warnings().empty());
}

// ---- durability ---------------------------------
namespace {

// Runs runTuning in a forked child; returns its pid.
pid_t tuneInChild(const TuneOptions &o) {
  pid_t pid = fork();
  if (pid == 0) {
    try {
      runTuning(o);
    } catch (...) {
      _exit(3);
    }
    _exit(0);
  }
  return pid;
}

int waitFor(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

// Records of the search (not the final re-measurements): each schedule
// point is measured once, whatever was killed or ran concurrently.
void expectNoDuplicateTrials(const TuningDb &db, size_t expected) {
  std::set<std::string> seen;
  size_t search = 0;
  for (const TrialRecord &r : db.records()) {
    if (r.phase == "remeasure")
      continue;
    ++search;
    EXPECT_TRUE(seen.insert(scheduleParamsToJson(r.params)).second)
        << "measured twice: " << scheduleParamsToJson(r.params);
  }
  EXPECT_EQ(search, expected);
}

bool leftoverTrialDir(const std::string &tmp, pid_t pid) {
  const std::string prefix = "mhagen-trial." + std::to_string(pid) + ".";
  for (const auto &e : std::filesystem::directory_iterator(tmp))
    if (e.path().filename().string().rfind(prefix, 0) == 0)
      return true;
  return false;
}

} // namespace

TEST(Durability, KillNineAtRandomMomentsThenResume) {
  TempDir dir("durability");
  ScopedEnv tmp("TMPDIR", dir.path());
  ScopedEnv slow("FAKE_RUNNER_SLEEP_MS", "30");
  const std::string db = dir.file("db.jsonl");
  const int budget = 24;
  std::mt19937 rng(12);
  std::vector<pid_t> killed;
  for (int round = 0; round < 5; ++round) {
    pid_t pid = tuneInChild(fakeOptions(db, budget));
    std::this_thread::sleep_for(std::chrono::milliseconds(
        std::uniform_int_distribution<int>(40, 400)(rng)));
    kill(pid, SIGKILL);
    waitFor(pid);
    killed.push_back(pid);
  }
  // The last run finishes: it resumes from every record that was written.
  TuneSummary sum = runTuning(fakeOptions(db, budget));
  EXPECT_EQ(sum.ok + sum.failed, budget);
  TuningDb after(db);
  expectNoDuplicateTrials(after, budget);
  for (pid_t pid : killed)
    EXPECT_FALSE(leftoverTrialDir(dir.path(), pid))
        << "temporary directory of killed tuner " << pid << " remains";
  GenerateOptions g;
  EXPECT_TRUE(applyTuningDatabase(testSpec(), db, g)) << g.scheduleSource.note;
}

TEST(Durability, SigtermRemovesTemporaryDirectories) {
  TempDir dir("durability-term");
  ScopedEnv tmp("TMPDIR", dir.path());
  ScopedEnv slow("FAKE_RUNNER_SLEEP_MS", "300");
  pid_t pid = tuneInChild(fakeOptions(dir.file("db.jsonl"), 10));
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  kill(pid, SIGTERM);
  int status = waitFor(pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  EXPECT_FALSE(leftoverTrialDir(dir.path(), pid));
}

TEST(Durability, TwoTunersOnOneDatabaseDoNotDuplicate) {
  TempDir dir("durability-two");
  ScopedEnv slow("FAKE_RUNNER_SLEEP_MS", "10");
  const std::string db = dir.file("db.jsonl");
  const int budget = 16;
  pid_t a = tuneInChild(fakeOptions(db, budget));
  pid_t b = tuneInChild(fakeOptions(db, budget));
  int sa = waitFor(a), sb = waitFor(b);
  EXPECT_TRUE(WIFEXITED(sa) && WEXITSTATUS(sa) == 0);
  EXPECT_TRUE(WIFEXITED(sb) && WEXITSTATUS(sb) == 0);
  TuningDb after(db);
  EXPECT_TRUE(after.warnings().empty());
  expectNoDuplicateTrials(after, budget);
}

// ---- Machine classes (records keyed by the machine) ----

namespace {

MachineClass classOf(const std::string &key) {
  MachineClass c;
  std::string why;
  EXPECT_TRUE(MachineClass::fromKey(key, c, &why)) << why;
  return c;
}

const char *kSprKey = "GenuineIntel 6/143 l2=2048K l3=266240K cores=2 "
                      "isa=avx,avx2,avx512_bf16,avx512bw,avx512f,fma";
const char *kZen4Key = "AuthenticAMD 25/17 l2=1024K l3=32768K cores=2 "
                       "isa=avx,avx2,avx512_bf16,avx512bw,avx512f,fma";
const char *kZen3Key =
    "AuthenticAMD 25/1 l2=512K l3=32768K cores=2 isa=avx,avx2,fma";

TrialRecord classRecord(const std::string &cls, double ms, int64_t keyTile) {
  TrialRecord r;
  r.specHash = "abc";
  r.target = "avx2";
  r.backend = "halide";
  r.machineClass = cls;
  r.params = {{"key_tile", keyTile}};
  r.status = TrialStatus::Ok;
  r.medianMs = ms;
  r.trialId = cls.substr(0, 6) + "-" + std::to_string(keyTile);
  return r;
}

} // namespace

TEST(MachineClass, KeyRoundTripsAndBadKeysNameTheField) {
  const MachineClass host = MachineClass::host();
  EXPECT_TRUE(host.known());
  EXPECT_FALSE(host.isa.empty());
  MachineClass back = classOf(host.key());
  EXPECT_EQ(back.key(), host.key());
  EXPECT_EQ(machineClassDistance(host, back), 0);
  MachineClass c;
  std::string why;
  EXPECT_FALSE(MachineClass::fromKey("GenuineIntel 6/143 l2=2048K", c, &why));
  EXPECT_NE(why.find("l2, l3, cores and isa are all needed"), std::string::npos)
      << why;
  EXPECT_FALSE(MachineClass::fromKey(
      "GenuineIntel six/143 l2=1K l3=1K cores=2 isa=avx", c, &why));
  EXPECT_NE(why.find("bad family/model"), std::string::npos) << why;
  EXPECT_FALSE(MachineClass::fromKey(
      "GenuineIntel 6/143 l2=1M l3=1K cores=2 isa=avx", c, &why));
  EXPECT_NE(why.find("l2 must be a size in KiB"), std::string::npos) << why;
  EXPECT_FALSE(MachineClass::fromKey(
      "GenuineIntel 6/143 l2=1K l3=1K cores=2 isa=avx gpu=1", c, &why));
  EXPECT_NE(why.find("unknown field 'gpu'"), std::string::npos) << why;
}

TEST(MachineClass, TheIsaWeighsMostThenTheL2) {
  const MachineClass spr = classOf(kSprKey), zen4 = classOf(kZen4Key),
                     zen3 = classOf(kZen3Key);
  // Zen 4 is nearer to SPR (same ISA) than Zen 3 (no AVX-512) is.
  EXPECT_LT(machineClassDistance(zen4, spr), machineClassDistance(zen4, zen3));
  // Symmetric, and the same L2 and vendor beat a different one.
  EXPECT_EQ(machineClassDistance(spr, zen3), machineClassDistance(zen3, spr));
  MachineClass zen4BigL2 = zen4;
  zen4BigL2.l2Bytes = 2048 * 1024;
  EXPECT_LT(machineClassDistance(zen4BigL2, spr),
            machineClassDistance(zen4, spr));
}

TEST(MachineClass, GenerationPicksTheRecordOfItsClassElseTheNearest) {
  TempDir dir("mhagen-class");
  const std::string path = dir.file("db.jsonl");
  {
    TuningDb db(path);
    // The SPR record is the fastest in absolute terms; a Zen 3 user must
    // still get the Zen 3 record.
    db.append(classRecord(kSprKey, 1.0, 64));
    db.append(classRecord(kZen3Key, 3.0, 32));
    db.append(classRecord(kZen3Key, 2.5, 48));
    TrialRecord legacy = classRecord("", 0.5, 16); // before machine classes
    db.append(legacy);
  }
  TuningDb db(path);
  auto onZen3 = db.bestFor("abc", "avx2", "halide", classOf(kZen3Key));
  ASSERT_TRUE(onZen3);
  EXPECT_TRUE(onZen3->sameClass());
  EXPECT_EQ(onZen3->record.params.at("key_tile"), 48);
  EXPECT_EQ(onZen3->describe(), "measured on this machine class");
  // A Zen 4 has no record of its own: the SPR one (same ISA) is nearer
  // than the Zen 3 one, and the choice says so.
  auto onZen4 = db.bestFor("abc", "avx2", "halide", classOf(kZen4Key));
  ASSERT_TRUE(onZen4);
  EXPECT_FALSE(onZen4->sameClass());
  EXPECT_EQ(onZen4->machineClass, kSprKey);
  EXPECT_NE(onZen4->describe().find("nearest"), std::string::npos);
  EXPECT_NE(onZen4->describe().find("GenuineIntel 6/143"), std::string::npos);
  // A database of unrecorded records still serves, last.
  TuningDb legacyOnly(dir.file("legacy.jsonl"));
  legacyOnly.append(classRecord("", 0.5, 16));
  auto old = legacyOnly.bestFor("abc", "avx2", "halide", classOf(kZen4Key));
  ASSERT_TRUE(old);
  EXPECT_NE(old->describe().find("unrecorded"), std::string::npos);
  // Through the generator's entry point: the note names the class.
  AttentionSpec s = testSpec();
  {
    TuningDb real(dir.file("real.jsonl"));
    TrialRecord r = classRecord(kSprKey, 1.0, 64);
    r.specHash = s.hash();
    r.target = s.target.str();
    real.append(r);
  }
  GenerateOptions g;
  const MachineClass zen4 = classOf(kZen4Key);
  ASSERT_TRUE(
      applyTuningDatabase(s, dir.file("real.jsonl"), g, nullptr, &zen4));
  EXPECT_EQ(g.scheduleSource.machineClass, kSprKey);
  EXPECT_NE(g.scheduleSource.note.find("another machine class"),
            std::string::npos)
      << g.scheduleSource.note;
  const MachineClass spr = classOf(kSprKey);
  ASSERT_TRUE(applyTuningDatabase(s, dir.file("real.jsonl"), g, nullptr, &spr));
  EXPECT_TRUE(g.scheduleSource.note.empty()) << g.scheduleSource.note;
}

TEST(MachineClass, TunerRecordsTheClassAndResumesOnlyItsOwn) {
  TempDir dir("mhagen-class-tune");
  TuneOptions o = fakeOptions(dir.file("db.jsonl"), 4);
  o.remeasureTop = 0;
  {
    // Another class measured the default point already: this machine must
    // measure it again rather than resume from it.
    TuningDb db(o.dbPath);
    TrialRecord r = classRecord(kZen3Key, 0.1, 32);
    r.specHash = o.spec.hash();
    r.target = o.spec.target.str();
    r.B = o.B;
    r.T = o.T;
    r.Tkv = o.T;
    r.params = kernelBackend(Backend::Halide).scheduleSpace(o.spec).defaults;
    db.append(r);
  }
  TuneSummary s = runTuning(o);
  EXPECT_EQ(s.resumed, 0);
  TuningDb db(o.dbPath);
  int own = 0;
  for (const TrialRecord &r : db.records())
    own += r.machineClass == MachineClass::host().key();
  EXPECT_EQ(own, 4);
}

// ---- Shards from batch systems, and merging databases ----

namespace {

EnvLookup envTable(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char *name) -> const char * {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

} // namespace

TEST(TuneShard, FlagSlurmAndKubernetes) {
  TuneShard s;
  std::string why;
  ASSERT_TRUE(resolveTuneShard("", 0, envTable({}), s, &why));
  EXPECT_EQ(s.count, 1);
  ASSERT_TRUE(resolveTuneShard(
      "2/5", 0, envTable({{"SLURM_ARRAY_TASK_ID", "9"}}), s, &why));
  EXPECT_EQ(s.index, 2);
  EXPECT_EQ(s.count, 5);
  EXPECT_EQ(s.source, "--shard"); // the flag wins over the environment
  // sbatch --array=0-3
  ASSERT_TRUE(resolveTuneShard("", 0,
                               envTable({{"SLURM_ARRAY_TASK_ID", "3"},
                                         {"SLURM_ARRAY_TASK_COUNT", "4"},
                                         {"SLURM_ARRAY_TASK_MIN", "0"}}),
                               s, &why))
      << why;
  EXPECT_EQ(s.index, 3);
  EXPECT_EQ(s.count, 4);
  EXPECT_EQ(s.source, "SLURM_ARRAY_TASK_ID");
  // sbatch --array=10-16:2 -> ids 10 12 14 16 are shards 0..3.
  ASSERT_TRUE(resolveTuneShard("", 0,
                               envTable({{"SLURM_ARRAY_TASK_ID", "14"},
                                         {"SLURM_ARRAY_TASK_COUNT", "4"},
                                         {"SLURM_ARRAY_TASK_MIN", "10"},
                                         {"SLURM_ARRAY_TASK_STEP", "2"}}),
                               s, &why))
      << why;
  EXPECT_EQ(s.index, 2);
  EXPECT_FALSE(resolveTuneShard("", 0,
                                envTable({{"SLURM_ARRAY_TASK_ID", "13"},
                                          {"SLURM_ARRAY_TASK_COUNT", "4"},
                                          {"SLURM_ARRAY_TASK_MIN", "10"},
                                          {"SLURM_ARRAY_TASK_STEP", "2"}}),
                                s, &why));
  EXPECT_NE(why.find("SLURM_ARRAY_TASK_ID=13 is not one of the 4 ids"),
            std::string::npos)
      << why;
  EXPECT_FALSE(resolveTuneShard("", 0, envTable({{"SLURM_ARRAY_TASK_ID", "1"}}),
                                s, &why));
  EXPECT_NE(why.find("SLURM_ARRAY_TASK_COUNT"), std::string::npos) << why;
  EXPECT_FALSE(resolveTuneShard("", 0,
                                envTable({{"SLURM_ARRAY_TASK_ID", "x1"},
                                          {"SLURM_ARRAY_TASK_COUNT", "4"}}),
                                s, &why));
  EXPECT_NE(why.find("SLURM_ARRAY_TASK_ID=x1"), std::string::npos) << why;
  // An indexed Kubernetes Job: the count is a flag.
  ASSERT_TRUE(resolveTuneShard("", 8, envTable({{"JOB_COMPLETION_INDEX", "5"}}),
                               s, &why))
      << why;
  EXPECT_EQ(s.index, 5);
  EXPECT_EQ(s.count, 8);
  EXPECT_FALSE(resolveTuneShard(
      "", 0, envTable({{"JOB_COMPLETION_INDEX", "5"}}), s, &why));
  EXPECT_NE(why.find("--shards N"), std::string::npos) << why;
  EXPECT_FALSE(resolveTuneShard(
      "", 4, envTable({{"JOB_COMPLETION_INDEX", "5"}}), s, &why));
  EXPECT_FALSE(resolveTuneShard("", 4, envTable({}), s, &why));
  EXPECT_NE(why.find("needs JOB_COMPLETION_INDEX"), std::string::npos) << why;
  EXPECT_FALSE(resolveTuneShard("4/4", 0, envTable({}), s, &why));
  EXPECT_FALSE(resolveTuneShard("1/2x", 0, envTable({}), s, &why));
}

TEST(Database, MergeDeduplicatesAndGroupsByMachineClass) {
  TempDir dir("mhagen-merge");
  const std::string a = dir.file("a.jsonl"), b = dir.file("b.jsonl");
  {
    TuningDb da(a), db(b);
    da.append(classRecord(kSprKey, 1.0, 64));
    da.append(classRecord(kZen3Key, 3.0, 32));
    db.append(classRecord(kZen3Key, 3.0, 32)); // the same record again
    db.append(classRecord(kSprKey, 1.5, 48));
  }
  {
    std::ofstream torn(b, std::ios::app);
    torn << R"({"spec_hash":"ab)";
  }
  const std::string out = dir.file("all.jsonl");
  TuningDbMerge m = mergeTuningDatabases({a, b}, out);
  EXPECT_EQ(m.records, 3);
  EXPECT_EQ(m.duplicates, 1);
  EXPECT_EQ(m.warnings.size(), 1u);
  ASSERT_EQ(m.perClass.size(), 2u);
  EXPECT_EQ(m.perClass[0], std::make_pair(std::string(kSprKey), int64_t{2}));
  EXPECT_EQ(m.perClass[1], std::make_pair(std::string(kZen3Key), int64_t{1}));
  TuningDb merged(out);
  ASSERT_EQ(merged.records().size(), 3u);
  EXPECT_TRUE(merged.warnings().empty());
  // Grouped: both SPR records first.
  EXPECT_EQ(merged.records()[0].machineClass, kSprKey);
  EXPECT_EQ(merged.records()[1].machineClass, kSprKey);
  EXPECT_EQ(merged.records()[2].machineClass, kZen3Key);
  // Merging into one of the inputs, and merging again, changes nothing.
  m = mergeTuningDatabases({out, a}, out);
  EXPECT_EQ(m.records, 3);
  EXPECT_EQ(m.duplicates, 2);
  EXPECT_THROW(mergeTuningDatabases({dir.file("missing.jsonl")}, out),
               std::runtime_error);
  EXPECT_EQ(TuningDb(out).records().size(), 3u) << "a failed merge writes "
                                                   "nothing";
}
