#include "CpuSchedule.h"
#include "ScheduleHelpers.h"

#include "mhagen/spec/BackendResult.h"

#include <algorithm>

namespace mhagen::hl {

using namespace Halide;

// Defaults, first measured on a Sapphire Rapids VM (2 cores, f32, B1 T2048
// h32 kv8 dk128 causal; see docs/performance.md): a 64-row
// query tile (16 tokens x 4 heads of one GQA group), 32-key tiles, 32x8
// register blocks for both QK^T and PV (16 zmm accumulators); calls of at
// least 512 tokens take a longer tile sized from the L2, whose tasks copy
// K/V once for several query tiles (below). On a Zen 4
// 60 trials of `mhagen tune` find nothing faster on S1 (1.00x) or S3
// (1.01x) (docs/performance.md, "Prefill").

// One task's scratch in bytes for a query tile of `rows` and key tiles of
// `keyTile`: the tile's Q, scores and probabilities, the accumulators and
// their (max, sum) per channel block, and with stageKv the K/V tile.
static int64_t taskScratchBytes(int64_t rows, int64_t keyTile, int64_t dk,
                                int64_t dv, int64_t channelBlock,
                                bool stageKv) {
  int64_t bytes =
      4 * rows * (dk + 2 * keyTile + 2 * dv + 2 * dv / channelBlock + 4);
  if (stageKv)
    bytes += 4 * keyTile * (dk + dv);
  return bytes;
}

ScheduleSpace cpuScheduleSpace(const AttentionSpec &s,
                               const HalideTargetInfo &target) {
  ScheduleSpace space;
  const int64_t vw = target.vectorWidth;
  // Hardware facts from the target's machine model.
  const int64_t regs = target.machine->vectorRegisters;
  const int64_t scratchBudget = target.machine->scratchBudget();
  const int64_t group = s.h / s.n_kv;
  const bool layer = s.op == Op::Layer;
  // Several query tiles per task need a static T_kv, since the task's K/V
  // copy is T_kv long and its memory must be known (the long-call variant
  // bounds T_kv at call time instead). Not the layer: its projections,
  // not its core, set its time.
  const bool multiTileTasks = s.T && !layer;
  // K/V bytes a task copies for all its query tiles, per key: f32 rows,
  // or the bf16 dot product's bf16 K rows and V pairs.
  // (By value: space.violation keeps a copy after the spec is gone.)
  auto stagedKeyBytesOf = [dk = s.d_k, dv = s.d_v](bool bf16Dot) {
    return (bf16Dot ? 2 : 4) * (dk + dv);
  };
  const int64_t stagedBudget = target.machine->stagedKvBudget();
  // The bf16 dot path reads bf16 Q/K/V directly: the attention core of an
  // sdpa kernel on a target with AVX512_BF16.
  const bool bf16DotOk =
      s.op == Op::Sdpa && s.dtype == DType::BF16 &&
      s.kvType() == KvType::BF16 && s.d_k % 2 == 0 &&
      std::find(target.cpuFeatures.begin(), target.cpuFeatures.end(),
                "avx512_bf16") != target.cpuFeatures.end();

  std::vector<int64_t> hp = divisorsUpTo(group, 64);
  space.params = {
      {"heads_per_tile", hp, "query heads of one GQA group per tile"},
      {"tokens_per_tile",
       {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128},
       "tokens per query tile"},
      {"key_tile", {16, 24, 32, 48, 64, 96, 128}, "keys per softmax step"},
      {"channel_block", divisorsUpTo(s.d_v, 32),
       "accumulator channels per state tuple"},
      {"s_rows", {8, 16, 24, 32, 48, 64}, "rows per QK^T register block"},
      {"s_keys", {2, 3, 4, 5, 6, 7, 8, 10, 12, 14}, "keys per QK^T block"},
      {"pv_rows", {8, 16, 24, 32, 48, 64}, "rows per PV register block"},
      {"pv_chans",
       {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14},
       "channels per PV block"},
      {"vector_width",
       vw == 16 ? std::vector<int64_t>{8, 16} : std::vector<int64_t>{8},
       "f32 lanes per vector"},
      {"stage_kv", {0, 1}, "copy K/V tiles to dense f32 scratch"},
      {"tiles_per_task",
       multiTileTasks ? std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64}
                      : std::vector<int64_t>{1},
       "query tiles per task; above 1 the task copies its head block's "
       "K/V once for all of them (stage_kv), not per key tile"},
      {"task_order",
       {0, 1},
       "0: head blocks innermost in the parallel loop; 1: query tiles"},
      {"bf16_dot",
       bf16DotOk ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{0},
       "bf16 pairwise dot products (vdpbf16ps) for QK^T and PV"},
  };
  // Decode: a second variant of the attention core for
  // T_q <= decode_tokens, chosen at call time, whose key axis is split
  // over parallel tasks. sdpa only (a layer's T_kv is its T_q).
  space.params.push_back(
      {"decode_tokens",
       layer ? std::vector<int64_t>{0}
             : std::vector<int64_t>{0, 1, 2, 4, 8, 16},
       "query tokens per tile of the decode variant (0: no decode variant)",
       true});
  for (ParamDecl &d : splitKvParams())
    space.params.push_back(std::move(d));
  // The decode micro-kernel: K/V channels in the vector lanes and only the
  // call's real rows (1), or rows in the lanes like the prefill tile (0).
  // It needs whole vectors of dk and dv channels.
  const bool channelsOk = !layer && s.d_k % vw == 0 && s.d_v % vw == 0;
  space.params.push_back(
      {"decode_layout",
       channelsOk ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{0},
       "decode: 0 rows in vector lanes, 1 channels in lanes (real rows "
       "only)",
       true});
  // The decode micro-kernel's tasks: one head block each (0), or every
  // head block of a key chunk (1), so a staged key tile reads whole token
  // rows of K/V rather than one head's slice of each.
  space.params.push_back(
      {"decode_heads",
       channelsOk ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{0},
       "decode_layout 1: 0 one head block per task, 1 every head block of "
       "a key chunk per task (whole K/V token rows)",
       true});
  space.params.push_back(
      {"decode_stage_kv",
       channelsOk ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{0},
       "decode_layout 1: copy each key tile's K/V to dense f32 scratch "
       "first (0: read the cache in the dot products)",
       true});
  // The long-call variant: a second prefill pipeline with a
  // longer query tile, which the kernel runs for calls of at least
  // long_min_tokens query tokens (HalideWrapper.cpp). Only where T_q is
  // known at call time alone: a static T gets its tile directly, and a
  // ragged batch's sequences may each be short.
  const bool longOk = s.op == Op::Sdpa && !s.T && !s.ragged;
  const std::vector<int64_t> tokensPerTile = space.params[1].values;
  std::vector<int64_t> longTokens = {0};
  if (longOk)
    longTokens.insert(longTokens.end(), tokensPerTile.begin(),
                      tokensPerTile.end());
  space.params.push_back(
      {"long_tokens_per_tile", longTokens,
       "tokens per query tile of the long-call variant (0: no variant)", false,
       true});
  space.params.push_back(
      {"long_key_tile",
       longOk ? space.params[2].values : std::vector<int64_t>{32},
       "keys per softmax step of the long-call variant", false, true});
  space.params.push_back({"long_tiles_per_task",
                          longOk ? std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64}
                                 : std::vector<int64_t>{1},
                          "tiles_per_task of the long-call variant", false,
                          true});
  std::vector<int64_t> maxKeysValues;
  for (int64_t k = 1024; k <= 65536; k *= 2)
    maxKeysValues.push_back(k);
  space.params.push_back(
      {"long_max_keys", longOk ? maxKeysValues : std::vector<int64_t>{65536},
       "the most keys a call runs the long-call variant with, where it "
       "copies K/V per task (long_tiles_per_task > 1)",
       false, true});
  space.params.push_back(
      {"long_min_tokens",
       longOk ? std::vector<int64_t>{128, 256, 512, 1024, 2048}
              : std::vector<int64_t>{512},
       "the fewest query tokens a call runs the long-call variant with", false,
       true});
  if (layer) {
    space.params.push_back(
        {"gemm_cols", {16, 24, 32, 48, 64}, "output features per GEMM block"});
    space.params.push_back(
        {"gemm_rows", {2, 4, 6, 8, 10, 12, 14}, "tokens per GEMM block"});
    space.params.push_back(
        {"gemm_k_block",
         {0, 64, 128, 256, 512},
         "inputs per packed GEMM chunk (0: unpacked column panels over the "
         "whole input)"});
    space.params.push_back(
        {"gemm_n_block",
         {64, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048},
         "output features per parallel GEMM task, at most "
         "(its packed weight chunk stays in the L2)"});
  }

  // Default point.
  ScheduleParams d;
  int64_t heads = 1;
  for (int64_t x : hp)
    if (x <= 16)
      heads = x;
  d["heads_per_tile"] = heads;
  // Two query tiles. Every row of a query tile uses each K/V
  // tile staged for it, so a longer tile reads K/V fewer times; but a call
  // with few tokens computes the tile's padding. The short tile has about
  // 64 rows (B1 T40 h32 kv8 causal: 0.28 ms at 64 rows, 0.45 ms at 128,
  // Sapphire Rapids class). The long tile is the one whose task scratch,
  // with its staged K/V tile, fills at most a third of the L2 of the
  // machine model: the most rows (up to 256), then the longer key tile.
  // On a Zen 4 (1 MiB L2) that is 128 rows with 64-key tiles, 330 KiB: S2
  // f32 215 -> 200 ms, S3 22.2 -> 19.3-20.6 ms, S1 14.5 -> 14.2-14.9 (256
  // rows with 32 keys, 500 KiB: S2 204 ms); but B1 T200 h32 kv8 causal
  // 2.78 -> 3.35 ms (2 threads, 2026-12-05). A 2 MiB L2 gets 256 rows with
  // 64 keys; 256 rows with 32 keys took S2 from 178 to 145 ms there
  // (Sapphire Rapids class, 2026-12-02). A 512 KiB L2 (Zen 3) keeps the
  // short tile. A static T of at least long_min_tokens takes the long
  // tile; with T unknown both are compiled and each call takes one.
  const int64_t longMin = 512;
  const int64_t minTasks = 4 * target.machine->coresOrDefault();
  auto tasksAt = [&](int64_t T, int64_t t) {
    return s.B.value_or(1) * (s.h / heads) * ceilDiv(T, t);
  };
  d["tokens_per_tile"] = 1;
  for (int64_t t : tokensPerTile)
    if (heads * t <= 64)
      d["tokens_per_tile"] = t;
  d["key_tile"] = 32;
  d["stage_kv"] = 1;
  // bf16: pairwise dot products (vdpbf16ps) where the machine model says
  // they retire more FLOPs than the f32 FMA, else widened to f32 for f32
  // FMAs. On a Zen 4 (2x) the dot product with 64-key tiles is the fastest
  // point measured: S2 bf16 206 ms widened, 139 ms dot with 32-key tiles,
  // 126 ms with 64 (f32: 207 ms, 205 with 64-key tiles); S1 15.1 / 10.7 /
  // 10.4 ms; S3 20.4 / 14.7 / 13.0 ms (2 threads, 2026-12-04). On a Sapphire
  // Rapids VM (0.52x) S2 bf16 ran 289 ms with the dot product, 172 ms
  // widened (2026-12-02). The dot product reads bf16 K/V where they lie
  // (stage_kv = 0, which its pairs need).
  d["bf16_dot"] = 0;
  if (bf16DotOk && target.machine->bf16DotPerFma > 1) {
    d["bf16_dot"] = 1;
    d["stage_kv"] = 0;
    d["key_tile"] = 64;
  }
  // The long tile saves K/V staging; the bf16 dot product reads K/V in
  // place and gains nothing from it (S2 bf16 110 ms short, 115 long; S3
  // 11.5-12.0 both; Zen 4 class, 2026-12-05), so it keeps the short tile
  // (whose tasks may still copy K/V once, below).
  const int64_t channelBlock = divisorsUpTo(s.d_v, 16).back();
  int64_t longT = 0, longKeys = 0;
  for (int64_t t : d["stage_kv"] ? tokensPerTile : std::vector<int64_t>{})
    for (int64_t kt : {32, 64}) {
      const int64_t rows = roundUp(heads * t, vw);
      if (rows > 256 || tasksAt(s.T.value_or(longMin), t) < minTasks ||
          taskScratchBytes(rows, kt, s.d_k, s.d_v, channelBlock, true) >
              target.machine->l2Bytes / 3)
        continue;
      if (t > longT || (t == longT && kt > longKeys)) {
        longT = t;
        longKeys = kt;
      }
    }
  // K/V reuse across query tiles: a task of the long tile holds several
  // consecutive query tiles of one head block and copies the K/V they see
  // once, rather than once per query tile and key tile. On a Zen 4 (1 MiB
  // L2), 2 threads, ms: S2 f32 202-206 -> 183-185, S3 21.4 -> 18.8, S1
  // 14.4-15.9 -> 14.0-15.1; the bf16 dot product, whose K rows and V
  // pairs are copies too, on its short tile: S2 113 -> 106, S1 7.99 ->
  // 7.77, S3 11.2-12.4 -> 11.4-12.2 (2026-12-05). The copy reads each K/V
  // row of the head once, and the tiles then read it dense. A task
  // holds as many query tiles as leave every core 4 tasks at
  // long_min_tokens (S1, S2: 16 tiles of 32 tokens; S3: 4 of 128), and
  // its copy, T_kv x (dk + dv) elements, fits the core's share of the L3
  // (MachineModel::stagedKvBudget): a static T_kv at generation time, a
  // dynamic one at call time (long_max_keys; longer calls run the first
  // pipeline).
  const bool staged = d["stage_kv"] == 1 || d["bf16_dot"] == 1;
  const int64_t stagedKeyBytes = stagedKeyBytesOf(d["bf16_dot"] == 1);
  if (staged && longT == 0) {
    longT = d["tokens_per_tile"];
    longKeys = d["key_tile"];
  }
  int64_t maxKeys = 0;
  for (int64_t k : maxKeysValues)
    if (k * stagedKeyBytes <= stagedBudget)
      maxKeys = k;
  // The most query tiles of t tokens per task that leave minTasks tasks
  // (a task of x tiles is one tile of x * t tokens to tasksAt).
  auto tilesPerTaskAt = [&](int64_t T, int64_t t) {
    int64_t g = 1;
    for (int64_t x : {2, 4, 8, 16, 32, 64})
      if (x <= ceilDiv(T, t) && tasksAt(T, x * t) >= minTasks)
        g = x;
    return g;
  };
  const int64_t longTiles =
      staged && longOk && maxKeys ? tilesPerTaskAt(longMin, longT) : 1;
  const bool longDiffers =
      longT > d["tokens_per_tile"] ||
      (longT == d["tokens_per_tile"] && longKeys != d["key_tile"]) ||
      longTiles > 1;
  d["long_tokens_per_tile"] = 0;
  d["long_key_tile"] = longOk && longDiffers ? longKeys : 32;
  d["long_tiles_per_task"] = longOk && longDiffers ? longTiles : 1;
  d["long_max_keys"] = longOk ? std::max<int64_t>(maxKeys, 1024) : 65536;
  d["long_min_tokens"] = longMin;
  d["tiles_per_task"] = 1;
  if (longDiffers && s.T && *s.T >= longMin) {
    d["tokens_per_tile"] = longT;
    d["key_tile"] = longKeys;
    if (staged && multiTileTasks &&
        s.T_kv.value_or(*s.T) * stagedKeyBytes <= stagedBudget)
      d["tiles_per_task"] = tilesPerTaskAt(*s.T, longT);
  } else if (longDiffers && longOk) {
    d["long_tokens_per_tile"] = longT;
  }
  d["channel_block"] = channelBlock;
  d["vector_width"] = vw;
  d["s_rows"] = 2 * vw;
  d["s_keys"] = vw == 16 ? 8 : 4;
  d["pv_rows"] = 2 * vw;
  d["pv_chans"] = std::min<int64_t>(vw == 16 ? 8 : 4, s.d_v);
  // Dense K/V tiles (stage_kv above) keep the key rows' addresses out of
  // the inner loops (measured 26% faster on S2 f32, one thread).
  d["task_order"] = 0;
  // Decode tile: the GQA group's heads times as many tokens as fill one
  // vector, so a T_q = 1 step computes no padding tokens (the prefill
  // tile's 16 tokens made S4 compute 16x the rows it needs: 4.9 ms
  // against 2.1 ms at 2 threads on a Sapphire Rapids, docs/performance.md,
  // "Decode"). With channels in the lanes (decode_layout 1) a call computes
  // only its own rows, so the tile may hold up to two vectors of rows: T_q up
  // to 8 (GQA 4, AVX-512) runs split-KV (T_q 8: 4.7 ms against 5.5 ms for
  // the prefill tile, B1 T_kv 4096 h32 kv8 dk128, 2 threads, Sapphire
  // Rapids class, 2026-12-02).
  // A spec whose static T_q fills the lanes with rows anyway (T_q * heads
  // >= vw) keeps the rows-in-lanes micro-kernel: at 16 rows its lane
  // reductions cost more than they save (SpecDecode T_q 4: 2.47 ms with
  // rows in lanes, 2.96 ms with channels; docs/performance.md, "Decode").
  const bool channelsDefault = channelsOk && !(s.T && *s.T * heads >= vw);
  d["decode_tokens"] = 0;
  const int64_t decodeRows = channelsDefault ? 2 * vw : vw;
  if (!layer)
    for (int64_t t : {1, 2, 4, 8, 16})
      if (t * heads <= decodeRows)
        d["decode_tokens"] = t;
  if (!layer && d["decode_tokens"] == 0)
    d["decode_tokens"] = 1;
  d["decode_layout"] = channelsDefault ? 1 : 0;
  // A decode task over every head of its key chunk reads K/V as whole
  // token rows ([kv, dk] contiguous): with one head per task each row is
  // a 512-byte slice of every 4 KiB (kv 8, dk 128, f32) and the hardware
  // prefetchers lose the stream. S4 f32 1.86 -> 1.31 ms, B16 45.5 -> 29.5
  // ms, S4 f16 1.62 -> 1.04, i8 B16 20.2 -> 14.9 (2 threads, Sapphire
  // Rapids class, 2026-12-02).
  // A paged cache likewise (a token's row is whole within its block): S4
  // paged(16) 2.08 -> 1.46 ms, B16 ragged 63.7 -> 43.6 ms (same machine).
  d["decode_heads"] = channelsDefault ? 1 : 0;
  d["split_tasks"] = 4;
  d["split_min_keys"] = 256;
  // The decode micro-kernel copies each key tile's K/V (every head's
  // rows, widened to f32) to dense scratch before its dot products. Read
  // in place instead (decode_stage_kv = 0), S4 runs faster -- f32 1.37 ->
  // 1.15 ms, bf16 K/V 1.20 -> 0.93, i8 0.97 -> 0.88 -- but f16 K/V (its
  // 9-instruction widening repeated per row) 1.08 -> 1.26, and batches
  // lose: B16 T_kv 2048 f32 16.1 -> 17.8 ms, B16 T_kv 512 3.05 -> 4.47,
  // B1 T_kv 32768 15.9 -> 16.9 (2 threads, Sapphire Rapids class,
  // 2026-12-03). S4 gains only while its 33.5 MB stays in the L3 between
  // calls: from DRAM the copy's whole-row stream reads faster on every
  // type (S4 f32 2.71 vs 3.10 ms, i8 1.32 vs 1.45; bench DecodeCold), so
  // the copy is the default for serving; `mhagen tune` picks per shape.
  // (Wherever the micro-kernel is allowed, so a tuner that switches
  // decode_layout to 1 starts from the copy too.)
  d["decode_stage_kv"] = channelsOk ? 1 : 0;
  if (layer) {
    // Register blocks of 64 x 6 (24 zmm accumulators) and 24 x 4 (12 ymm).
    // With the packed GEMM below, 64 x 6, 32 x 12 and 48 x 8 run within
    // 4 % of each other (layer B1 T512 d4096: 128, 127, 133 ms); 64 splits
    // power-of-two widths into whole blocks.
    d["gemm_cols"] = vw == 16 ? 64 : 24;
    d["gemm_rows"] = vw == 16 ? 6 : 4;
    // The packed GEMM's blocking from the caches of the machine model
    // (schedulePackedGemmCpu): the longest input chunk whose packed
    // inputs (gemm_rows tokens) and one register block's weights fit the
    // L1d together, and the widest tasks whose packed weight chunk fills
    // at most half the L2 while the narrowest projection still gives
    // every core one. Each task reads all of its batch's inputs, so wider
    // tasks read them fewer times: the layer above takes 145 ms with
    // tasks of 256 features, 133 with 512 (the k/v projections' 1024
    // split over 2 cores), 157 with 1024 (one core idle on k and v).
    const int64_t cols = d["gemm_cols"], rows = d["gemm_rows"];
    const MachineModel &m = *target.machine;
    d["gemm_k_block"] = 64;
    for (int64_t kc : {128, 256, 512})
      if ((rows + cols) * kc * 4 <= m.l1dBytes)
        d["gemm_k_block"] = kc;
    const int64_t narrowest =
        std::min({s.h * s.d_k, s.n_kv * s.d_k, s.n_kv * s.d_v, s.d});
    const int64_t perCore = narrowest / m.coresOrDefault();
    d["gemm_n_block"] = 64;
    for (int64_t nb : space.params.back().values)
      if (nb * d["gemm_k_block"] * 4 <= m.l2Bytes / 2 &&
          (nb <= perCore || nb == 64))
        d["gemm_n_block"] = nb;
  }
  // Make the default row counts multiples of both register blocks.
  auto fitRegisterBlocks = [vw](ScheduleParams &p) {
    for (const char *tokens : {"tokens_per_tile", "long_tokens_per_tile"}) {
      int64_t rows = roundUp(p["heads_per_tile"] * p[tokens], vw);
      if (rows % p["s_rows"] != 0 || rows % p["pv_rows"] != 0) {
        p["s_rows"] = vw;
        p["pv_rows"] = vw;
      }
    }
  };
  fitRegisterBlocks(d);

  const int64_t dk = s.d_k, dv = s.d_v;
  space.violation = [=](const ScheduleParams &p) -> std::string {
    if (std::string why = declaredViolation(space.params, p); !why.empty())
      return why;
    const int64_t w = p.at("vector_width");
    const int64_t hpT = p.at("heads_per_tile"), tt = p.at("tokens_per_tile");
    const int64_t rowsT = roundUp(hpT * tt, w);
    if (group % hpT)
      return "heads_per_tile must divide h/kv";
    if (p.at("s_rows") % w || p.at("pv_rows") % w)
      return "s_rows and pv_rows must be multiples of vector_width";
    // Both prefill tiles: the short one, and the long-call variant's.
    auto tileViolation = [&](const std::string &what, int64_t rows,
                             int64_t keyTile) -> std::string {
      if (rows % p.at("s_rows") || rows % p.at("pv_rows"))
        return what + "'s rows (" + std::to_string(rows) +
               ") must be a multiple of s_rows and pv_rows";
      if (rows > 256)
        return "more than 256 rows per " + what;
      if (keyTile % p.at("s_keys"))
        return what + "'s key tile must be a multiple of s_keys";
      if (p.at("bf16_dot") && keyTile % 2)
        return "bf16_dot needs an even key tile";
      // Per-task scratch must fit in half the L2
      // (MachineModel::scratchBudget).
      const int64_t scratch = taskScratchBytes(
          rows, keyTile, dk, dv, p.at("channel_block"), p.at("stage_kv") != 0);
      if (scratch > scratchBudget)
        return "per-task scratch of the " + what + " " +
               std::to_string(scratch / 1024) + " KiB exceeds " +
               std::to_string(scratchBudget / 1024) +
               " KiB (half the L2 of the target's machine model)";
      return "";
    };
    if (dv % p.at("channel_block"))
      return "channel_block must divide dv";
    if (std::string why = tileViolation("query tile", rowsT, p.at("key_tile"));
        !why.empty())
      return why;
    if (const int64_t lt = p.at("long_tokens_per_tile"); lt > 0)
      if (std::string why = tileViolation(
              "long-call tile", roundUp(hpT * lt, w), p.at("long_key_tile"));
          !why.empty())
        return why;
    if (p.at("decode_tokens") > 0 &&
        roundUp(hpT * p.at("decode_tokens"), w) > 256)
      return "more than 256 rows per decode tile";
    if (p.at("bf16_dot") && p.at("stage_kv"))
      return "bf16_dot needs stage_kv = 0";
    const int64_t tiles = p.at("tiles_per_task"),
                  longTiles = p.at("long_tiles_per_task");
    if ((tiles > 1 || longTiles > 1) && !p.at("stage_kv") && !p.at("bf16_dot"))
      return "tiles_per_task above 1 copies K/V per task: it needs "
             "stage_kv = 1 or bf16_dot = 1";
    const int64_t stagedKeyBytes = stagedKeyBytesOf(p.at("bf16_dot") != 0);
    auto overBudget = [&](const char *what, int64_t keys) {
      return what + std::string(" copies ") +
             std::to_string(keys * stagedKeyBytes / 1024) +
             " KiB of K/V per task, more than " +
             std::to_string(stagedBudget / 1024) +
             " KiB (the core's share of the L3 in the target's machine "
             "model)";
    };
    if (tiles > 1 && s.T &&
        s.T_kv.value_or(*s.T) * stagedKeyBytes > stagedBudget)
      return overBudget("tiles_per_task", s.T_kv.value_or(*s.T));
    if (longTiles > 1 && p.at("long_max_keys") * stagedKeyBytes > stagedBudget)
      return overBudget("long_max_keys", p.at("long_max_keys"));
    if (p.at("pv_chans") > dv)
      return "pv_chans exceeds dv";
    // Register budget: accumulators + row vectors + one broadcast.
    auto fits = [&](int64_t r, int64_t k) {
      return (r / w) * k + r / w + 1 <= regs;
    };
    if (!fits(p.at("s_rows"), p.at("s_keys")))
      return "QK^T register block needs more than " + std::to_string(regs) +
             " vector registers";
    if (!fits(p.at("pv_rows"), p.at("pv_chans")))
      return "PV register block needs more than " + std::to_string(regs) +
             " vector registers";
    if (p.count("gemm_cols")) {
      if (p.at("gemm_cols") % w)
        return "gemm_cols must be a multiple of vector_width";
      if ((p.at("gemm_cols") / w) * p.at("gemm_rows") + p.at("gemm_cols") / w +
              1 >
          regs)
        return "GEMM register block needs more than " + std::to_string(regs) +
               " vector registers";
      if (p.count("gemm_n_block") && p.at("gemm_n_block") < p.at("gemm_cols"))
        return "gemm_n_block must be at least gemm_cols";
    }
    return "";
  };
  // Wide heads (dk, dv up to 512) can push the per-task scratch past its
  // bound: fewer query tiles per task first (a K/V copy past the L3
  // share), then a shorter long-call tile (down to none), then fewer
  // tokens per tile, then shorter key tiles, then no K/V staging.
  space.defaults = descendToValid(space, d,
                                  {{"long_tiles_per_task", -1},
                                   {"tiles_per_task", -1},
                                   {"long_tokens_per_tile", -1},
                                   {"long_key_tile", -1},
                                   {"tokens_per_tile", -1},
                                   {"key_tile", -1},
                                   {"stage_kv", -1},
                                   {"heads_per_tile", -1}},
                                  fitRegisterBlocks);
  return space;
}

