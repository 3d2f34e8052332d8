#include "CpuSchedule.h"
#include "ScheduleHelpers.h"

#include "mhagen/spec/BackendResult.h"

#include <algorithm>

namespace mhagen::hl {

using namespace Halide;

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

int cpuStreamRows(const AttentionSpec &s, const ScheduleParams &p) {
  return s.op == Op::Sdpa ? 0 : static_cast<int>(get(p, "gemm_stream_rows"));
}

std::optional<AttentionTiles> cpuDecodeTiles(const AttentionSpec &s,
                                             const ScheduleParams &p,
                                             const HalideTargetInfo &target) {
  const int64_t tokens = get(p, "decode_tokens");
  if (tokens == 0 || (s.op != Op::Sdpa && !s.cachedLayer()) ||
      (s.T && *s.T > tokens))
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
  if (t.channelsInLanes) {
    const int64_t stage = get(p, "decode_stage_kv");
    t.stageKv = stage == 1;
    t.kvInRowOrder = t.headsInTask && stage == 2;
  }
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
  // kvInRowOrder: every head block's scores of the key tile at once, the
  // head blocks inside each block of keys.
  const bool rowOrder = hit && tl.kvInRowOrder;
  st.scoresAcc.compute_at(rowOrder ? LoopLevel(st.state, st.rt) : at)
      .reorder_storage(v.j, v.i)
      .align_bounds(v.i, rowsBlock)
      .vectorize(v.j, vw, TailStrategy::GuardWithIf);
  RVar rco("rco"), rci("rci");
  Var u("u");
  Func dot = st.scoresAcc.update().split(st.rc.x, rco, rci, vw).rfactor(rci, u);
  st.scoresAcc.update()
      .split(v.i, io, ii, rowsBlock)
      .split(v.j, jo, ji, keysBlock);
  if (rowOrder)
    st.scoresAcc.update().reorder(rci, ji, ii, io, v.ho, jo);
  else
    st.scoresAcc.update().reorder(rci, ji, ii, jo, io);
  st.scoresAcc.update().atomic().vectorize(rci).unroll(ji).unroll(ii);
  // rfactor puts the lanes outermost; they must be innermost in memory.
  dot.compute_at(st.scoresAcc, rowOrder ? io : jo)
      .reorder_storage(u, v.i, v.j)
      .vectorize(u)
      .unroll(v.i)
      .unroll(v.j);
  dot.update().reorder(u, v.i, v.j, rco).vectorize(u).unroll(v.i).unroll(v.j);

  // The tile's softmax with keys in lanes (kvInRowOrder: every head
  // block's, before P V walks V's token rows).
  const LoopLevel tileAt = rowOrder ? LoopLevel(st.state, st.rt) : at;
  st.scores.compute_at(tileAt).reorder_storage(v.j, v.i).vectorize(
      v.j, vw, TailStrategy::GuardWithIf);
  st.tileMax.compute_at(tileAt);
  st.tileMax.update().atomic().vectorize(st.rj, vw);
  st.probs.compute_at(tileAt).reorder_storage(v.j, v.i).vectorize(
      v.j, vw, TailStrategy::GuardWithIf);
  st.tileSum.compute_at(tileAt);
  st.tileSum.update().atomic().vectorize(st.rj, vw);

  if (rowOrder) {
    // P V of every head block per key, in V's memory order; the
    // accumulators of the tile's rows stay in the L1.
    st.pv.compute_inline();
    st.pvAcc.compute_at(st.state, st.rt)
        .reorder_storage(v.c, v.i)
        .vectorize(v.c, vw);
    st.pvAcc.update()
        .reorder(v.c, v.i, v.ho, st.rj)
        .vectorize(v.c, vw)
        .unroll(v.i);
  } else {
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
  }
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
// Sapphire Rapids class, 2 threads), and on a 512 KiB L2
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
      .reorder(nmi, ti, nm, to, rko)
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
  // The packed inputs hold the whole block of gemm_rows tokens (the rows
  // past T repeat the last token, as the clamped input does): the register
  // block multiplies every row, and rows left unwritten would hold
  // whatever the stack held, whose denormals cost a microcode assist per
  // FMA (a decoder step ran its projections 3-4x slower).
  Func inputs = proj.x.in(chunk);
  inputs.compute_at(proj.acc, to)
      .bound_extent(inputs.args()[1], rows)
      .vectorize(inputs.args()[0], vw, TailStrategy::GuardWithIf);
}

// The weight-streaming GEMM of calls with few rows (a decoder step): each
// weight is used once per row, so the call is a read of W, and reading it
// in memory order is what sets its speed. The packed GEMM reads W a task's
// block of a row at a time (2 KiB runs a row apart), which the hardware
// prefetchers follow at about half the bandwidth (a Llama-3-8B decode
// step's projections streamed W at ~12 GB/s against a 27 GB/s triad,
// Sapphire Rapids class). Here a parallel task owns a run of whole rows of
// W (gemm_stream_k_block inputs) and walks it four rows at a time over
// every output feature, adding into its own partial sums (rfactor over the
// input chunks); a small pass adds the partials.
static void scheduleStreamedGemmCpu(Projection proj, const AttentionVars &v,
                                    int64_t outFeatures, int vw, int kBlock) {
  Var ko("ko"), no("no"), ni("ni");
  RVar rko("rko"), rki("rki"), rkio("rkio"), rkii("rkii");
  // Vectors that do not tile the features guard their last one: a reduction
  // cannot recompute a shifted vector, and W has no columns past the last.
  const TailStrategy tail =
      outFeatures % vw ? TailStrategy::GuardWithIf : TailStrategy::RoundUp;
  Func sum = proj.stream;
  sum.compute_root().vectorize(v.n, vw, tail);
  sum.update().split(proj.streamRk.x, rko, rki, kBlock);
  Func part = sum.update().rfactor(rko, ko);
  // The merge: every chunk's partial of a vector of features in turn.
  sum.update()
      .split(v.n, no, ni, vw, tail)
      .vectorize(ni)
      .reorder(ni, rko, no, v.t);
  part.compute_root().vectorize(v.n, vw, tail).parallel(ko);
  // Four rows of W per pass, each vector of features updated for every
  // row of the call: the four weight vectors come from the L1 for the
  // second row on, and W itself streams once.
  part.update()
      .split(rki, rkio, rkii, 4, TailStrategy::GuardWithIf)
      .split(v.n, no, ni, vw, tail)
      .vectorize(ni)
      .unroll(rkii)
      .reorder(ni, rkii, v.t, no, rkio, ko)
      .parallel(ko);
  // The chunk's inputs, copied once per task: the innermost loop then
  // broadcasts them from a dense buffer instead of recomputing each
  // token's row.
  proj.x.in(part).compute_at(part, ko);
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
  if (kBlock == 0 || vw != targetVw || nBlock < cols)
    schedulePanelGemmCpu(proj, v, outFeatures, vw, cols, rows);
  else
    schedulePackedGemmCpu(proj, v, vw, cols, rows, static_cast<int>(kBlock),
                          static_cast<int>(nBlock));
  if (!proj.stream.defined())
    return;
  const int streamBlock = static_cast<int>(
      std::min(get(p, "gemm_stream_k_block"), proj.inFeatures));
  scheduleStreamedGemmCpu(proj, v, outFeatures, vw, streamBlock);
  // Where the call streams, out's select reads only the streamed sum, and
  // the other sum's realisation is skipped (its box is unused).
  out.specialize(proj.streamed);
}

void scheduleRotaryCpu(RotaryPositions rope, const AttentionVars &v) {
  // The table's f64 cos and sin are calls to libm, one per lane: it is not
  // vectorized.
  rope.cosSin.compute_root().parallel(v.t);
}

void scheduleRmsNormCpu(RmsNorm norm, const AttentionVars &v,
                        const ScheduleParams &p) {
  // One root per (group, token), before the attention; the normalised
  // columns are inlined where they are read.
  norm.invRms.compute_root().parallel(v.t);
  norm.squares.compute_at(norm.invRms, v.t);
  // A group's squares are summed across the vector lanes (an associative
  // sum), when the lanes divide the group.
  const int vw = static_cast<int>(get(p, "vector_width"));
  if (norm.width % vw == 0)
    norm.squares.update().atomic().vectorize(norm.channels.x, vw);
}

void scheduleKeysOnceCpu(Func keys, const AttentionVars &v,
                         const ScheduleParams &p) {
  keys.compute_root().parallel(v.t).vectorize(
      v.c, static_cast<int>(get(p, "vector_width")), TailStrategy::GuardWithIf);
}

} // namespace mhagen::hl
