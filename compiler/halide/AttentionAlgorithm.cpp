#include "AttentionAlgorithm.h"

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
// Each key tile's softmax is taken against the tile's own max, so P, its
// row sum and P*V are ordinary per-tile Funcs; only the merge into the
// running state is a scan. Halide Tuple elements share dimensions, so the
// state holds a block of accumulator channels plus m and l per row.
// Every value stays finite (the fast-math flags Halide sets assume no
// infinities): "minus infinity" is kLowest, and hidden keys are zeroed by
// the mask predicate itself.
static const float kLowest = kLowestScore; // mhagen/spec/SoftmaxNumerics.h

// exp(x) for x <= 0, 0 below -80 (where f32 exp is 0 anyway); Halide's
// fast_exp vectorises but is undefined on underflow, hence the clamp.
static Expr expNonPositive(const Expr &x) {
  return select(x < -80.0f, 0.0f, fast_exp(max(x, -80.0f)));
}

AttentionStages defineAttention(const AttentionSpec &s,
                                const AttentionInputs &in,
                                const AttentionTiles &tiles,
                                const AttentionVars &v) {
  AttentionStages st;
  st.tiles = tiles;
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
  if (tiles.bf16Dot && (s.d_k % 2 || KT % 2 || s.dtype != DType::BF16))
    throw BackendError("schedule", "bf16_dot needs bf16 inputs, an even dk "
                                   "and an even key_tile");
  if (QT < HP * TT)
    throw BackendError("schedule", "rows per tile " + std::to_string(QT) +
                                       " < heads_per_tile * tokens_per_tile");
  const Var &i = v.i, &j = v.j, &c = v.c, &kt = v.kt, &qo = v.qo, &ho = v.ho,
            &b = v.b, &cb = v.cb, &g = v.g, &hd = v.hd;
  const Expr Tq = in.tq, Tkv = in.tkv;
  const float scale = static_cast<float>(s.effectiveScale());

  // Row i of a tile: head ho*HP + i%HP, token qo*TT + i/HP. Tokens past
  // the end (and padding rows) repeat the last token; they are computed
  // with the tile and never stored.
  const Expr head = ho * HP + i % HP;
  const Expr token = qo * TT + i / HP;
  const Expr tokenClamped = min(token, Tq - 1);
  const Expr pos = token + (Tkv - Tq); // absolute position (KV-cache offset)
  // GQA: the tile's heads share K/V head g = head / (h/kv), without copies.
  const Expr kvHead = (ho * HP) / static_cast<int>(group);
  const Expr key = kt * KT + j;

  // Which keys each row may see (docs/design.md §2). The rows' absolute
  // positions are a small table per tile, so the predicate is a vector
  // load and compares (i / HP spelled inline would split the vectors).
  st.rowPos = Func("row_pos");
  st.rowPos(i, qo) = pos;
  const Expr rowPos = st.rowPos(i, qo);
  Expr visible = key < Tkv;
  if (s.mask.isCausal())
    visible = visible && key <= rowPos;
  if (s.mask.window > 0)
    visible = visible && key > rowPos - static_cast<int>(s.mask.window);
  if (s.mask.padding)
    visible = visible && key < in.kvLen(b);

  st.rj = RDom(0, KT, "rj");
  if (!tiles.bf16Dot) {
    st.qTile = Func("q_tile");
    st.qTile(i, c, qo, ho, b) = in.q(c, head, tokenClamped, b) * scale;

    Func kRead("k_read"), vRead("v_read"); // a key tile as (c, j, kt, g, b)
    kRead(c, j, kt, g, b) = in.k(c, g, min(kt * KT + j, Tkv - 1), b);
    vRead(c, j, kt, g, b) = in.v(c, g, min(kt * KT + j, Tkv - 1), b);
    if (tiles.stageKv) {
      st.kTile = Func("k_tile");
      st.kTile(c, j, kt, g, b) = kRead(c, j, kt, g, b);
      st.vTile = Func("v_tile");
      st.vTile(c, j, kt, g, b) = vRead(c, j, kt, g, b);
      kRead = st.kTile;
      vRead = st.vTile;
    }

    // S = Q K^T for one key tile.
    st.rc = RDom(0, static_cast<int>(s.d_k), "rc");
    st.scoresAcc = Func("scores_acc");
    st.scoresAcc(i, j, kt, qo, ho, b) = 0.0f;
    st.scoresAcc(i, j, kt, qo, ho, b) +=
        st.qTile(i, st.rc, qo, ho, b) * kRead(st.rc, j, kt, kvHead, b);
    st.scores = Func("scores");
    st.scores(i, j, kt, qo, ho, b) =
        select(visible, st.scoresAcc(i, j, kt, qo, ho, b), kLowest);
  } else {
    // bf16 pairs: element p of pair c2 is channel 2*c2 + p. Q keeps its
    // bf16 values (the scale is applied to the f32 dot product).
    const Var &p = v.p;
    Var c2("c2");
    st.qTile = Func("q_tile");
    st.qTile(p, i, c2, qo, ho, b) = in.qRaw(2 * c2 + p, head, tokenClamped, b);
    // K rows of the key tile, copied dense (the clamped key index then
    // stays out of the inner loop's addressing).
    st.kTile = Func("k_rows");
    st.kTile(c, j, kt, g, b) = in.kRaw(c, g, min(kt * KT + j, Tkv - 1), b);
    st.rc = RDom(0, 2, 0, static_cast<int>(s.d_k / 2), "rc");
    st.scoresAcc = Func("scores_acc");
    st.scoresAcc(i, j, kt, qo, ho, b) = 0.0f;
    st.scoresAcc(i, j, kt, qo, ho, b) +=
        cast<float>(st.qTile(st.rc.x, i, st.rc.y, qo, ho, b)) *
        cast<float>(st.kTile(2 * st.rc.y + st.rc.x, j, kt, kvHead, b));
    st.scores = Func("scores");
    st.scores(i, j, kt, qo, ho, b) =
        select(visible, st.scoresAcc(i, j, kt, qo, ho, b) * scale, kLowest);
  }

  // Softmax of the tile against its own row max.
  st.tileMax = Func("tile_max");
  st.tileMax(i, kt, qo, ho, b) = kLowest;
  st.tileMax(i, kt, qo, ho, b) =
      max(st.tileMax(i, kt, qo, ho, b), st.scores(i, st.rj, kt, qo, ho, b));
  st.probs = Func("probs");
  st.probs(i, j, kt, qo, ho, b) =
      select(visible,
             expNonPositive(st.scores(i, j, kt, qo, ho, b) -
                            st.tileMax(i, kt, qo, ho, b)),
             0.0f);

  st.pvAcc = Func("pv_acc");
  st.pvAcc(i, c, kt, qo, ho, b) = 0.0f;
  st.tileSum = Func("tile_sum");
  st.tileSum(i, kt, qo, ho, b) = 0.0f;
  if (!tiles.bf16Dot) {
    st.tileSum(i, kt, qo, ho, b) += st.probs(i, st.rj, kt, qo, ho, b);
    // P V for the tile.
    st.pvAcc(i, c, kt, qo, ho, b) +=
        st.probs(i, st.rj, kt, qo, ho, b) *
        (tiles.stageKv ? st.vTile(c, st.rj, kt, kvHead, b)
                       : in.v(c, kvHead, min(kt * KT + st.rj, Tkv - 1), b));
  } else {
    // P rounded to bf16 in key pairs; the row sum uses the same rounded
    // values so that the normalisation matches what P V saw.
    const Var &p = v.p;
    Var j2("j2");
    st.probsBf16 = Func("probs_bf16");
    st.probsBf16(p, i, j2, kt, qo, ho, b) =
        cast(BFloat(16), st.probs(i, 2 * j2 + p, kt, qo, ho, b));
    st.rjPairs = RDom(0, 2, 0, KT / 2, "rjp");
    st.tileSum(i, kt, qo, ho, b) +=
        cast<float>(st.probsBf16(st.rjPairs.x, i, st.rjPairs.y, kt, qo, ho, b));
    // V rows copied dense first, then interleaved in key pairs: a key
    // index clamped per lane would turn the loads into gathers.
    st.vRows = Func("v_rows");
    st.vRows(c, j, kt, g, b) = in.vRaw(c, g, min(kt * KT + j, Tkv - 1), b);
    st.vTile = Func("v_pairs");
    st.vTile(p, c, j2, kt, g, b) = st.vRows(c, 2 * j2 + p, kt, g, b);
    st.pvAcc(i, c, kt, qo, ho, b) +=
        cast<float>(
            st.probsBf16(st.rjPairs.x, i, st.rjPairs.y, kt, qo, ho, b)) *
        cast<float>(st.vTile(st.rjPairs.x, c, st.rjPairs.y, kt, kvHead, b));
  }
  st.pv = Func("pv");
  st.pv(i, c, kt, qo, ho, b) = st.pvAcc(i, c, kt, qo, ho, b);

  // The key tiles a query tile must visit: the mask hides the rest
  // completely, so they are never computed (causal costs about half).
  const Expr numKeyTiles = (Tkv + KT - 1) / KT;
  const Expr firstToken = qo * TT;
  const Expr lastToken = min(qo * TT + TT - 1, Tq - 1);
  Expr hi = numKeyTiles - 1;
  Expr lo = 0;
  if (s.mask.isCausal())
    hi = min(hi, (lastToken + (Tkv - Tq)) / KT); // floor division
  if (s.mask.padding)
    hi = min(hi, (in.kvLen(b) - 1) / KT);
  if (s.mask.window > 0)
    lo =
        max(0, (firstToken + (Tkv - Tq) - static_cast<int>(s.mask.window) + 1) /
                   KT);
  // The scan runs over key tiles lo + rt: the window's first tile is an
  // offset and the causal/padding limit a predicate on the last, which
  // Halide turns into the loop's trip count (visible in the .stmt).
  st.rt = RDom(0, numKeyTiles, "rt");
  const Expr keyTile = lo + st.rt;
  if (s.mask.isCausal() || s.mask.padding || s.mask.window > 0)
    st.rt.where(keyTile <= hi);

  // The running state, merged one key tile at a time.
  st.state = Func("state");
  std::vector<Expr> init(static_cast<size_t>(CB), 0.0f);
  init.push_back(kLowest); // m
  init.push_back(0.0f);    // l
  st.state(i, cb, qo, ho, b) = Tuple(init);
  const Expr m = st.state(i, cb, qo, ho, b)[CB];
  const Expr l = st.state(i, cb, qo, ho, b)[CB + 1];
  const Expr tm = st.tileMax(i, keyTile, qo, ho, b);
  // One of the two rescale factors is always 1: the new max is either the
  // old one or the tile's. One exp per row and tile.
  const Expr diff = m - tm;
  const Expr e = expNonPositive(-abs(diff));
  const Expr alpha = select(diff >= 0, 1.0f, e); // rescales the old state
  const Expr beta = select(diff >= 0, e, 1.0f);  // rescales this tile
  std::vector<Expr> next;
  for (int k = 0; k < CB; ++k)
    next.push_back(st.state(i, cb, qo, ho, b)[k] * alpha +
                   st.pv(i, cb * CB + k, keyTile, qo, ho, b) * beta);
  next.push_back(max(m, tm));
  next.push_back(l * alpha + st.tileSum(i, keyTile, qo, ho, b) * beta);
  st.state(i, cb, qo, ho, b) = Tuple(next);

  // Normalise and unpack rows back to (channel, head, token). A row that
  // saw no key has l = 0 and outputs zeros.
  const Var &t = v.t;
  const Expr row = (t % TT) * HP + hd % HP;
  std::vector<Expr> channels;
  for (int k = 0; k < CB; ++k)
    channels.push_back(st.state(row, c / CB, t / TT, hd / HP, b)[k]);
  const Expr lsum = st.state(row, c / CB, t / TT, hd / HP, b)[CB + 1];
  st.out = Func("attention");
  st.out(c, hd, t, b) =
      select(lsum > 0.0f, mux(c % CB, channels) / max(lsum, kTinySum), 0.0f);
  return st;
}

Projection defineProjection(const std::string &name, Func x, int64_t inFeatures,
                            Func w, Func bias, bool hasBias,
                            const std::function<Expr(Expr)> &store,
                            const AttentionVars &v) {
  Projection p;
  const Var &n = v.n, &t = v.t, &b = v.b;
  p.w = w;
  p.rk = RDom(0, static_cast<int>(inFeatures), name + "_rk");
  p.acc = Func(name + "_acc");
  p.acc(n, t, b) = hasBias ? bias(n) : Expr(0.0f);
  p.acc(n, t, b) += x(p.rk, t, b) * w(n, p.rk);
  p.out = Func(name);
  p.out(n, t, b) = store(p.acc(n, t, b));
  return p;
}

} // namespace mhagen::hl