AttentionTiles cpuAttentionTiles(const AttentionSpec &s,
                                 const ScheduleParams &p) {
  AttentionTiles t;
  t.headsPerTile = static_cast<int>(get(p, "heads_per_tile"));
  t.tokensPerTile = static_cast<int>(get(p, "tokens_per_tile"));
  t.rows = static_cast<int>(
      roundUp(t.headsPerTile * t.tokensPerTile, get(p, "vector_width")));
  t.keyTile = static_cast<int>(get(p, "key_tile"));
  t.channelBlock = static_cast<int>(get(p, "channel_block"));
  t.stageKv = get(p, "stage_kv") != 0;
  t.tilesPerTask = static_cast<int>(get(p, "tiles_per_task"));
  t.bf16Dot = get(p, "bf16_dot") != 0;
  (void)s;
  return t;
}

// Per key tile (inside the scan over key tiles of `st.state`): QK^T in
// sRows x sKeys register blocks, the tile's softmax with rows in vector
// lanes, PV in pvRows x pvChans blocks. Shared by the prefill and the
// split-KV decode variants. The K/V copies (stageKv's dense f32 rows, or
// the bf16 dot product's K rows and V pairs) are made at `kvCopyAt`: per
// key tile, or once per task for all its query tiles (tilesPerTask).
static void scheduleKeyTileCpu(AttentionStages st, const AttentionVars &v,
                               int vw, int sRows, int sKeys, int pvRows,
                               int pvChans, LoopLevel kvCopyAt) {
  const AttentionTiles &tl = st.tiles;
  Var io("io"), ii("ii"), jo("jo"), ji("ji"), ci("ci"), co("co");
  st.scores.compute_at(st.state, st.rt)
      .split(v.i, io, ii, sRows)
      .split(v.j, jo, ji, sKeys)
      .reorder(ii, ji, io, jo)
      .vectorize(ii, vw)
      .unroll(ii)
      .unroll(ji);
  st.scoresAcc.compute_at(st.scores, io)
      .vectorize(v.i, vw)
      .unroll(v.i)
      .unroll(v.j);
  if (tl.bf16Dot) {
    // Pairs of channels in adjacent lanes, reduced by vdpbf16ps.
    st.scoresAcc.update()
        .atomic()
        .reorder(st.rc.x, v.i, v.j, st.rc.y)
        .vectorize(st.rc.x)
        .vectorize(v.i, vw)
        .unroll(v.i)
        .unroll(v.j);
  } else {
    st.scoresAcc.update()
        .reorder(v.i, v.j, st.rc)
        .vectorize(v.i, vw)
        .unroll(v.i)
        .unroll(v.j);
  }

  // Softmax of the tile, rows in vector lanes.
  st.tileMax.compute_at(st.state, st.rt).vectorize(v.i, vw);
  st.tileMax.update().reorder(v.i, st.rj).vectorize(v.i, vw);
  st.probs.compute_at(st.state, st.rt).vectorize(v.i, vw);
  st.tileSum.compute_at(st.state, st.rt).vectorize(v.i, vw);
  if (tl.bf16Dot) {
    st.probsBf16.compute_at(st.state, st.rt).vectorize(v.p).vectorize(v.i, vw);
    st.kTile.compute_at(kvCopyAt).vectorize(v.c, 2 * vw,
                                            TailStrategy::GuardWithIf);
    // V pairs with channels in lanes and the pair element unrolled: two
    // dense loads of V rows in place (the clamped key is one index per
    // vector, not per lane), which Halide's interleaving pass
    // fuses into one interleaved store. Vectorised over the pair first,
    // every lane was a 16-bit insert (~8 % of a bf16 S1 call on a Zen 4);
    // the dense copy of the rows cost another 1-3 %.
    Var co("vco"), ci("vci");
    st.vTile.compute_at(kvCopyAt)
        .split(v.c, co, ci, vw, TailStrategy::GuardWithIf)
        .reorder(ci, v.p, co)
        .vectorize(ci)
        .unroll(v.p);
    st.tileSum.update()
        .reorder(v.i, st.rjPairs.x, st.rjPairs.y)
        .vectorize(v.i, vw);
  } else {
    st.tileSum.update().reorder(v.i, st.rj).vectorize(v.i, vw);
  }

  // PV in pvRows x pvChans register blocks.
  st.pv.compute_at(st.state, st.rt)
      .split(v.i, io, ii, pvRows)
      .split(v.c, co, ci, pvChans, TailStrategy::ShiftInwards)
      .reorder(ii, ci, io, co)
      .vectorize(ii, vw)
      .unroll(ii)
      .unroll(ci);
  st.pvAcc.compute_at(st.pv, io).vectorize(v.i, vw).unroll(v.i).unroll(v.c);
  if (tl.bf16Dot) {
    st.pvAcc.update()
        .atomic()
        .reorder(st.rjPairs.x, v.i, v.c, st.rjPairs.y)
        .vectorize(st.rjPairs.x)
        .vectorize(v.i, vw)
        .unroll(v.i)
        .unroll(v.c);
  } else {
    st.pvAcc.update()
        .reorder(v.i, v.c, st.rj)
        .vectorize(v.i, vw)
        .unroll(v.i)
        .unroll(v.c);
  }

  if (tl.stageKv) {
    // Dense f32 copies of the K and V rows.
    st.kTile.compute_at(kvCopyAt).vectorize(v.c, vw, TailStrategy::GuardWithIf);
    st.vTile.compute_at(kvCopyAt).vectorize(v.c, vw, TailStrategy::GuardWithIf);
  }
}

