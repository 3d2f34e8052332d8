// The attention algorithm in Halide, free of any schedule: what each stage
// computes, in plain math. Schedules (CpuSchedule.h, GpuSchedule.h) decide
// where and how it runs. Tile shapes the algorithm is written against
// (query tile, key tile, accumulator channel block) are parameters here,
// never literals, so the tuner can change them.
#ifndef MHAGEN_HALIDE_ATTENTIONALGORITHM_H
#define MHAGEN_HALIDE_ATTENTIONALGORITHM_H

#include "mhagen/spec/AttentionSpec.h"

#include <Halide.h>

#include <functional>
#include <optional>
#include <string>

namespace mhagen::hl {

/// Loop variables shared by every stage (their names appear in .stmt).
struct AttentionVars {
  Halide::Var c{"c"}, hd{"hd"}, t{"t"}, b{"b"}; // out(c, hd, t, b)
  Halide::Var i{"i"}, j{"j"}; // row in query tile, key in key tile
  Halide::Var kt{"kt"};       // key tile index
  Halide::Var qo{"qo"};       // query tile index (tokens)
  Halide::Var ho{"ho"};       // head block (headsPerTile heads)
  Halide::Var cb{"cb"};       // accumulator channel block
  Halide::Var g{"g"};         // key/value head
  Halide::Var p{"p"};         // element of a bf16 pair (0, 1)
  Halide::Var n{"n"};         // projection output feature
  Halide::Var sp{"sp"};       // split of the key axis (split-KV decode)
};

/// The tile shape of the flash form. A query tile packs `headsPerTile`
/// query heads that share one K/V head (GQA) times `tokensPerTile` tokens
/// into its rows -- row i is head i % headsPerTile of token
/// i / headsPerTile -- so each K/V tile is read once for all of them, and
/// a decode step (one token) still fills the vector lanes. `rows` is that
/// product rounded up to the vector width; the extra rows are padding.
struct AttentionTiles {
  int headsPerTile = 1; ///< divides h / kv
  int tokensPerTile = 64;
  int rows = 64;         ///< >= headsPerTile * tokensPerTile
  int keyTile = 32;      ///< keys per online-softmax step
  int channelBlock = 16; ///< accumulator channels per state tuple (divides dv)
  bool stageKv = false;  ///< copy each K/V tile to dense f32 first
  /// Query tiles per parallel task. Above 1 the task makes its K/V copies
  /// (stageKv's f32 rows, or bf16Dot's K rows and V pairs) once for all
  /// its tiles instead of per key tile.
  int tilesPerTask = 1;
  /// bf16 inputs on AVX512_BF16: both products run as pairwise bf16 dot
  /// products (vdpbf16ps). Q and K stay bf16, P is rounded to bf16, and
  /// V is copied per key tile into key-pair-interleaved rows.
  bool bf16Dot = false;
  /// Split-KV (FlashDecoding): when > 0, the key axis of each query tile
  /// is cut into up to kMaxKvSplits chunks so that batch x head blocks x
  /// query tiles x chunks reaches about `splitTasks` parallel tasks; each
  /// chunk leaves a partial (acc, max, sum) and a merge pass combines
  /// them. The count is an expression of the call's sizes (B, T_q, T_kv).
  int splitTasks = 0;
  bool splitKv = false;     ///< the split structure (splitTasks 0: 1 chunk)
  int splitMinKeyTiles = 1; ///< no chunk shorter than this many key tiles
  /// The decode micro-kernel's tile: K/V channels in the vector
  /// lanes instead of rows, so `rows` is exactly headsPerTile *
  /// tokensPerTile and a call computes only the rows of its T_q tokens
  /// (the output reads row min(t, TT-1) * HP + head, which bounds
  /// inference keeps to T_q * HP rows). Needs one query tile (T_q <= TT).
  bool channelsInLanes = false;
  /// The decode micro-kernel's tasks hold every head block of their batch
  /// and key chunk (headsInTask), so each staged key tile reads whole
  /// token rows of K/V ([kv, dk] contiguous) instead of one head's slice.
  bool headsInTask = false;
  /// With headsInTask, K and V are read where they lie and in memory
  /// order: the QK^T and the P V of every head block of a key tile run in
  /// one loop nest each with the keys outermost, so the loads walk whole
  /// token rows (no copy, no per-head stride). The P V accumulators then
  /// live in the L1 rather than in registers.
  bool kvInRowOrder = false;
  std::string prefix; ///< prepended to every Func name (two variants)
};

/// The most chunks one query tile's key axis is cut into.
constexpr int kMaxKvSplits = 64;

/// Inputs of the attention core as f32 Funcs over (c, head, token, batch);
/// with bf16Dot also in their storage type (qRaw, kRaw, vRaw).
struct AttentionInputs {
  Halide::Func q, k, v;
  Halide::Func qRaw, kRaw, vRaw;
  Halide::Expr tq, tkv; ///< query and key/value lengths
  Halide::Expr batch;   ///< B (the split count depends on it)
  Halide::Func kvLen;   ///< kvLen(b): keys visible in batch b (padding)
  bool hasKvLen = false;
  /// Score modifiers (docs/design.md §2): sink(hd), the learned sink logit
  /// of query head hd (sinks = learned); slope(hd), its ALiBi slope
  /// (alibi = true: the standard slopes, compiled in; runtime: a call
  /// argument). Undefined when the spec has no such modifier.
  Halide::Func sink, slope;
  /// scale = runtime: the call's scale (a load of its one-element
  /// argument); undefined: the spec's compiled-in scale.
  Halide::Expr scale;
};

/// Every stage of the fused (flash) attention, for scheduling.
struct AttentionStages {
  Halide::Func rowPos;    ///< rowPos(i, qo): absolute position of row i
  Halide::Func rowSlope;  ///< rowSlope(i, ho): ALiBi slope of row i's head
                          ///< (defined only with alibi)
  Halide::Func qTile;     ///< qTile(i, c, qo, ho, b) = q * scale
  Halide::Func qRows;     ///< bf16Dot: the tile's Q rows, qRows(c, i, ...)
  Halide::Func kTile;     ///< kTile(c, j, kt, g, b): K rows of a key tile
                          ///< (stageKv: f32; bf16Dot: bf16)
  Halide::Func vTile;     ///< vTile(c, j, kt, g, b) (stageKv), or with
                          ///< bf16Dot vTile(p, c, j2, kt, g, b) = V pairs
  Halide::Func probsBf16; ///< probsBf16(p, i, j2, ...) (bf16Dot only)
  Halide::Func scoresAcc; ///< scoresAcc(i, j, kt, qo, ho, b) = q . k
  Halide::Func scores;    ///< masked scores of one key tile
  Halide::Func tileMax;   ///< row max of a key tile
  Halide::Func probs;     ///< exp(score - tile max), 0 where masked
  Halide::Func tileSum;   ///< row sum of probs
  Halide::Func pvAcc;     ///< pvAcc(i, c, kt, qo, ho, b) = probs . v
  Halide::Func pv;
  Halide::Func state;    ///< running (acc[channelBlock], max, sum) per row
                         ///< (split-KV: per chunk sp of the key axis)
  Halide::Func partial;  ///< split-KV: state of each chunk, materialised
  Halide::Func mergeMax; ///< split-KV: max over chunks of the row max
  Halide::Func merged;   ///< split-KV: (acc[channelBlock], sum) rescaled to
                         ///< mergeMax and summed over chunks
  Halide::RDom rs;       ///< split-KV: over the chunks
  Halide::Expr splits;   ///< chunks per query tile (1 without split-KV)

