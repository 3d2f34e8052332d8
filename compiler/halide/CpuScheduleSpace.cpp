// The CPU schedule space of a spec on a target, in three parts: which
// parameters exist and what values they may take (declareCpuSpace), the
// default point the target's machine model gives (deriveCpuDefaults), and
// which points can be built (cpuPointViolation). Everything ISA-specific
// (lanes, registers, caches, the bf16 dot product's rate) comes from the
// machine model; the measurements behind each choice are in
// docs/performance.md, "CPU schedule defaults".
#include "CpuSchedule.h"
#include "ScheduleHelpers.h"

#include "mhagen/machine/MachineModel.h"
#include "mhagen/spec/BackendResult.h"

#include <algorithm>

namespace mhagen::hl {

namespace {

/// The most rows a query tile may have: its accumulators, scores and
/// probabilities are per-task scratch, and past 256 rows they leave the L2.
constexpr int64_t kMaxTileRows = 256;
/// Query tiles one task may hold (tiles_per_task, long_tiles_per_task).
const std::vector<int64_t> kTilesPerTask = {1, 2, 4, 8, 16, 32, 64};
/// The fewest query tokens a call needs by default to run the long-call
/// variant: below it the long tile's padding costs more than its K/V reuse.
constexpr int64_t kLongMinTokens = 512;

/// What the space of one spec on one target depends on, read once from the
/// spec and the target's machine model. Held by value, so the validity
/// check outlives the spec it was made for.
struct SpaceFacts {
  int64_t h, d, dk, dv, nKv, group;
  std::optional<int64_t> T, Tkv, B;
  bool layer;
  /// A layer that appends to a KV cache: its T_q is not its T_kv, so its
  /// decode steps run the split-KV decode variant as sdpa's do.
  bool cachedLayer;
  int64_t lanes, registers, l1dBytes, l2Bytes, cores;
  int64_t scratchBudget; ///< per-task scratch: MachineModel::scratchBudget
  int64_t stagedBudget;  ///< per-task K/V copy: MachineModel::stagedKvBudget
  double bf16DotPerFma;
  /// The bf16 dot product exists: the sdpa core of bf16 Q/K/V on a target
  /// with AVX512_BF16, even dk (it reduces channel pairs).
  bool bf16DotOk;
  /// Several query tiles per task: their K/V copy is T_kv long, so its
  /// memory must be known at generation time (static T). Not the layer,
  /// whose projections set its time.
  bool multiTileTasks;
  /// The long-call variant: sdpa whose T_q is known only at call time,
  /// with every sequence of a call the same length (not ragged).
  bool longOk;
  /// The decode micro-kernel with channels in lanes: whole vectors of dk
  /// and dv channels.
  bool channelsOk;