// The query tile of a task, rows in vector lanes (the QK^T block loads
// Q as vectors of rows). With bf16 pairs the tile's Q rows are first
// copied dense, so the transpose into pairs gathers 32-bit pairs from one
// small buffer: 16 inserts per vector where reading Q in place took 32
// 16-bit ones (3-4 % of a bf16 S1 call on a Zen 4).
static void scheduleQueryTileCpu(AttentionStages st, const AttentionVars &v,
                                 LoopLevel at, int vw) {
  if (st.tiles.bf16Dot) {
    st.qRows.compute_at(at).vectorize(v.c, 2 * vw, TailStrategy::GuardWithIf);
    st.qTile.compute_at(at).vectorize(v.p).vectorize(v.i, vw);
  } else {
    st.qTile.compute_at(at).vectorize(v.i, vw);
  }
}

void scheduleAttentionCpu(AttentionStages st, Func output,
                          const AttentionVars &v, const AttentionSpec &s,
                          const ScheduleParams &p) {
  const AttentionTiles &tl = st.tiles;
  const int vw = static_cast<int>(get(p, "vector_width"));
  const int sRows = static_cast<int>(get(p, "s_rows"));
  const int sKeys = static_cast<int>(get(p, "s_keys"));
  const int pvRows = static_cast<int>(get(p, "pv_rows"));
  const int pvChans = static_cast<int>(get(p, "pv_chans"));
  const bool headsInner = get(p, "task_order") == 0;
  const int CB = tl.channelBlock;

  // The parallel loop: one task per (batch, head block, query tile). Each
  // task stores its tile of the output from the finished state. Under a
  // causal mask a task's work grows with its query tile, and in both task
  // orders the query tile grows with the task index (across the loop for
  // order 0, within each head block for order 1). The runtime's pool hands
  // tasks out highest index first (runtime/src/TaskOrder.cpp), so a loop
  // starts with its costliest tasks and ends with its cheapest.
  Var to("to"), ti("ti"), hb("hb"), hi("hi"), co("co"), ck("ck"), task("task");
  output.bound(v.c, 0, static_cast<int>(s.d_v))
      .bound(v.hd, 0, static_cast<int>(s.h))
      .split(v.t, to, ti, tl.tokensPerTile, TailStrategy::GuardWithIf)
      .split(v.hd, hb, hi, tl.headsPerTile, TailStrategy::RoundUp)
      .split(v.c, co, ck, CB, TailStrategy::RoundUp);
  // With tilesPerTask > 1 a task holds that many consecutive query tiles
  // (tt) of its head block, and copies the K/V all of them see once,
  // before the first: a causal mask's bounds make that the keys up to its
  // last tile.
  Var tg("tg"), tt("tt");
  Var tiles = to;
  if (tl.tilesPerTask > 1) {
    output.split(to, tg, tt, tl.tilesPerTask, TailStrategy::GuardWithIf);
    tiles = tg;
  }
  if (headsInner)
    output.reorder(ck, co, hi, ti, hb, tiles, v.b).fuse(hb, tiles, task);
  else
    output.reorder(ck, co, hi, ti, tiles, hb, v.b).fuse(tiles, hb, task);
  if (tl.tilesPerTask > 1)
    output.reorder(ck, co, hi, ti, tt, task, v.b);
  output.fuse(task, v.b, task).parallel(task).unroll(ck);
  const LoopLevel tile =
      tl.tilesPerTask > 1 ? LoopLevel(output, tt) : LoopLevel(output, task);

  // Per query tile: the tile, then the scan over visible key tiles.
  scheduleQueryTileCpu(st, v, tile, vw);
  st.rowPos.compute_at(tile).vectorize(v.i, vw);
  if (st.rowSlope.defined()) // ALiBi: the rows' slopes, like their positions
    st.rowSlope.compute_at(tile).vectorize(v.i, vw);
  st.state.compute_at(tile).align_bounds(v.i, tl.rows).vectorize(v.i, vw);
  st.state.update().reorder(v.i, v.cb, st.rt).vectorize(v.i, vw);
  st.rowScale.compute_at(tile).vectorize(v.i, vw);

  scheduleKeyTileCpu(st, v, vw, sRows, sKeys, pvRows, pvChans,
                     tl.tilesPerTask > 1 ? LoopLevel(output, task)
                                         : LoopLevel(st.state, st.rt));
}