  Halide::Func rowScale; ///< rowScale(i, cb, qo, ho, b) = 1 / sum, 0 where
                         ///< the row saw no key: one division per row
  Halide::Func out;      ///< out(c, hd, t, b) = acc / sum (0 if all masked);
                         ///< with lse = true the Tuple (that value, the
                         ///< row's max m, its sum l): see attentionValue
  Halide::RDom rc;       ///< over dk (the QK^T dot); with bf16Dot
                         ///< (pair, dk/2)
  Halide::RDom rj;       ///< over the keys of one tile
  Halide::RDom rjPairs;  ///< bf16Dot: (pair, KT/2) for the PV dot
  Halide::RDom rt;       ///< over key tiles (bounded by the mask)
  AttentionTiles tiles;
};

AttentionStages defineAttention(const AttentionSpec &spec,
                                const AttentionInputs &in,
                                const AttentionTiles &tiles,
                                const AttentionVars &v);

/// The attention value of `out` (a stage's st.out, or a Func defined like
/// it) at (c, hd, t, b): the Func's value, or element 0 of its Tuple when
/// the spec has lse = true.
Halide::Expr attentionValue(const AttentionSpec &s, const Halide::Func &out,
                            const Halide::Expr &c, const Halide::Expr &hd,
                            const Halide::Expr &t, const Halide::Expr &b);

/// A row's log-sum-exp from its running max m and sum l: m + log(l), and
/// -inf where l = 0 (no key seen). The -inf is built from its bit pattern
/// by an integer select, so fast-math code never computes with it.
Halide::Expr logSumExp(const Halide::Expr &m, const Halide::Expr &l);

/// y(n, t, b) = sum_k x(k, t + T b) * w(n, k) (+ bias(n)): one projection.
/// Its GEMM's rows are the call's tokens, sequence after sequence (row
/// t + T b is token t of sequence b), so a block of rows spans sequences:
/// B decoder steps of one token each fill one register block, where
/// blocks per sequence would hold one live row each.
///
/// Calls of few rows can take a second copy of the same sum, `stream`,
/// which their schedule walks in the weights' memory order (a GEMV reads
/// each weight once, so a packed copy of it only adds traffic).
struct Projection {
  Halide::Func acc; ///< the reduction (f32), acc(n, row)
  Halide::Func out; ///< out(n, t, b): acc, or stream where streamed, stored
  Halide::Func w;   ///< the weights it reads, w(n, k)
  Halide::Func x;   ///< the inputs it reads, x(k, row)
  Halide::RDom rk;
  int64_t inFeatures = 0; ///< the extent of rk
  /// The weight-streaming copy of acc and its reduction, and the condition
  /// under which out reads it (all undefined without one).
  Halide::Func stream;
  Halide::RDom streamRk;
  Halide::Expr streamed;
};

/// `tokens`: T, the call's tokens per sequence. `store` turns the f32
/// result into the stored value (a cast, or the rounding to a bf16 bit
/// pattern). `streamed`, where defined, is the condition under which out
/// reads the weight-streaming copy of the sum.
Projection
defineProjection(const std::string &name, Halide::Func x, int64_t inFeatures,
                 Halide::Func w, Halide::Func bias, bool hasBias,
                 const std::function<Halide::Expr(Halide::Expr)> &store,
                 const Halide::Expr &tokens, const AttentionVars &v,
                 const Halide::Expr &streamed = Halide::Expr());

/// The largest divisor of dv that is at most `preferred` (accumulator
/// channels per state tuple must tile dv exactly).
int channelBlockFor(int64_t dv, int preferred);

} // namespace mhagen::hl

#endif