  /// K/V bytes a task copies per key: f32 rows, or the bf16 dot product's
  /// bf16 K rows and V pairs.
  int64_t stagedKeyBytes(bool bf16Dot) const {
    return (bf16Dot ? 2 : 4) * (dk + dv);
  }
  /// Parallel tasks of a call of T query tokens in tiles of t tokens with
  /// `heads` heads each.
  int64_t tasksAt(int64_t T, int64_t t, int64_t heads) const {
    return B.value_or(1) * (h / heads) * ceilDiv(T, t);
  }
};

SpaceFacts readFacts(const AttentionSpec &s, const HalideTargetInfo &target) {
  const MachineModel &m = *target.machine;
  SpaceFacts f{};
  f.h = s.h;
  f.d = s.d;
  f.dk = s.d_k;
  f.dv = s.d_v;
  f.nKv = s.n_kv;
  f.group = s.h / s.n_kv;
  f.T = s.T;
  f.Tkv = s.T_kv;
  f.B = s.B;
  f.layer = s.op == Op::Layer;
  f.cachedLayer = s.cachedLayer();
  f.lanes = target.vectorWidth;
  f.registers = m.vectorRegisters;
  f.l1dBytes = m.l1dBytes;
  f.l2Bytes = m.l2Bytes;
  f.cores = m.coresOrDefault();
  f.scratchBudget = m.scratchBudget();
  f.stagedBudget = m.stagedKvBudget();
  f.bf16DotPerFma = m.bf16DotPerFma;
  f.bf16DotOk = s.op == Op::Sdpa && s.dtype == DType::BF16 &&
                s.kvType() == KvType::BF16 && s.d_k % 2 == 0 &&
                std::find(target.cpuFeatures.begin(), target.cpuFeatures.end(),
                          "avx512_bf16") != target.cpuFeatures.end();
  f.multiTileTasks = s.T && !f.layer;
  f.longOk = s.op == Op::Sdpa && !s.T && !s.ragged;
  f.channelsOk = (!f.layer || f.cachedLayer) && s.d_k % f.lanes == 0 &&
                 s.d_v % f.lanes == 0;
  return f;
}

/// The allowed values of a declared parameter.
const std::vector<int64_t> &valuesOf(const std::vector<ParamDecl> &params,
                                     const std::string &name) {
  for (const ParamDecl &p : params)
    if (p.name == name)
      return p.values;
  throw BackendError("schedule", "undeclared parameter " + name);
}

/// One task's scratch in bytes for a query tile of `rows` and key tiles of
/// `keyTile`: the tile's Q, scores and probabilities, the accumulators and
/// their (max, sum) per channel block, and with stageKv the K/V tile.
int64_t taskScratchBytes(const SpaceFacts &f, int64_t rows, int64_t keyTile,
                         int64_t channelBlock, bool stageKv) {
  int64_t bytes =
      4 * rows * (f.dk + 2 * keyTile + 2 * f.dv + 2 * f.dv / channelBlock + 4);
  if (stageKv)
    bytes += 4 * keyTile * (f.dk + f.dv);
  return bytes;
}

/// Vector registers a register block of `rows` (in vectors of `lanes`) by
/// `columns` needs: its accumulators, one vector of rows each, and one
/// broadcast.
int64_t blockRegisters(int64_t rows, int64_t columns, int64_t lanes) {
  return (rows / lanes) * columns + rows / lanes + 1;
}

/// f32 vector widths the schedule may use: the target's, and narrower
/// powers of two down to 8 lanes (256 bits), which the wide ISA also
/// encodes and which halve a short tile's padding.
std::vector<int64_t> vectorWidths(int64_t lanes) {
  std::vector<int64_t> widths;
  for (int64_t w = std::min<int64_t>(8, lanes); w <= lanes; w *= 2)
    widths.push_back(w);
  return widths;
}

/// Rows of a register block: multiples of the narrowest vector width the
/// space declares (4 lanes on a 128-bit target, else 8) up to 64.
std::vector<int64_t> registerBlockRows(const SpaceFacts &f) {
  std::vector<int64_t> rows;
  if (f.lanes < 8)
    rows.push_back(f.lanes);
  for (int64_t r : {8, 16, 24, 32, 48, 64})
    rows.push_back(r);
  return rows;
}

std::vector<ParamDecl> declarePrefillParams(const SpaceFacts &f) {
  return {
      {"heads_per_tile", divisorsUpTo(f.group, 64),
       "query heads of one GQA group per tile"},
      {"tokens_per_tile",
       {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128},
       "tokens per query tile"},
      {"key_tile", {16, 24, 32, 48, 64, 96, 128}, "keys per softmax step"},
      {"channel_block", divisorsUpTo(f.dv, 32),
       "accumulator channels per state tuple"},
      {"s_rows", registerBlockRows(f), "rows per QK^T register block"},
      {"s_keys", {2, 3, 4, 5, 6, 7, 8, 10, 12, 14}, "keys per QK^T block"},
      {"pv_rows", registerBlockRows(f), "rows per PV register block"},
      {"pv_chans",
       {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14},
       "channels per PV block"},
      {"vector_width", vectorWidths(f.lanes), "f32 lanes per vector"},
      {"stage_kv", {0, 1}, "copy K/V tiles to dense f32 scratch"},
      {"tiles_per_task",
       f.multiTileTasks ? kTilesPerTask : std::vector<int64_t>{1},
       "query tiles per task; above 1 the task copies its head block's "
       "K/V once for all of them (stage_kv), not per key tile"},
      {"task_order",
       {0, 1},
       "0: head blocks innermost in the parallel loop; 1: query tiles"},
      {"bf16_dot",
       f.bf16DotOk ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{0},
       "bf16 pairwise dot products (vdpbf16ps) for QK^T and PV"},
  };
}

/// The split-KV decode variant, which a call runs when its T_q is at most
/// decode_tokens (sdpa and the cached layer: an uncached layer's T_kv is its
/// T_q).
std::vector<ParamDecl> declareDecodeParams(const SpaceFacts &f) {
  const std::vector<int64_t> onlyChannels =
      f.channelsOk ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{0};
  std::vector<ParamDecl> params = {
      {"decode_tokens",
       f.layer && !f.cachedLayer ? std::vector<int64_t>{0}
                                 : std::vector<int64_t>{0, 1, 2, 4, 8, 16},
       "query tokens per tile of the decode variant (0: no decode variant)",
       true}};
  for (ParamDecl &d : splitKvParams())
    params.push_back(std::move(d));
  params.push_back({"decode_layout", onlyChannels,
                    "decode: 0 rows in vector lanes, 1 channels in lanes "
                    "(real rows only)",
                    true});
  params.push_back({"decode_heads", onlyChannels,
                    "decode_layout 1: 0 one head block per task, 1 every head "
                    "block of a key chunk per task (whole K/V token rows)",
                    true});
  std::vector<int64_t> stages = onlyChannels;
  if (f.channelsOk)
    stages.push_back(2);
  params.push_back({"decode_stage_kv", stages,
                    "decode_layout 1: copy each key tile's K/V to dense f32 "
                    "scratch first (0: read the cache in the dot products; "
                    "2, with decode_heads 1: read it in place in token-row "
                    "order, every head block's QK^T and P V per key)",
                    true});
  return params;
}

/// The long-call variant: a second prefill pipeline with a longer query
/// tile for calls of at least long_min_tokens query tokens.
std::vector<ParamDecl> declareLongCallParams(const SpaceFacts &f,
                                             const std::vector<int64_t> &tokens,
                                             const std::vector<int64_t> &keys) {
  std::vector<int64_t> longTokens = {0};
  if (f.longOk)
    longTokens.insert(longTokens.end(), tokens.begin(), tokens.end());
  std::vector<int64_t> maxKeys;
  for (int64_t k = 1024; k <= 65536; k *= 2)
    maxKeys.push_back(k);
  auto ifLong = [&](std::vector<int64_t> all, int64_t fixed) {
    return f.longOk ? all : std::vector<int64_t>{fixed};
  };
  return {
      {"long_tokens_per_tile", longTokens,
       "tokens per query tile of the long-call variant (0: no variant)", false,
       true},
      {"long_key_tile", ifLong(keys, 32),
       "keys per softmax step of the long-call variant", false, true},
      {"long_tiles_per_task", ifLong(kTilesPerTask, 1),
       "tiles_per_task of the long-call variant", false, true},
      {"long_max_keys", ifLong(maxKeys, 65536),
       "the most keys a call runs the long-call variant with, where it "
       "copies K/V per task (long_tiles_per_task > 1)",
       false, true},
      {"long_min_tokens", ifLong({128, 256, 512, 1024, 2048}, kLongMinTokens),
       "the fewest query tokens a call runs the long-call variant with", false,
       true},
  };
}

std::vector<ParamDecl> declareGemmParams() {
  return {
      {"gemm_cols", {16, 24, 32, 48, 64}, "output features per GEMM block"},
      {"gemm_rows", {2, 4, 6, 8, 10, 12, 14}, "tokens per GEMM block"},
      {"gemm_k_block",
       {0, 64, 128, 256, 512},
       "inputs per packed GEMM chunk (0: unpacked column panels over the "
       "whole input)"},
      {"gemm_n_block",
       {64, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048},
       "output features per parallel GEMM task, at most "
       "(its packed weight chunk stays in the L2)"},
      {"gemm_stream_rows",
       {0, 1, 2, 4, 6, 8, 12, 16},
       "calls of at most this many token rows (T * B) read the weights "
       "in memory order instead of packing them (0: never)"},
      {"gemm_stream_k_block",
       {32, 64, 128, 256, 512, 1024},
       "weight rows per parallel task where the weights stream"},
  };
}

std::vector<ParamDecl> declareCpuSpace(const SpaceFacts &f) {
  std::vector<ParamDecl> params = declarePrefillParams(f);
  auto append = [&](std::vector<ParamDecl> more) {
    for (ParamDecl &d : more)
      params.push_back(std::move(d));
  };
  append(declareDecodeParams(f));
  append(declareLongCallParams(f, valuesOf(params, "tokens_per_tile"),
                               valuesOf(params, "key_tile")));
  if (f.layer)
    append(declareGemmParams());
  return params;
}

// ---- The default point -------------------------------------------------

/// The query tile, key tile and how K/V reach the tile. Every row of a
/// query tile uses each K/V tile staged for it; about 64 rows keep the
/// padding of short calls small (the long-call variant takes longer ones).
void deriveTileDefaults(const SpaceFacts &f,
                        const std::vector<ParamDecl> &params,
                        ScheduleParams &d) {
  int64_t heads = 1;
  for (int64_t x : valuesOf(params, "heads_per_tile"))
    if (x <= 16)
      heads = x;
  d["heads_per_tile"] = heads;
  d["tokens_per_tile"] = 1;
  for (int64_t t : valuesOf(params, "tokens_per_tile"))
    if (heads * t <= 64)
      d["tokens_per_tile"] = t;
  // Dense K/V tiles keep the key rows' addresses out of the inner loops.
  d["key_tile"] = 32;
  d["stage_kv"] = 1;
  d["task_order"] = 0;
  // bf16: the pair dot product where it retires more FLOPs than the f32
  // FMA, reading K/V in place (its pairs need stage_kv = 0), with 64-key
  // tiles; else widened to f32.
  d["bf16_dot"] = 0;
  if (f.bf16DotOk && f.bf16DotPerFma > 1) {
    d["bf16_dot"] = 1;
    d["stage_kv"] = 0;
    d["key_tile"] = 64;
  }
}

/// The most query tiles of t tokens per task that leave every core four
/// tasks in a call of T tokens (a task of x tiles is one tile of x * t
/// tokens).
int64_t tilesPerTaskAt(const SpaceFacts &f, int64_t T, int64_t t,
                       int64_t heads) {
  int64_t g = 1;
  for (int64_t x : kTilesPerTask)
    if (x > 1 && x <= ceilDiv(T, t) &&
        f.tasksAt(T, x * t, heads) >= 4 * f.cores)
      g = x;
  return g;
}

/// The long tile: the most rows (up to kMaxTileRows), then the longer key
/// tile, whose task scratch with its staged K/V tile fills at most a third
/// of the L2 and which still gives every core four tasks at
/// kLongMinTokens. Only with staged K/V: the bf16 dot product reads K/V in
/// place and gains nothing from a longer tile. {0, 0}: none fits.
std::pair<int64_t, int64_t> longTile(const SpaceFacts &f,
                                     const std::vector<int64_t> &tokens,
                                     int64_t heads, int64_t channelBlock) {
  int64_t longT = 0, longKeys = 0;
  for (int64_t t : tokens)
    for (int64_t kt : {32, 64}) {
      const int64_t rows = roundUp(heads * t, f.lanes);
      if (rows > kMaxTileRows ||
          f.tasksAt(f.T.value_or(kLongMinTokens), t, heads) < 4 * f.cores ||
          taskScratchBytes(f, rows, kt, channelBlock, true) > f.l2Bytes / 3)
        continue;
      if (t > longT || (t == longT && kt > longKeys)) {
        longT = t;
        longKeys = kt;
      }
    }
  return {longT, longKeys};
}

/// The long-call variant and K/V reuse across query tiles. A task of the
/// long tile holds several consecutive query tiles of one head block and
/// copies the K/V they see once (every tile then reads it dense), as many
/// tiles as leave every core four tasks, while the copy, T_kv x (dk + dv),
/// fits the core's share of the L3: checked at generation time for a
/// static T_kv, at call time (long_max_keys) for a dynamic one. A static
/// T of at least kLongMinTokens takes the long tile directly.
void deriveLongCallDefaults(const SpaceFacts &f,
                            const std::vector<ParamDecl> &params,
                            ScheduleParams &d) {
  const int64_t heads = d["heads_per_tile"];
  const bool staged = d["stage_kv"] == 1 || d["bf16_dot"] == 1;
  const int64_t stagedKeyBytes = f.stagedKeyBytes(d["bf16_dot"] == 1);
  auto [longT, longKeys] =
      d["stage_kv"] ? longTile(f, valuesOf(params, "tokens_per_tile"), heads,
                               d["channel_block"])
                    : std::pair<int64_t, int64_t>{0, 0};
  if (staged && longT == 0) {
    longT = d["tokens_per_tile"];
    longKeys = d["key_tile"];
  }
  int64_t maxKeys = 0;
  for (int64_t k : valuesOf(params, "long_max_keys"))
    if (k * stagedKeyBytes <= f.stagedBudget)
      maxKeys = k;
  const int64_t longTiles =
      staged && f.longOk && maxKeys
          ? tilesPerTaskAt(f, kLongMinTokens, longT, heads)
          : 1;
  const bool longDiffers =
      longT > d["tokens_per_tile"] ||
      (longT == d["tokens_per_tile"] && longKeys != d["key_tile"]) ||
      longTiles > 1;
  const bool variant = f.longOk && longDiffers;
  d["long_tokens_per_tile"] = 0;
  d["long_key_tile"] = variant ? longKeys : 32;
  d["long_tiles_per_task"] = variant ? longTiles : 1;
  d["long_max_keys"] = f.longOk ? std::max<int64_t>(maxKeys, 1024) : 65536;
  d["long_min_tokens"] = kLongMinTokens;
  d["tiles_per_task"] = 1;
  if (longDiffers && f.T && *f.T >= kLongMinTokens) {
    d["tokens_per_tile"] = longT;
    d["key_tile"] = longKeys;
    if (staged && f.multiTileTasks &&
        f.Tkv.value_or(*f.T) * stagedKeyBytes <= f.stagedBudget)
      d["tiles_per_task"] = tilesPerTaskAt(f, *f.T, longT, heads);
  } else if (variant) {
    d["long_tokens_per_tile"] = longT;
  }
}

/// The register blocks of QK^T and P V: two vectors of rows by as many
/// keys (channels) as fill half the vector registers with accumulators;
/// the other half holds the row vectors, the broadcasts and the softmax's
/// temporaries between the blocks.
void deriveRegisterBlockDefaults(const SpaceFacts &f, ScheduleParams &d) {
  const int64_t columns = f.registers / 4;
  d["vector_width"] = f.lanes;
  d["s_rows"] = 2 * f.lanes;
  d["s_keys"] = columns;
  d["pv_rows"] = 2 * f.lanes;
  d["pv_chans"] = std::min<int64_t>(columns, f.dv);
}

/// The decode variant. Its tile holds the GQA group's heads times as many
/// tokens as fill one vector of rows, so a T_q = 1 step computes no padding
/// tokens; with channels in the lanes a call computes only its own rows,
/// so the tile may hold two vectors of rows. A static T_q that fills the
/// lanes with rows anyway keeps rows in lanes, whose lane reductions then
/// cost less. Tasks over every head of a key chunk read K/V as whole token
/// rows, which the hardware prefetchers stream; the copy of each key tile
/// to dense scratch reads cold K/V faster, so it is the default for
/// serving.
void deriveDecodeDefaults(const SpaceFacts &f, ScheduleParams &d) {
  const int64_t heads = d["heads_per_tile"];
  const bool channels = f.channelsOk && !(f.T && *f.T * heads >= f.lanes);
  const int64_t decodeRows = channels ? 2 * f.lanes : f.lanes;
  d["decode_tokens"] = 0;
  if (!f.layer || f.cachedLayer) {
    d["decode_tokens"] = 1;
    for (int64_t t : {1, 2, 4, 8, 16})
      if (t * heads <= decodeRows)
        d["decode_tokens"] = t;
  }
  d["decode_layout"] = channels ? 1 : 0;
  d["decode_heads"] = channels ? 1 : 0;
  d["split_tasks"] = 4;
  d["split_min_keys"] = 256;
  // Wherever the micro-kernel is allowed, so a tuner that switches
  // decode_layout to 1 starts from the copy too.
  d["decode_stage_kv"] = f.channelsOk ? 1 : 0;
}

/// Does register block (c vectors of columns, r rows) load fewer vectors
/// per FMA than (c2, r2)? A block issues c * r FMAs per c + r loads and
/// broadcasts.
bool denserBlock(int64_t c, int64_t r, int64_t c2, int64_t r2) {
  return c * r * (c2 + r2) > c2 * r2 * (c + r);
}

/// The layer's projections as a packed GEMM. The register block is the
/// declared one with the most FMAs per loaded vector that fits the
/// registers (on the fewest column vectors among equals). The input chunk
/// is the longest whose packed inputs and one block's weights fit the L1d
/// together; a task is the widest whose packed weight chunk fills at most
/// half the L2 while the narrowest projection still gives every core one
/// (each task reads all of its batch's inputs, so wider tasks read them
/// fewer times).
void deriveGemmDefaults(const SpaceFacts &f,
                        const std::vector<ParamDecl> &params,
                        ScheduleParams &d) {
  int64_t bestCols = 0, bestRows = 0;
  for (int64_t cols : valuesOf(params, "gemm_cols"))
    for (int64_t rows : valuesOf(params, "gemm_rows")) {
      if (cols % f.lanes || blockRegisters(cols, rows, f.lanes) > f.registers)
        continue;
      const int64_t c = cols / f.lanes;
      if (bestCols == 0 || denserBlock(c, rows, bestCols / f.lanes, bestRows)) {
        bestCols = cols;
        bestRows = rows;
      }
    }
  d["gemm_cols"] = bestCols;
  d["gemm_rows"] = bestRows;
  d["gemm_k_block"] = 64;
  for (int64_t kc : {128, 256, 512})
    if ((bestRows + bestCols) * kc * 4 <= f.l1dBytes)
      d["gemm_k_block"] = kc;
  const int64_t narrowest =
      std::min({f.h * f.dk, f.nKv * f.dk, f.nKv * f.dv, f.d});
  const int64_t perCore = narrowest / f.cores;
  d["gemm_n_block"] = 64;
  for (int64_t nb : valuesOf(params, "gemm_n_block"))
    if (nb * d["gemm_k_block"] * 4 <= f.l2Bytes / 2 &&
        (nb <= perCore || nb == 64))
      d["gemm_n_block"] = nb;
  // A call of at most one register block of rows uses each packed weight
  // once, so packing only adds a copy of W: such calls stream it.
  d["gemm_stream_rows"] = 0;
  for (int64_t r : valuesOf(params, "gemm_stream_rows"))
    if (r <= bestRows)
      d["gemm_stream_rows"] = r;
  // Streaming tasks: the longest run of weight rows that still gives every
  // core four tasks on the shorter input axis (d or h * dv), for balance.
  const int64_t shortestInput = std::min(f.d, f.h * f.dv);
  d["gemm_stream_k_block"] = 32;
  for (int64_t kb : valuesOf(params, "gemm_stream_k_block"))
    if (kb * 4 * f.cores <= shortestInput)
      d["gemm_stream_k_block"] = kb;
}

/// Makes the default row counts multiples of both register blocks.
void fitRegisterBlocks(int64_t lanes, ScheduleParams &p) {
  for (const char *tokens : {"tokens_per_tile", "long_tokens_per_tile"}) {
    int64_t rows = roundUp(p["heads_per_tile"] * p[tokens], lanes);
    if (rows % p["s_rows"] != 0 || rows % p["pv_rows"] != 0) {
      p["s_rows"] = lanes;
      p["pv_rows"] = lanes;
    }
  }
}

ScheduleParams deriveCpuDefaults(const SpaceFacts &f,
                                 const std::vector<ParamDecl> &params) {
  ScheduleParams d;
  deriveTileDefaults(f, params, d);
  d["channel_block"] = divisorsUpTo(f.dv, 16).back();
  deriveLongCallDefaults(f, params, d);
  deriveRegisterBlockDefaults(f, d);
  deriveDecodeDefaults(f, d);
  if (f.layer)
    deriveGemmDefaults(f, params, d);
  fitRegisterBlocks(f.lanes, d);
  return d;
}

// ---- Which points can be built -----------------------------------------

/// A prefill tile (the query tile or the long-call one) of `rows` rows and
/// `keyTile` keys: whole register blocks, and scratch within the budget.
std::string tileViolation(const SpaceFacts &f, const ScheduleParams &p,
                          const std::string &what, int64_t rows,
                          int64_t keyTile) {
  if (rows % p.at("s_rows") || rows % p.at("pv_rows"))
    return what + "'s rows (" + std::to_string(rows) +
           ") must be a multiple of s_rows and pv_rows";
  if (rows > kMaxTileRows)
    return "more than " + std::to_string(kMaxTileRows) + " rows per " + what;
  if (keyTile % p.at("s_keys"))
    return what + "'s key tile must be a multiple of s_keys";
  if (p.at("bf16_dot") && keyTile % 2)
    return "bf16_dot needs an even key tile";
  const int64_t scratch = taskScratchBytes(
      f, rows, keyTile, p.at("channel_block"), p.at("stage_kv") != 0);
  if (scratch > f.scratchBudget)
    return "per-task scratch of the " + what + " " +
           std::to_string(scratch / 1024) + " KiB exceeds " +
           std::to_string(f.scratchBudget / 1024) +
           " KiB (half the L2 of the target's machine model)";
  return "";
}

std::string tilesViolation(const SpaceFacts &f, const ScheduleParams &p) {
  const int64_t w = p.at("vector_width");
  const int64_t heads = p.at("heads_per_tile");
  if (f.group % heads)
    return "heads_per_tile must divide h/kv";
  if (p.at("s_rows") % w || p.at("pv_rows") % w)
    return "s_rows and pv_rows must be multiples of vector_width";
  if (f.dv % p.at("channel_block"))
    return "channel_block must divide dv";
  if (std::string why = tileViolation(
          f, p, "query tile", roundUp(heads * p.at("tokens_per_tile"), w),
          p.at("key_tile"));
      !why.empty())
    return why;
  if (const int64_t lt = p.at("long_tokens_per_tile"); lt > 0)
    if (std::string why =
            tileViolation(f, p, "long-call tile", roundUp(heads * lt, w),
                          p.at("long_key_tile"));
        !why.empty())
      return why;
  if (p.at("decode_tokens") > 0 &&
      roundUp(heads * p.at("decode_tokens"), w) > kMaxTileRows)
    return "more than " + std::to_string(kMaxTileRows) +
           " rows per decode tile";
  return "";
}

/// Copies of K/V: the bf16 dot product reads them in place, and a task of
/// several query tiles copies its K/V within the core's share of the L3.
std::string kvCopyViolation(const SpaceFacts &f, const ScheduleParams &p) {
  if (p.at("bf16_dot") && p.at("stage_kv"))
    return "bf16_dot needs stage_kv = 0";
  const int64_t tiles = p.at("tiles_per_task"),
                longTiles = p.at("long_tiles_per_task");
  if ((tiles > 1 || longTiles > 1) && !p.at("stage_kv") && !p.at("bf16_dot"))
    return "tiles_per_task above 1 copies K/V per task: it needs "
           "stage_kv = 1 or bf16_dot = 1";
  const int64_t stagedKeyBytes = f.stagedKeyBytes(p.at("bf16_dot") != 0);
  auto overBudget = [&](const char *what, int64_t keys) {
    return what + std::string(" copies ") +
           std::to_string(keys * stagedKeyBytes / 1024) +
           " KiB of K/V per task, more than " +
           std::to_string(f.stagedBudget / 1024) +
           " KiB (the core's share of the L3 in the target's machine "
           "model)";
  };
  if (tiles > 1 && f.T &&
      f.Tkv.value_or(*f.T) * stagedKeyBytes > f.stagedBudget)
    return overBudget("tiles_per_task", f.Tkv.value_or(*f.T));
  if (longTiles > 1 && p.at("long_max_keys") * stagedKeyBytes > f.stagedBudget)
    return overBudget("long_max_keys", p.at("long_max_keys"));
  return "";
}

/// Each register block's accumulators, row vectors and broadcast fit the
/// target's vector registers.
std::string registerViolation(const SpaceFacts &f, const ScheduleParams &p) {
  const int64_t w = p.at("vector_width");
  const std::string budget =
      " needs more than " + std::to_string(f.registers) + " vector registers";
  if (p.at("pv_chans") > f.dv)
    return "pv_chans exceeds dv";
  if (blockRegisters(p.at("s_rows"), p.at("s_keys"), w) > f.registers)
    return "QK^T register block" + budget;
  if (blockRegisters(p.at("pv_rows"), p.at("pv_chans"), w) > f.registers)
    return "PV register block" + budget;
  if (p.count("gemm_cols")) {
    if (p.at("gemm_cols") % w)
      return "gemm_cols must be a multiple of vector_width";
    if (blockRegisters(p.at("gemm_cols"), p.at("gemm_rows"), w) > f.registers)
      return "GEMM register block" + budget;
    if (p.at("gemm_n_block") < p.at("gemm_cols"))
      return "gemm_n_block must be at least gemm_cols";
  }
  return "";
}

std::string cpuPointViolation(const SpaceFacts &f,
                              const std::vector<ParamDecl> &params,
                              const ScheduleParams &p) {
  if (std::string why = declaredViolation(params, p); !why.empty())
    return why;
  if (std::string why = tilesViolation(f, p); !why.empty())
    return why;
  if (std::string why = kvCopyViolation(f, p); !why.empty())
    return why;
  return registerViolation(f, p);
}

} // namespace

ScheduleSpace cpuScheduleSpace(const AttentionSpec &s,
                               const HalideTargetInfo &target) {
  const SpaceFacts facts = readFacts(s, target);
  ScheduleSpace space;
  space.params = declareCpuSpace(facts);
  space.violation = [facts, params = space.params](const ScheduleParams &p) {
    return cpuPointViolation(facts, params, p);
  };
  // Wide heads (dk, dv up to 512) can push the per-task scratch past its
  // bound: fewer query tiles per task first (a K/V copy past the L3
  // share), then a shorter long-call tile (down to none), then fewer
  // tokens per tile, then shorter key tiles, then no K/V staging.
  space.defaults = descendToValid(space, deriveCpuDefaults(facts, space.params),
                                  {{"long_tiles_per_task", -1},
                                   {"tiles_per_task", -1},
                                   {"long_tokens_per_tile", -1},
                                   {"long_key_tile", -1},
                                   {"tokens_per_tile", -1},
                                   {"key_tile", -1},
                                   {"stage_kv", -1},
                                   {"heads_per_tile", -1}},
                                  [lanes = facts.lanes](ScheduleParams &p) {
                                    fitRegisterBlocks(lanes, p);
                                  });
  return space;
}

} // namespace mhagen::hl