std::optional<AttentionTiles> cpuDecodeTiles(const AttentionSpec &s,
                                             const ScheduleParams &p,
                                             const HalideTargetInfo &target) {
  const int64_t tokens = get(p, "decode_tokens");
  if (tokens == 0 || s.op != Op::Sdpa || (s.T && *s.T > tokens))
    return std::nullopt;
  AttentionTiles t = cpuAttentionTiles(s, p);
  t.tokensPerTile = static_cast<int>(tokens);
  t.channelsInLanes = get(p, "decode_layout") == 1 && !t.bf16Dot;
  t.rows =
      static_cast<int>(t.channelsInLanes ? t.headsPerTile * tokens
                                         : roundUp(t.headsPerTile * tokens,
                                                   get(p, "vector_width")));
  // Channels in lanes: one state tuple per channel, so the state update
  // is a vector over channels like P V.
  if (t.channelsInLanes)
    t.channelBlock = 1;
  t.headsInTask = t.channelsInLanes && get(p, "decode_heads") == 1;
  if (t.channelsInLanes)
    t.stageKv = get(p, "decode_stage_kv") == 1;
  t.tilesPerTask = 1;
  // Tasks per core times the cores of the target's machine model.
  t.splitTasks = static_cast<int>(get(p, "split_tasks") *
                                  target.machine->coresOrDefault());
  t.splitMinKeyTiles = static_cast<int>(
      std::max<int64_t>(1, get(p, "split_min_keys") / t.keyTile));
  t.splitKv = true;
  t.prefix = "dec_";
  return t;
}

