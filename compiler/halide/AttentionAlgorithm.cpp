#include "AttentionAlgorithm.h"
#include "FastMath.h"

#include "mhagen/spec/SoftmaxNumerics.h"

#include "mhagen/spec/BackendResult.h"

namespace mhagen::hl {

using namespace Halide;

int channelBlockFor(int64_t dv, int preferred) {
  for (int cb = preferred; cb > 1; --cb)
    if (dv % cb == 0)
      return cb;
  return 1;
}

// The algorithm, in plain math (docs/design.md §1, the flash form):
//
//   for each batch b, head block ho, query tile qo (rows i: see
//   AttentionTiles for how rows map to heads and tokens):
//     Qs[i, c]   = Q[token(i), head(i), c] * scale
//     m = -inf, l = 0, acc = 0                       (per row)
//     for each key tile kt the mask does not hide completely:
//       S[i, j]  = Qs[i, :] . K[g, kt*KT + j, :]     (g = head / (h / kv))
//       S[i, j]  = lowest where the mask hides key kt*KT + j from row i
//       tm[i]    = max_j S[i, j]
//       P[i, j]  = exp(S[i, j] - tm[i]), 0 where hidden
//       ts[i]    = sum_j P[i, j]
//       PV[i, c] = sum_j P[i, j] V[g, kt*KT + j, c]
//       m'       = max(m, tm);  acc = acc e^(m-m') + PV e^(tm-m')
//       l        = l e^(m-m') + ts e^(tm-m');  m = m'
//     O[i, c] = l > 0 ? acc / l : 0
//
// Score modifiers (docs/design.md §2) change S before the mask:
// softcap S = C tanh(S / C), ALiBi S += slope(head) (key - pos(i)); a
// learned sink starts the state at m = sink(head), l = 1 (a key of value
// 0 that every row sees), so a row with no visible key still outputs 0.
//
// Split-KV (tiles.splitKv, the decode variant; docs/design.md §1): the key
// tiles a query tile visits are cut into `splits` chunks sp, the scan runs
// per chunk into its own (acc, m, l), and a merge rescales every chunk to
// the largest m and sums.
//
// Each key tile's softmax is taken against the tile's own max, so P, its
// row sum and P*V are ordinary per-tile Funcs; only the merge into the
// running state is a scan. Halide Tuple elements share dimensions, so the
// state holds a block of accumulator channels plus m and l per row.
// Every value stays finite (the fast-math flags Halide sets assume no
// infinities): "minus infinity" is kLowest, and hidden keys are zeroed by
// the mask predicate itself.
//
// Non-finite inputs (docs/design.md §1): a visible score that is not
// finite -- Q or K held an infinity or a NaN -- makes its probability
// NaN, so the row's sum l and every accumulator turn NaN, and the output
// stage turns a row whose l is NaN into NaN channels and a NaN lse. The
// tests run on integer views of the bits: the fast-math flags let LLVM
// fold a floating-point NaN test of a value it computed, never an integer
// one. A row with no visible key keeps l = 0 and outputs zeros whatever
// the hidden keys' values.
static const float kLowest = kLowestScore; // mhagen/spec/SoftmaxNumerics.h

namespace {
/// All ones in the exponent once the sign is shifted out: the value is an
/// infinity or a NaN.
Expr notFiniteBits(const Expr &x) {
  return (reinterpret<uint32_t>(x) << 1) >= cast<uint32_t>(Expr(0xff000000u));
}
/// A quiet NaN's bits.
Expr quietNanBits() { return cast<uint32_t>(Expr(0x7fc00000u)); }
} // namespace

namespace {

/// What every stage of one attention definition reads: the spec, the
/// inputs, the tiles, the variables, and the row and key expressions they
/// share.
struct AttentionContext {
  const AttentionSpec &s;
  const AttentionInputs &in;
  const AttentionTiles &tiles;
  const AttentionVars &v;
  AttentionStages &st;
  int HP, TT, KT, CB;
  int64_t group;
  Expr Tq, Tkv, scale;
  Expr head;         ///< row i's head
  Expr token;        ///< row i's token in the call
  Expr tokenClamped; ///< padding rows repeat the last token
  MaskSpec mask;     ///< the mask in effect (spec::effectiveMask)
  bool perSequence;  ///< a paged cache or a ragged batch
  Expr seqEnd;       ///< where the sequence ends: T_kv or its own length
  Expr kvHead;       ///< the tile's K/V head (GQA)
  Expr key;          ///< key kt * KT + j
  Expr rowPos;       ///< row i's absolute position (a per-tile table)
  Expr visible;      ///< key `key` is visible to row i