std::optional<ScheduleParams> cpuLongCallParams(const AttentionSpec &s,
                                                const ScheduleParams &p) {
  const int64_t tokens = get(p, "long_tokens_per_tile");
  if (tokens == 0 || s.op != Op::Sdpa || s.T || s.ragged)
    return std::nullopt;
  // A long tile the default descent shrank back to the short one would
  // only repeat the first pipeline.
  if (tokens == get(p, "tokens_per_tile") &&
      get(p, "long_key_tile") == get(p, "key_tile") &&
      get(p, "long_tiles_per_task") == get(p, "tiles_per_task"))
    return std::nullopt;
  ScheduleParams q = p;
  q["tokens_per_tile"] = tokens;
  q["key_tile"] = get(p, "long_key_tile");
  q["tiles_per_task"] = get(p, "long_tiles_per_task");
  q["long_tokens_per_tile"] = 0;
  // Its calls have at least long_min_tokens > 16 query tokens: never a
  // decode step.
  q["decode_tokens"] = 0;
  return q;
}

// The decode micro-kernel (decode_layout = 1): a decode step has only
// h/kv rows per K/V head, too few to fill vector lanes, so the lanes hold
// K/V channels and the loops walk the real rows only:
//   QK^T: per (row, key) the dot product over dk, accumulated in lane-wide
//         partial sums (rfactor) and reduced across lanes once;
//   softmax: keys in lanes;
//   P V and the state: channels in lanes, one state tuple per channel.
// Per key and row that is dk/vw FMAs for each product, against dk for the
// rows-in-lanes tile. Register blocks: rowsBlock rows x 4 keys (QK^T) and
// rowsBlock rows x 4 vectors of channels (P V), 16 accumulators.
static void scheduleDecodeChannelsCpu(AttentionStages st,
                                      const AttentionVars &v, int vw,
                                      int64_t dv) {
  const AttentionTiles &tl = st.tiles;
  int rowsBlock = 1;
  for (int r : {2, 4})
    if (tl.headsPerTile % r == 0)
      rowsBlock = r;
  const int keysBlock = tl.keyTile % 4 == 0 ? 4 : 1;
  // dv is a multiple of vw (decode_layout 1 needs it); a block that does
  // not divide dv shifts its last position inwards.
  const int chanBlock = static_cast<int>(std::min<int64_t>(4 * vw, dv));
  Var task("dtask"), io("io"), ii("ii"), jo("jo"), ji("ji"), co("co"), ci("ci");

  // One task per (chunk, head block, query tile, batch); rows of the
  // partial state are what the output reads (T_q * HP of them).
  // With headsInTask the head blocks loop inside the task.
  const bool hit = tl.headsInTask;
  st.partial.compute_root().reorder_storage(v.cb, v.i);
  if (hit)
    st.partial.reorder(v.cb, v.i, v.ho, v.sp, v.qo, v.b).fuse(v.sp, v.qo, task);
  else
    st.partial.reorder(v.cb, v.i, v.sp, v.ho, v.qo, v.b)
        .fuse(v.sp, v.ho, task)
        .fuse(task, v.qo, task);
  st.partial.fuse(task, v.b, task).parallel(task).vectorize(v.cb, vw);
  st.qTile.compute_at(st.partial, task)
      .reorder_storage(v.c, v.i)
      .vectorize(v.c, vw);
  st.rowPos.compute_at(st.partial, task);
  if (st.rowSlope.defined())
    st.rowSlope.compute_at(st.partial, task);
  st.state.compute_at(st.partial, task)
      .reorder_storage(v.cb, v.i)
      .vectorize(v.cb, vw);
  if (hit)
    st.state.update().reorder(v.cb, v.i, v.ho, st.rt);
  else
    st.state.update().reorder(v.cb, v.i, st.rt);
  st.state.update().vectorize(v.cb, vw);
  const LoopLevel at =
      hit ? LoopLevel(st.state, v.ho) : LoopLevel(st.state, st.rt);

  // QK^T: lane-wide partial dot products, then one reduction per score.
  st.scoresAcc.compute_at(at)
      .reorder_storage(v.j, v.i)
      .align_bounds(v.i, rowsBlock)
      .vectorize(v.j, vw, TailStrategy::GuardWithIf);
  RVar rco("rco"), rci("rci");
  Var u("u");
  Func dot = st.scoresAcc.update().split(st.rc.x, rco, rci, vw).rfactor(rci, u);
  st.scoresAcc.update()
      .split(v.i, io, ii, rowsBlock)
      .split(v.j, jo, ji, keysBlock)
      .reorder(rci, ji, ii, jo, io)
      .atomic()
      .vectorize(rci)
      .unroll(ji)
      .unroll(ii);
  // rfactor puts the lanes outermost; they must be innermost in memory.
  dot.compute_at(st.scoresAcc, jo)
      .reorder_storage(u, v.i, v.j)
      .vectorize(u)
      .unroll(v.i)
      .unroll(v.j);
  dot.update().reorder(u, v.i, v.j, rco).vectorize(u).unroll(v.i).unroll(v.j);

  // The tile's softmax with keys in lanes.
  st.scores.compute_at(at).reorder_storage(v.j, v.i).vectorize(
      v.j, vw, TailStrategy::GuardWithIf);
  st.tileMax.compute_at(at);
  st.tileMax.update().atomic().vectorize(st.rj, vw);
  st.probs.compute_at(at).reorder_storage(v.j, v.i).vectorize(
      v.j, vw, TailStrategy::GuardWithIf);
  st.tileSum.compute_at(at);
  st.tileSum.update().atomic().vectorize(st.rj, vw);

  // P V: channels in lanes, rowsBlock x chanBlock accumulators per block.
  st.pv.compute_at(at)
      .reorder_storage(v.c, v.i)
      .align_bounds(v.i, rowsBlock)
      .split(v.i, io, ii, rowsBlock)
      .split(v.c, co, ci, chanBlock, TailStrategy::ShiftInwards)
      .reorder(ci, ii, co, io)
      .vectorize(ci, vw)
      .unroll(ii);
  st.pvAcc.compute_at(st.pv, co)
      .reorder_storage(v.c, v.i)
      .vectorize(v.c, vw)
      .unroll(v.c)
      .unroll(v.i);
  st.pvAcc.update()
      .reorder(v.c, v.i, st.rj)
      .vectorize(v.c, vw)
      .unroll(v.c)
      .unroll(v.i);
  if (tl.stageKv && hit) {
    // Every head's rows of the key tile at once: whole token rows.
    st.kTile.compute_at(st.state, st.rt)
        .reorder(v.c, v.g, v.j)
        .vectorize(v.c, vw);
    st.vTile.compute_at(st.state, st.rt)
        .reorder(v.c, v.g, v.j)
        .vectorize(v.c, vw);
  } else if (tl.stageKv) {
    st.kTile.compute_at(st.state, st.rt).vectorize(v.c, vw);
    st.vTile.compute_at(st.state, st.rt).vectorize(v.c, vw);
  }

  // The merge over chunks, channels in lanes.
  st.mergeMax.compute_root().reorder_storage(v.cb, v.i).vectorize(v.cb, vw);
  st.mergeMax.update().reorder(v.cb, v.i, st.rs).vectorize(v.cb, vw);
  st.merged.compute_root().reorder_storage(v.cb, v.i).vectorize(v.cb, vw);
  st.merged.update().reorder(v.cb, v.i, st.rs).vectorize(v.cb, vw);
}

void scheduleDecodeCpu(AttentionStages st, const AttentionVars &v,
                       const AttentionSpec &s, const ScheduleParams &p) {
  const AttentionTiles &tl = st.tiles;
  const int vw = static_cast<int>(get(p, "vector_width"));
  if (tl.channelsInLanes) {
    scheduleDecodeChannelsCpu(st, v, vw, s.d_v);
    return;
  }
  // The decode tile is one or two vectors of rows: register blocks that
  // do not divide it fall back to one vector.
  auto block = [&](const char *name) {
    const int r = static_cast<int>(get(p, name));
    return tl.rows % r == 0 ? r : vw;
  };
  const int sKeys = static_cast<int>(get(p, "s_keys"));
  const int pvChans = static_cast<int>(get(p, "pv_chans"));

  // The parallel loop: one task per (chunk of the key axis, head block,
  // query tile, batch), each leaving its partial state.
  Var task("dtask");
  st.partial.compute_root()
      .bound(v.i, 0, tl.rows)
      .reorder(v.i, v.cb, v.sp, v.ho, v.qo, v.b)
      .fuse(v.sp, v.ho, task)
      .fuse(task, v.qo, task)
      .fuse(task, v.b, task)
      .parallel(task)
      .vectorize(v.i, vw);
  scheduleQueryTileCpu(st, v, LoopLevel(st.partial, task), vw);
  st.rowPos.compute_at(st.partial, task).vectorize(v.i, vw);
  if (st.rowSlope.defined())
    st.rowSlope.compute_at(st.partial, task).vectorize(v.i, vw);
  st.state.compute_at(st.partial, task)
      .align_bounds(v.i, tl.rows)
      .vectorize(v.i, vw);
  st.state.update().reorder(v.i, v.cb, st.rt).vectorize(v.i, vw);
  scheduleKeyTileCpu(st, v, vw, block("s_rows"), sKeys, block("pv_rows"),
                     pvChans, LoopLevel(st.state, st.rt));

  // The merge: a few vectors per (row block, channel block); serial.
  st.mergeMax.compute_root().bound(v.i, 0, tl.rows).vectorize(v.i, vw);
  st.mergeMax.update().reorder(v.i, st.rs).vectorize(v.i, vw);
  st.merged.compute_root().bound(v.i, 0, tl.rows).vectorize(v.i, vw);
  st.merged.update().reorder(v.i, st.rs).vectorize(v.i, vw);
}