  std::string name(const char *n) const { return tiles.prefix + n; }
};

void checkTiles(const AttentionSpec &s, const AttentionTiles &tiles) {
  const int HP = tiles.headsPerTile, TT = tiles.tokensPerTile;
  const int QT = tiles.rows, KT = tiles.keyTile, CB = tiles.channelBlock;
  const int64_t group = s.h / s.n_kv;
  if (s.d_v % CB != 0)
    throw BackendError("schedule", "channel_block " + std::to_string(CB) +
                                       " does not divide dv " +
                                       std::to_string(s.d_v));
  if (group % HP != 0)
    throw BackendError("schedule", "heads_per_tile " + std::to_string(HP) +
                                       " does not divide h/kv " +
                                       std::to_string(group));
  if (tiles.bf16Dot && (s.d_k % 2 || KT % 2 || s.dtype != DType::BF16 ||
                        s.kvType() != KvType::BF16))
    throw BackendError("schedule", "bf16_dot needs bf16 inputs (Q, K and V), "
                                   "an even dk and an even key_tile");
  if (QT < HP * TT)
    throw BackendError("schedule", "rows per tile " + std::to_string(QT) +
                                       " < heads_per_tile * tokens_per_tile");
}

/// Which keys each row may see (docs/design.md §2). The rows' absolute
/// positions are a small table per tile, so the predicate is a vector
/// load and compares (i / HP spelled inline would split the vectors).
void defineVisibility(AttentionContext &x) {
  const Var &i = x.v.i, &qo = x.v.qo, &b = x.v.b;
  AttentionStages &st = x.st;
  const Expr pos = x.token + (x.seqEnd - x.Tq); // absolute position
  st.rowPos = Func(x.name("row_pos"));
  if (x.perSequence)
    st.rowPos(i, qo, b) = pos;
  else
    st.rowPos(i, qo) = pos;
  x.rowPos = x.perSequence ? st.rowPos(i, qo, b) : st.rowPos(i, qo);
  // A union of conjunctions: visible under some clause.
  auto andAlso = [](const Expr &a, const Expr &c) {
    return a.defined() ? a && c : c;
  };
  Expr anyClause;
  for (const MaskClause &c : x.mask.anyOf) {
    Expr v;
    if (c.isCausal())
      v = andAlso(v, x.key <= x.rowPos);
    if (c.window > 0)
      v = andAlso(v, x.key > x.rowPos - static_cast<int>(c.window));
    if (c.padding)
      v = andAlso(v, x.key < x.in.kvLen(b));
    if (c.sink > 0)
      v = andAlso(v, x.key < static_cast<int>(c.sink));
    anyClause = anyClause.defined() ? anyClause || v : v;
  }
  x.visible = x.key < x.Tkv;
  if (anyClause.defined())
    x.visible = x.visible && anyClause;
}

/// The score modifiers (docs/design.md §2), on the scaled score of row i
/// and key `key`: softcap, then the ALiBi bias slope * (key - pos).
Expr modifyScore(const AttentionContext &x, Expr score) {
  if (x.s.softcap) {
    // The cap's clamp would make an infinite score finite: a score that
    // is not finite stays NaN, so the probability test below sees it.
    const float cap = static_cast<float>(*x.s.softcap);
    const Expr capped = cap * tanhRational(score * (1.0f / cap));
    score = reinterpret<float>(select(notFiniteBits(score), quietNanBits(),
                                      reinterpret<uint32_t>(capped)));
  }
  if (x.s.alibi != AlibiSlopes::None)
    score += x.st.rowSlope(x.v.i, x.v.ho) * cast<float>(x.key - x.rowPos);
  return score;
}

/// S = Q K^T for one key tile, with f32 products (K/V widened).
void defineScoresF32(const AttentionContext &x) {
  const Var &i = x.v.i, &j = x.v.j, &c = x.v.c, &kt = x.v.kt, &qo = x.v.qo,
            &ho = x.v.ho, &b = x.v.b, &g = x.v.g;
  const AttentionInputs &in = x.in;
  AttentionStages &st = x.st;
  const int KT = x.KT;
  const Expr Tkv = x.Tkv;
  st.qTile = Func(x.name("q_tile"));
  st.qTile(i, c, qo, ho, b) = in.q(c, x.head, x.tokenClamped, b) * x.scale;

  Func kRead(x.name("k_read")),
      vRead(x.name("v_read")); // a key tile as (c, j, kt, g, b)
  kRead(c, j, kt, g, b) = in.k(c, g, min(kt * KT + j, Tkv - 1), b);
  vRead(c, j, kt, g, b) = in.v(c, g, min(kt * KT + j, Tkv - 1), b);
  if (x.tiles.stageKv) {
    st.kTile = Func(x.name("k_tile"));
    st.kTile(c, j, kt, g, b) = kRead(c, j, kt, g, b);
    st.vTile = Func(x.name("v_tile"));
    st.vTile(c, j, kt, g, b) = vRead(c, j, kt, g, b);
    kRead = st.kTile;
    vRead = st.vTile;
  }
  st.rc = RDom(0, static_cast<int>(x.s.d_k), x.name("rc"));
  st.scoresAcc = Func(x.name("scores_acc"));
  st.scoresAcc(i, j, kt, qo, ho, b) = 0.0f;
  st.scoresAcc(i, j, kt, qo, ho, b) +=
      st.qTile(i, st.rc, qo, ho, b) * kRead(st.rc, j, kt, x.kvHead, b);
  st.scores = Func(x.name("scores"));
  st.scores(i, j, kt, qo, ho, b) = select(
      x.visible, modifyScore(x, st.scoresAcc(i, j, kt, qo, ho, b)), kLowest);
}

/// S = Q K^T with bf16 pairs: element p of pair c2 is channel 2*c2 + p. Q
/// keeps its bf16 values (the scale is applied to the f32 dot product).
void defineScoresBf16(const AttentionContext &x) {
  const Var &i = x.v.i, &j = x.v.j, &c = x.v.c, &kt = x.v.kt, &qo = x.v.qo,
            &ho = x.v.ho, &b = x.v.b, &g = x.v.g, &p = x.v.p;
  const AttentionInputs &in = x.in;
  AttentionStages &st = x.st;
  const int KT = x.KT;
  Var c2("c2");
  st.qRows = Func(x.name("q_rows"));
  st.qRows(c, i, qo, ho, b) = in.qRaw(c, x.head, x.tokenClamped, b);
  st.qTile = Func(x.name("q_tile"));
  st.qTile(p, i, c2, qo, ho, b) = st.qRows(2 * c2 + p, i, qo, ho, b);
  // K rows of the key tile, copied dense (the clamped key index then
  // stays out of the inner loop's addressing).
  st.kTile = Func(x.name("k_rows"));
  st.kTile(c, j, kt, g, b) = in.kRaw(c, g, min(kt * KT + j, x.Tkv - 1), b);
  st.rc = RDom(0, 2, 0, static_cast<int>(x.s.d_k / 2), x.name("rc"));
  st.scoresAcc = Func(x.name("scores_acc"));
  st.scoresAcc(i, j, kt, qo, ho, b) = 0.0f;
  st.scoresAcc(i, j, kt, qo, ho, b) +=
      cast<float>(st.qTile(st.rc.x, i, st.rc.y, qo, ho, b)) *
      cast<float>(st.kTile(2 * st.rc.y + st.rc.x, j, kt, x.kvHead, b));
  st.scores = Func(x.name("scores"));
  st.scores(i, j, kt, qo, ho, b) = select(
      x.visible, modifyScore(x, st.scoresAcc(i, j, kt, qo, ho, b) * x.scale),
      kLowest);
}

/// The tile's softmax against its own row max, its row sum and P V.
void defineTileSoftmax(const AttentionContext &x) {
  const Var &i = x.v.i, &j = x.v.j, &c = x.v.c, &kt = x.v.kt, &qo = x.v.qo,
            &ho = x.v.ho, &b = x.v.b, &g = x.v.g;
  const AttentionInputs &in = x.in;
  AttentionStages &st = x.st;
  const AttentionTiles &tiles = x.tiles;
  const int KT = x.KT;
  const Expr Tkv = x.Tkv;
  st.tileMax = Func(x.name("tile_max"));
  st.tileMax(i, kt, qo, ho, b) = kLowest;
  st.tileMax(i, kt, qo, ho, b) =
      max(st.tileMax(i, kt, qo, ho, b), st.scores(i, st.rj, kt, qo, ho, b));
  // P feeds the bf16 dot product rounded to bf16, so its exp needs only
  // bf16's accuracy there (FastMath.cpp); everywhere else f32's.
  const ExpAccuracy pAccuracy =
      tiles.bf16Dot ? ExpAccuracy::Bf16 : ExpAccuracy::F32;
  // A visible score that is not finite gives a NaN probability. Hidden
  // keys score kLowest and never do.
  const Expr prob = select(x.visible,
                           expNonPositive(st.scores(i, j, kt, qo, ho, b) -
                                              st.tileMax(i, kt, qo, ho, b),
                                          pAccuracy),
                           0.0f);
  st.probs = Func(x.name("probs"));
  st.probs(i, j, kt, qo, ho, b) =
      reinterpret<float>(select(notFiniteBits(st.scores(i, j, kt, qo, ho, b)),
                                quietNanBits(), reinterpret<uint32_t>(prob)));

  st.pvAcc = Func(x.name("pv_acc"));
  st.pvAcc(i, c, kt, qo, ho, b) = 0.0f;
  st.tileSum = Func(x.name("tile_sum"));
  st.tileSum(i, kt, qo, ho, b) = 0.0f;
  if (!tiles.bf16Dot) {
    st.tileSum(i, kt, qo, ho, b) += st.probs(i, st.rj, kt, qo, ho, b);
    // P V for the tile.
    st.pvAcc(i, c, kt, qo, ho, b) +=
        st.probs(i, st.rj, kt, qo, ho, b) *
        (tiles.stageKv ? st.vTile(c, st.rj, kt, x.kvHead, b)
                       : in.v(c, x.kvHead, min(kt * KT + st.rj, Tkv - 1), b));
  } else {
    // P rounded to bf16 in key pairs; the row sum uses the same rounded
    // values so that the normalisation matches what P V saw.
    const Var &p = x.v.p;
    Var j2("j2");
    st.probsBf16 = Func(x.name("probs_bf16"));
    st.probsBf16(p, i, j2, kt, qo, ho, b) =
        cast(BFloat(16), st.probs(i, 2 * j2 + p, kt, qo, ho, b));
    st.rjPairs = RDom(0, 2, 0, KT / 2, x.name("rjp"));
    st.tileSum(i, kt, qo, ho, b) +=
        cast<float>(st.probsBf16(st.rjPairs.x, i, st.rjPairs.y, kt, qo, ho, b));
    // V rows of the key tile (clamped key index), interleaved in key
    // pairs; the schedule keeps channels in lanes, so the clamped key is
    // one index per vector and the rows are read in place.
    st.vTile = Func(x.name("v_pairs"));
    st.vTile(p, c, j2, kt, g, b) =
        in.vRaw(c, g, min(kt * KT + 2 * j2 + p, Tkv - 1), b);
    st.pvAcc(i, c, kt, qo, ho, b) +=
        cast<float>(
            st.probsBf16(st.rjPairs.x, i, st.rjPairs.y, kt, qo, ho, b)) *
        cast<float>(st.vTile(st.rjPairs.x, c, st.rjPairs.y, kt, x.kvHead, b));
  }
  st.pv = Func(x.name("pv"));
  st.pv(i, c, kt, qo, ho, b) = st.pvAcc(i, c, kt, qo, ho, b);
}

/// The key tiles one conjunction of the mask leaves a query tile.
struct TileRange {
  Expr lo, hi, hiUnpadded;
};

/// The key tiles a query tile must visit: the mask hides the rest
/// completely, so they are never computed (causal costs about half).
/// Each conjunction of the mask leaves one range of tiles [lo, hi], by the
/// rule of docs/design.md §2 "Tile skipping" (clauseKeyTiles); a union
/// scans the hull of its ranges and skips the tiles in none of them.
std::vector<TileRange> keyTileRanges(const AttentionContext &x,
                                     const Expr &numKeyTiles) {
  const Var &qo = x.v.qo, &b = x.v.b;
  const int TT = x.TT, KT = x.KT;
  const Expr firstToken = qo * TT;
  const Expr lastToken = min(qo * TT + TT - 1, x.Tq - 1);
  const Expr firstPos = firstToken + (x.seqEnd - x.Tq);
  const Expr lastPos = lastToken + (x.seqEnd - x.Tq);
  std::vector<TileRange> ranges;
  for (const MaskClause &c : x.mask.anyOf) {
    TileRange r{0, numKeyTiles - 1, Expr()};
    // A paged cache's positions come from kv_lens: its causal limit is
    // left out of what split-KV chunks (below), like the padding limit,
    // so the chunk size stays an expression of the call's sizes and
    // bounds inference stages one key tile per step.
    if (c.isCausal() && !x.perSequence)
      r.hi = min(r.hi, lastPos / KT); // floor division
    if (c.sink > 0)
      r.hi = min(r.hi, static_cast<int>((c.sink - 1) / KT));
    // Without the padding limit: what split-KV divides into chunks (a
    // length loaded from memory in the chunk size trips a Halide 14
    // simplifier error; chunks past the padding length are empty).
    r.hiUnpadded = r.hi;
    if (c.isCausal() && x.perSequence)
      r.hi = min(r.hi, lastPos / KT);
    if (c.padding)
      r.hi = min(r.hi, (x.in.kvLen(b) - 1) / KT);
    if (c.window > 0)
      r.lo = max(0, (firstPos - static_cast<int>(c.window) + 1) / KT);
    // A position loaded from memory (a paged sequence's length) has no
    // bound Halide can see: the first tile is kept inside the key axis.
    if (c.window > 0 && x.perSequence)
      r.lo = min(r.lo, numKeyTiles - 1);
    ranges.push_back(r);
  }
  return ranges;
}

/// The scan over key tiles (st.rt) and the split-KV chunk count; returns
/// the key tile each step of the scan visits.
Expr defineKeyTileScan(const AttentionContext &x) {
  AttentionStages &st = x.st;
  const AttentionTiles &tiles = x.tiles;
  const int KT = x.KT, TT = x.TT, HP = x.HP;
  const Expr numKeyTiles = (x.Tkv + KT - 1) / KT;
  const std::vector<TileRange> ranges = keyTileRanges(x, numKeyTiles);
  Expr lo = 0, hi = numKeyTiles - 1, hiUnpadded = hi;
  if (!ranges.empty()) {
    lo = ranges[0].lo;
    hi = ranges[0].hi;
    hiUnpadded = ranges[0].hiUnpadded;
  }
  for (size_t k = 1; k < ranges.size(); ++k) {
    lo = min(lo, ranges[k].lo);
    hi = max(hi, ranges[k].hi);
    hiUnpadded = max(hiUnpadded, ranges[k].hiUnpadded);
  }
  // A union: the tile lies in some clause's range.
  auto inRanges = [&](const Expr &tile) {
    Expr any;
    for (const TileRange &r : ranges) {
      Expr in = tile >= r.lo && tile <= r.hi;
      any = any.defined() ? any || in : in;
    }
    return any;
  };
  // Split-KV: chunk sp of `splits` covers key tiles lo + sp*chunk ...,
  // at most `chunk` of them. The count comes from the call's sizes: enough
  // chunks that B x head blocks x query tiles x chunks reaches the target
  // task count, never a chunk shorter than splitMinKeyTiles.
  const bool split = tiles.splitKv;
  if (split && tiles.splitTasks > 0) {
    const Expr baseTasks =
        x.in.batch * static_cast<int>(tiles.headsInTask ? 1 : x.s.h / HP) *
        ((x.Tq + TT - 1) / TT);
    const Expr wanted = (tiles.splitTasks + baseTasks - 1) / baseTasks;
    const Expr byKeys = max(1, numKeyTiles / tiles.splitMinKeyTiles);
    st.splits = clamp(wanted, 1, min(byKeys, kMaxKvSplits));
  } else {
    st.splits = 1;
  }
  // The scan runs over key tiles lo + rt: the window's first tile is an
  // offset and the causal/padding limit a predicate on the last, which
  // Halide turns into the loop's trip count (visible in the .stmt).
  Expr keyTile;
  if (split) {
    // Every chunk gets `chunk` key tiles of the range the causal and window
    // limits leave; the padding limit then cuts the scan like any mask.
    // keyTile stays an affine expression of rt, so bounds inference stages
    // exactly one K/V tile per step.
    const Expr chunk = max(1, (hiUnpadded - lo + st.splits) / st.splits);
    st.rt = RDom(0, (numKeyTiles + st.splits - 1) / st.splits, x.name("rt"));
    keyTile = lo + x.v.sp * chunk + st.rt;
    Expr scan = st.rt < chunk && keyTile <= hi;
    if (x.mask.isUnion())
      scan = scan && inRanges(keyTile);
    st.rt.where(scan);
  } else {
    st.rt = RDom(0, numKeyTiles, x.name("rt"));
    keyTile = lo + st.rt;
    if (x.mask.isUnion())
      st.rt.where(keyTile <= hi && inRanges(keyTile));
    else if (!x.mask.isNone())
      st.rt.where(keyTile <= hi);
  }
  return keyTile;
}

/// The running state, merged one key tile at a time.
void defineState(const AttentionContext &x, const Expr &keyTile) {
  const Var &i = x.v.i, &cb = x.v.cb, &qo = x.v.qo, &ho = x.v.ho, &b = x.v.b;
  AttentionStages &st = x.st;
  const int CB = x.CB;
  st.state = Func(x.name("state"));
  std::vector<Var> stateVars = {i, cb, qo, ho, b};
  if (x.tiles.splitKv)
    stateVars = {i, cb, x.v.sp, qo, ho, b};
  const std::vector<Expr> stateAt(stateVars.begin(), stateVars.end());
  // A learned sink is a key every row sees, with score sink(head) and
  // value 0: it starts the state (m = sink, l = 1) instead of the empty
  // one. Split-KV adds it once, in the merge, not once per chunk.
  const bool sinkInState = x.s.sinks && !x.tiles.splitKv;
  std::vector<Expr> init(static_cast<size_t>(CB), 0.0f);
  init.push_back(sinkInState ? x.in.sink(x.head) : Expr(kLowest)); // m
  init.push_back(sinkInState ? 1.0f : 0.0f);                       // l
  st.state(stateVars) = Tuple(init);
  const Expr m = st.state(stateAt)[CB];
  const Expr l = st.state(stateAt)[CB + 1];
  const Expr tm = st.tileMax(i, keyTile, qo, ho, b);
  // One of the two rescale factors is always 1: the new max is either the
  // old one or the tile's. One exp per row and tile.
  const Expr diff = m - tm;
  const Expr e = expNonPositive(-abs(diff));
  const Expr alpha = select(diff >= 0, 1.0f, e); // rescales the old state
  const Expr beta = select(diff >= 0, e, 1.0f);  // rescales this tile
  std::vector<Expr> next;
  for (int k = 0; k < CB; ++k)
    next.push_back(st.state(stateAt)[k] * alpha +
                   st.pv(i, cb * CB + k, keyTile, qo, ho, b) * beta);
  next.push_back(max(m, tm));
  next.push_back(l * alpha + st.tileSum(i, keyTile, qo, ho, b) * beta);
  st.state(stateAt) = Tuple(next);
}

/// Split-KV merge (the second, small pass): every chunk's (acc, l) is
/// rescaled to the largest chunk max M and summed,
///   acc = sum_sp acc_sp e^(m_sp - M),  l = sum_sp l_sp e^(m_sp - M).
/// A chunk that saw no key has m = lowest and l = acc = 0, so it adds 0.
void defineSplitMerge(const AttentionContext &x) {
  const Var &i = x.v.i, &cb = x.v.cb, &qo = x.v.qo, &ho = x.v.ho, &b = x.v.b;
  AttentionStages &st = x.st;
  const int CB = x.CB;
  st.partial = Func(x.name("partial"));
  st.partial(i, cb, x.v.sp, qo, ho, b) = st.state(i, cb, x.v.sp, qo, ho, b);
  st.rs = RDom(0, st.splits, x.name("rs"));
  st.mergeMax = Func(x.name("merge_max"));
  st.mergeMax(i, cb, qo, ho, b) = x.s.sinks ? x.in.sink(x.head) : Expr(kLowest);
  st.mergeMax(i, cb, qo, ho, b) = max(st.mergeMax(i, cb, qo, ho, b),
                                      st.partial(i, cb, st.rs, qo, ho, b)[CB]);
  st.merged = Func(x.name("merged"));
  std::vector<Expr> mergedInit(static_cast<size_t>(CB) + 1, 0.0f);
  if (x.s.sinks) // the sink's term e^(sink - M) of the denominator
    mergedInit[CB] =
        expNonPositive(x.in.sink(x.head) - st.mergeMax(i, cb, qo, ho, b));
  st.merged(i, cb, qo, ho, b) = Tuple(mergedInit);
  const Expr w = expNonPositive(st.partial(i, cb, st.rs, qo, ho, b)[CB] -
                                st.mergeMax(i, cb, qo, ho, b));
  std::vector<Expr> sum;
  for (int k = 0; k <= CB; ++k)
    sum.push_back(st.merged(i, cb, qo, ho, b)[k] +
                  st.partial(i, cb, st.rs, qo, ho, b)[k < CB ? k : CB + 1] * w);
  st.merged(i, cb, qo, ho, b) = Tuple(sum);
}

/// Normalise and unpack rows back to (channel, head, token). `rows` holds
/// (acc..., l at index lIdx). A row that saw no key has l = 0 and outputs
/// zeros.
void defineOutput(const AttentionContext &x, const Func &rows, int lIdx) {
  const Var &i = x.v.i, &cb = x.v.cb, &qo = x.v.qo, &ho = x.v.ho, &b = x.v.b,
            &c = x.v.c, &hd = x.v.hd, &t = x.v.t;
  AttentionStages &st = x.st;
  const int CB = x.CB, TT = x.TT, HP = x.HP;
  // The decode micro-kernel's tile holds the call's only query tile: its
  // rows past T_q * HP are then outside every region the output reads.
  const Expr row = x.tiles.channelsInLanes ? min(t, TT - 1) * HP + hd % HP
                                           : (t % TT) * HP + hd % HP;
  std::vector<Expr> channels;
  for (int k = 0; k < CB; ++k)
    channels.push_back(rows(row, c / CB, t / TT, hd / HP, b)[k]);
  const Expr lsum = rows(row, c / CB, t / TT, hd / HP, b)[lIdx];
  // The reciprocal once per row (a schedule computes it with the rows in
  // lanes), a product per channel: the per-channel division was the output
  // step's cost.
  // With it, two masks on the bits: `keep` zeroes a row that saw no key
  // (its accumulators may hold 0 x NaN from a hidden key's value) and a
  // row whose sum is NaN, which `nan` then sets to a quiet NaN.
  st.rowScale = Func(x.name("row_scale"));
  const Expr rowSum = rows(i, cb, qo, ho, b)[lIdx];
  const Expr u32zero = cast<uint32_t>(Expr(0u));
  const Expr rowIsNan = notFiniteBits(rowSum);
  st.rowScale(i, cb, qo, ho, b) =
      Tuple(select(rowSum > 0.0f, 1.0f / max(rowSum, kTinySum), 0.0f),
            select(rowSum > 0.0f && !rowIsNan,
                   cast<uint32_t>(Expr(0xffffffffu)), u32zero),
            select(rowIsNan, quietNanBits(), u32zero));
  st.out = Func(x.name("attention"));
  const Expr rowAt[] = {row, c / CB, t / TT, hd / HP, b};
  const auto rowScaleAt = [&](int k) {
    return st.rowScale(rowAt[0], rowAt[1], rowAt[2], rowAt[3], rowAt[4])[k];
  };
  const Expr value = reinterpret<float>(
      (reinterpret<uint32_t>(mux(c % CB, channels) * rowScaleAt(0)) &
       rowScaleAt(1)) |
      rowScaleAt(2));
  if (x.s.lse) {
    // The row's (m, l) beside the value: the log-sum-exp m + log(l) is
    // taken from them once per row (logSumExp), not per channel.
    const Expr mrow = x.tiles.splitKv
                          ? Expr(st.mergeMax(row, c / CB, t / TT, hd / HP, b))
                          : Expr(rows(row, c / CB, t / TT, hd / HP, b)[CB]);
    st.out(c, hd, t, b) = Tuple(value, mrow, lsum);
  } else {
    st.out(c, hd, t, b) = value;
  }
}

} // namespace

AttentionStages defineAttention(const AttentionSpec &s,
                                const AttentionInputs &in,
                                const AttentionTiles &tiles,
                                const AttentionVars &v) {
  checkTiles(s, tiles);
  AttentionStages st;
  st.tiles = tiles;
  AttentionContext x{s, in, tiles, v, st};
  x.HP = tiles.headsPerTile;
  x.TT = tiles.tokensPerTile;
  x.KT = tiles.keyTile;
  x.CB = tiles.channelBlock;
  x.group = s.h / s.n_kv;
  x.Tq = in.tq;
  x.Tkv = in.tkv;
  x.scale = in.scale.defined() ? in.scale
                               : Expr(static_cast<float>(s.effectiveScale()));
  // Row i of a tile: head ho*HP + i%HP, token qo*TT + i/HP. Tokens past
  // the end (and padding rows) repeat the last token; they are computed
  // with the tile and never stored.
  x.head = v.ho * x.HP + v.i % x.HP;
  x.token = v.qo * x.TT + v.i / x.HP;
  x.tokenClamped = min(x.token, x.Tq - 1);
  // The mask in effect (a paged cache or a ragged batch adds its
  // sequences' lengths), and where a sequence ends: T_kv, or with a paged
  // cache or a ragged batch its own length, so its T_q queries are its last
  // positions (bottom-right per sequence).
  x.mask = s.effectiveMask();
  x.perSequence = s.keysPerSequence();
  x.seqEnd = x.perSequence ? in.kvLen(v.b) : x.Tkv;
  // GQA: the tile's heads share K/V head g = head / (h/kv), without copies.
  x.kvHead = (v.ho * x.HP) / static_cast<int>(x.group);
  x.key = v.kt * x.KT + v.j;
  defineVisibility(x);
  // The ALiBi slopes are a per-tile table like the positions (rows of one
  // tile belong to up to HP heads).
  if (s.alibi != AlibiSlopes::None) {
    st.rowSlope = Func(x.name("row_slope"));
    st.rowSlope(v.i, v.ho) = in.slope(x.head);
  }
  st.rj = RDom(0, x.KT, x.name("rj"));
  if (tiles.bf16Dot)
    defineScoresBf16(x);
  else
    defineScoresF32(x);
  defineTileSoftmax(x);
  defineState(x, defineKeyTileScan(x));
  if (tiles.splitKv) {
    defineSplitMerge(x);
    defineOutput(x, st.merged, x.CB);
  } else {
    defineOutput(x, st.state, x.CB + 1);
  }
  return st;
}

Expr attentionValue(const AttentionSpec &s, const Func &out, const Expr &c,
                    const Expr &hd, const Expr &t, const Expr &b) {
  return s.lse ? Expr(out(c, hd, t, b)[0]) : Expr(out(c, hd, t, b));
}

Expr logSumExp(const Expr &m, const Expr &l) {
  const Expr bits =
      select(l > 0.0f, reinterpret<uint32_t>(m + log(max(l, kTinySum))),
             cast<uint32_t>(Expr(0xff800000u))); // -inf
  // A NaN sum (a non-finite score, see defineAttention) makes the lse NaN.
  return reinterpret<float>(select(notFiniteBits(l), quietNanBits(), bits));
}

Projection defineProjection(const std::string &name, Func x, int64_t inFeatures,
                            Func w, Func bias, bool hasBias,
                            const std::function<Expr(Expr)> &store,
                            const Expr &tokens, const AttentionVars &v,
                            const Expr &streamed) {
  Projection p;
  // The GEMM's row is t (the schedules block it as they block tokens).
  const Var &n = v.n, &row = v.t, &t = v.t, &b = v.b;
  p.w = w;
  p.x = x;
  p.inFeatures = inFeatures;
  p.rk = RDom(0, static_cast<int>(inFeatures), name + "_rk");
  p.acc = Func(name + "_acc");
  p.acc(n, row) = hasBias ? bias(n) : Expr(0.0f);
  p.acc(n, row) += x(p.rk, row) * w(n, p.rk);
  p.out = Func(name);
  if (!streamed.defined()) {
    p.out(n, t, b) = store(p.acc(n, t + tokens * b));
    return p;
  }
  p.streamed = streamed;
  p.streamRk = RDom(0, static_cast<int>(inFeatures), name + "_stream_rk");
  p.stream = Func(name + "_stream");
  p.stream(n, row) = hasBias ? bias(n) : Expr(0.0f);
  p.stream(n, row) += x(p.streamRk, row) * w(n, p.streamRk);
  const Expr r = t + tokens * b;
  p.out(n, t, b) = store(select(streamed, p.stream(n, r), p.acc(n, r)));
  return p;
}

} // namespace mhagen::hl