void scheduleRowOutputsCpu(Func out, Func lse, const AttentionVars &v,
                           const ScheduleParams &p) {
  const int vw = static_cast<int>(get(p, "vector_width"));
  if (out.defined()) {
    Var tb("tb");
    out.fuse(v.t, v.b, tb)
        .parallel(tb)
        .vectorize(v.c, vw, TailStrategy::GuardWithIf);
  }
  Var tb("lse_tb");
  lse.fuse(v.t, v.b, tb).parallel(tb);
}

// The GEMM of gemm_k_block = 0: column panels of gemm_cols features in
// parallel, each walking every token with the whole input row per
// register block. The panel (in x gemm_cols floats, 768 KiB at d 4096)
// streams from the L2 at every block, which is what holds it back: the
// layer's projections at ~57 % of the f32 FMA peak (B1 T512 d4096,
// Sapphire Rapids class, 2 threads, 2026-12-02), and on a 512 KiB L2
// the panel does not fit at all.
static void schedulePanelGemmCpu(Projection proj, const AttentionVars &v,
                                 int64_t outFeatures, int vw, int cols,
                                 int rows) {
  Var no("no"), ni("ni"), to("to"), ti("ti");
  Func out = proj.out;
  // Column panels in parallel; each walks every token of every batch so
  // its weight panel stays in L2.
  out.split(v.n, no, ni, cols,
            outFeatures >= cols ? TailStrategy::ShiftInwards
                                : TailStrategy::GuardWithIf)
      .split(v.t, to, ti, rows, TailStrategy::GuardWithIf)
      .reorder(ni, ti, to, v.b, no)
      .vectorize(ni, vw)
      .unroll(ti)
      .parallel(no);
  // Each parallel column panel first copies its weight columns into a
  // dense [k][cols] panel: walking W itself would stride by the full row
  // (e.g. 16 KiB), which thrashes the cache sets and the TLB.
  Func panel = proj.w.in(proj.acc);
  panel.compute_at(out, no).vectorize(panel.args()[0], vw,
                                      TailStrategy::GuardWithIf);
  // The accumulator block is always gemm_rows tokens (inputs are clamped),
  // so its size is a constant and it lives in registers.
  proj.acc.compute_at(out, to)
      .bound_extent(v.t, rows)
      .vectorize(v.n, vw)
      .unroll(v.n)
      .unroll(v.t);
  proj.acc.update()
      .reorder(v.n, v.t, proj.rk)
      .vectorize(v.n, vw)
      .unroll(v.n)
      .unroll(v.t);
}

// The packed GEMM (gemm_k_block > 0), blocked as GotoBLAS/BLIS block a
// GEMM for the caches: one parallel task per block of gemm_n_block
// output features, holding every batch; within it, for each chunk of
// gemm_k_block inputs, the chunk's weights are packed into a dense
// [chunk][block] panel that stays in the L2 for every token, and for each
// gemm_rows tokens their chunk of the input is packed into a small panel that
// stays in the L1 while every gemm_cols-wide register block of the panel is
// multiplied by it. The chunk sums are factored out of the reduction
// (rfactor), so the algorithm stays one sum over k, and each register
// block's chunk sum is added into the task's accumulator block once per
// chunk (1/gemm_k_block of the FMAs' traffic).
// The Llama-3-8B-like layer (B1 T512 d4096, its four projections 42.9
// GFLOP), 2 threads, Sapphire Rapids class: 127 ms against 170 ms with
// the panel GEMM, its projections at ~74 % of the f32 FMA peak, oneDNN's
// sgemm at 72 % (docs/performance.md, "The layer").
static void schedulePackedGemmCpu(Projection proj, const AttentionVars &v,
                                  int vw, int cols, int rows, int kBlock,
                                  int nBlock) {
  Var nb("nb"), nbi("nbi"), nm("nm"), nmi("nmi"), to("to"), ti("ti"), ko("ko");
  RVar rko("rko"), rki("rki");
  Func out = proj.out;
  // Every batch inside the task: the chunk's packed weights then serve
  // every token of every sequence (a task per batch packed them once per
  // sequence: B16 T1 ran 3.2x slower than the panel GEMM).
  out.split(v.n, nb, nbi, nBlock, TailStrategy::ShiftInwards)
      .reorder(nbi, v.t, v.b, nb)
      .vectorize(nbi, vw)
      .parallel(nb);
  proj.acc.compute_at(out, nb).vectorize(v.n, vw);
  proj.acc.update().split(proj.rk.x, rko, rki, kBlock);
  Func chunk = proj.acc.update().rfactor(rko, ko);
  // The merge of the chunk sums: chunks outermost, so each chunk's packed
  // weights serve every token of the task.
  proj.acc.update()
      .split(v.n, nm, nmi, cols, TailStrategy::GuardWithIf)
      .split(v.t, to, ti, rows, TailStrategy::GuardWithIf)
      .reorder(nmi, ti, nm, to, v.b, rko)
      .vectorize(nmi, vw)
      .unroll(nmi)
      .unroll(ti);
  // The register block: gemm_rows tokens (inputs are clamped, so the
  // block is whole) x gemm_cols features over one chunk.
  chunk.compute_at(proj.acc, nm)
      .bound_extent(v.n, cols)
      .bound_extent(v.t, rows)
      .vectorize(v.n, vw)
      .unroll(v.n)
      .unroll(v.t);
  chunk.update()
      .reorder(v.n, v.t, rki)
      .vectorize(v.n, vw)
      .unroll(v.n)
      .unroll(v.t);
  Func weights = proj.w.in(chunk);
  weights.compute_at(proj.acc, rko)
      .vectorize(weights.args()[0], vw, TailStrategy::GuardWithIf);
  Func inputs = proj.x.in(chunk);
  inputs.compute_at(proj.acc, to)
      .vectorize(inputs.args()[0], vw, TailStrategy::GuardWithIf);
}

void scheduleProjectionCpu(Projection proj, const AttentionVars &v,
                           int64_t outFeatures, const ScheduleParams &p,
                           bool isOutput) {
  const int targetVw = static_cast<int>(get(p, "vector_width"));
  // A projection narrower than one vector (e.g. kv * dv = 7) is vectorized
  // by the largest power of two that fits: the accumulator's vectors shift
  // inwards, which would read before the first feature if a vector were
  // wider than all of them (found by the property test of default
  // schedules).
  int vw = targetVw;
  while (vw > 1 && vw > outFeatures)
    vw /= 2;
  int cols = static_cast<int>(get(p, "gemm_cols"));
  const int rows = static_cast<int>(get(p, "gemm_rows"));
  // Narrow projections (fewer features than a block) use one block.
  while (cols > targetVw && cols > outFeatures)
    cols -= targetVw;
  Func out = proj.out;
  if (!isOutput)
    out.compute_root();
  out.bound(v.n, 0, static_cast<int>(outFeatures));
  // Chunks that divide the input features run without a guard in the
  // innermost loop (a standalone probe at T 37: d 4100 in chunks of 256
  // ran 1.4x slower than d 4096); an input with no divisor of at least 32
  // up to the chunk keeps the guarded last chunk.
  int64_t kBlock = std::min(get(p, "gemm_k_block"), proj.inFeatures);
  if (kBlock > 0) {
    const int64_t divisor = divisorsUpTo(proj.inFeatures, kBlock).back();
    if (divisor >= 32)
      kBlock = divisor;
  }
  // Tasks of equal width, at most gemm_n_block, in whole register blocks,
  // and none wider than the output (the last one shifts inwards).
  const int64_t nMax = std::min(get(p, "gemm_n_block"), outFeatures);
  const int64_t tasks = ceilDiv(outFeatures, nMax);
  int64_t nBlock = roundUp(ceilDiv(outFeatures, tasks), cols);
  if (nBlock > outFeatures)
    nBlock = outFeatures / cols * cols;
  if (kBlock == 0 || vw != targetVw || nBlock < cols) {
    schedulePanelGemmCpu(proj, v, outFeatures, vw, cols, rows);
    return;
  }
  schedulePackedGemmCpu(proj, v, vw, cols, rows, static_cast<int>(kBlock),
                        static_cast<int>(nBlock));
}

} // namespace mhagen::hl
