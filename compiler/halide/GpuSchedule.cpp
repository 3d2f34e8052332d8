#include "GpuSchedule.h"
#include "ScheduleHelpers.h"

#include <algorithm>

namespace mhagen::hl {

using namespace Halide;

namespace {

// Shared memory a block allocates (bytes): the query tile, the running
// state, the K/V tiles, scores/probabilities and P*V of one key tile.
int64_t sharedBytes(const AttentionSpec &s, int64_t rows, int64_t kt,
                    int64_t cb) {
  int64_t floats = rows * s.d_k                     // query tile
                   + (cb + 2) * rows * (s.d_v / cb) // state tuple
                   + kt * (s.d_k + s.d_v)           // K and V tiles
                   + 2 * rows * kt                  // scores, probabilities
                   + rows * s.d_v                   // P V
                   + 4 * rows;                      // row max/sum/positions
  return 4 * floats;
}

} // namespace

// Defaults: 16-row query tiles (the query heads of a GQA group first),
// 16-key tiles, 8 accumulator channels per thread of the state update, and
// as many threads along the channels as along the keys, so the per-tile
// stages (rows x keys, rows x channel lanes) keep every thread of the block
// busy: with as many lanes as keys every stage uses all the threads, where
// 32 lanes over 16-key tiles left half of them idle (an H200 ran S1/S2
// 1.6-1.7x faster; docs/performance.md, "GPU"). Larger tiles do not fit
// the machine model's 48 KiB of shared memory per block (the limit without
// opt-in).

ScheduleSpace gpuScheduleSpace(const AttentionSpec &s,
                               const HalideTargetInfo &target) {
  const int64_t maxThreads = target.machine->maxThreadsPerBlock;
  const int64_t maxShared = target.machine->sharedMemoryPerBlock;
  ScheduleSpace space;
  const int64_t group = s.h / s.n_kv;
  space.params = {
      {"heads_per_tile", divisorsUpTo(group, 32),
       "query heads of one GQA group per block"},
      {"tokens_per_tile", {1, 2, 4, 8, 16, 32}, "tokens per block"},
      {"key_tile", {8, 16, 32}, "keys per shared-memory tile"},
      {"channel_block", divisorsUpTo(s.d_v, 16), "state channels per thread"},
      {"lane_threads", {8, 16, 32}, "threads along channels/keys"},
  };
  ScheduleParams d;
  int64_t hp = 1;
  for (int64_t x : divisorsUpTo(group, 8))
    hp = x;
  d["heads_per_tile"] = hp;
  d["tokens_per_tile"] = std::max<int64_t>(1, 16 / hp);
  d["key_tile"] = 16;
  d["channel_block"] = divisorsUpTo(s.d_v, 8).back();
  d["lane_threads"] = d["key_tile"];
  space.violation = [=](const ScheduleParams &p) -> std::string {
    if (std::string why = declaredViolation(space.params, p); !why.empty())
      return why;
    const int64_t rows = p.at("heads_per_tile") * p.at("tokens_per_tile");
    const int64_t lanes = p.at("lane_threads");
    if (group % p.at("heads_per_tile"))
      return "heads_per_tile must divide h/kv";
    if (rows > 64)
      return "more than 64 rows per block";
    if (rows * std::max(lanes, p.at("key_tile")) > maxThreads)
      return "more than " + std::to_string(maxThreads) + " threads per block";
    if (rows * (s.d_v / p.at("channel_block")) > maxThreads)
      return "state update needs more than " + std::to_string(maxThreads) +
             " threads";
    if (sharedBytes(s, rows, p.at("key_tile"), p.at("channel_block")) >
        maxShared)
      return "more than " + std::to_string(maxShared / 1024) +
             " KiB of shared memory per block";
    return "";
  };
  // Wide value heads need fewer rows per block (threads, shared memory).
  space.defaults = descendToValid(space, d,
                                  {{"tokens_per_tile", -1},
                                   {"key_tile", -1},
                                   {"heads_per_tile", -1},
                                   {"channel_block", +1},
                                   {"lane_threads", -1}});
  return space;
}

AttentionTiles gpuAttentionTiles(const AttentionSpec &s,
                                 const ScheduleParams &p) {
  AttentionTiles t;
  t.headsPerTile = static_cast<int>(get(p, "heads_per_tile"));
  t.tokensPerTile = static_cast<int>(get(p, "tokens_per_tile"));
  t.rows = t.headsPerTile * t.tokensPerTile;
  t.keyTile = static_cast<int>(get(p, "key_tile"));
  t.channelBlock = static_cast<int>(get(p, "channel_block"));
  t.stageKv = true; // K and V tiles in shared memory
  (void)s;
  return t;
}

void scheduleAttentionGpu(AttentionStages st, Func output,
                          const AttentionVars &v, const AttentionSpec &s,
                          const ScheduleParams &p) {
  const AttentionTiles &tl = st.tiles;
  const int lanes = static_cast<int>(get(p, "lane_threads"));
  const int CB = tl.channelBlock;
  Var to("to"), ti("ti"), hb("hb"), hi("hi"), co("co"), ck("ck"), task("task"),
      c0("c0"), c1("c1");

  // Blocks: (batch, head block, query tile). Threads: the tile's rows; each
  // writes its row's channels.
  output.bound(v.c, 0, static_cast<int>(s.d_v))
      .bound(v.hd, 0, static_cast<int>(s.h))
      .split(v.t, to, ti, tl.tokensPerTile, TailStrategy::GuardWithIf)
      .split(v.hd, hb, hi, tl.headsPerTile, TailStrategy::RoundUp)
      .split(v.c, co, ck, CB, TailStrategy::RoundUp)
      .reorder(ck, co, hi, ti, hb, to, v.b)
      .fuse(hb, to, task)
      .fuse(task, v.b, task)
      .unroll(ck)
      .gpu_blocks(task)
      .gpu_threads(hi, ti);

  // Per block: the query tile and row positions in shared memory, the
  // running state (one (row, channel block) per thread).
  // The query tile is read in every key-tile iteration, but Halide 14's
  // shared-memory pooling ends its lifetime at its last read inside the
  // loop body and lets a later stage (probs) reuse the space: wrong results
  // from the second key tile on (found by the OpenCL tests). So it lives
  // in global memory per block (cached), not in shared memory.
  st.qTile.compute_at(output, task)
      .store_in(MemoryType::Heap)
      .split(v.c, c0, c1, lanes, TailStrategy::GuardWithIf)
      .reorder(c1, v.i, c0)
      .gpu_threads(c1, v.i);
  st.rowPos.compute_at(output, task)
      .store_in(MemoryType::Heap) // read in every iteration, as above
      .gpu_threads(v.i);
  if (st.rowSlope.defined())
    st.rowSlope.compute_at(output, task)
        .store_in(MemoryType::Heap)
        .gpu_threads(v.i);
  // The running state stays in shared memory, one (row, channel block)
  // per thread. Registers would need each thread to own its entries across
  // the whole key-tile loop, but Halide 14 then gives every thread a private
  // copy of the whole block-level array (5 KiB of local memory per thread
  // with store_in(Register), measured with ptxas -v) and the output stage
  // reads other threads' entries.
  st.state.compute_at(output, task).gpu_threads(v.i, v.cb);
  st.state.update().reorder(v.i, v.cb, st.rt).gpu_threads(v.i, v.cb);

  // Per key tile (a serial loop of the block): K and V rows into shared
  // memory, then scores, softmax and P V with threads over rows x keys or
  // rows x channels, each stage separated by a barrier.
  // Every per-tile stage covers the whole key tile (bound_extent): keys past
  // T_kv are masked, never left uncomputed -- the row max reads them.
  for (Func f : {st.kTile, st.vTile})
    f.compute_at(st.state, st.rt)
        .bound_extent(v.j, tl.keyTile)
        .split(v.c, c0, c1, lanes, TailStrategy::GuardWithIf)
        .reorder(c1, v.j, c0)
        .gpu_threads(c1, v.j);
  st.scores.compute_at(st.state, st.rt)
      .bound_extent(v.j, tl.keyTile)
      .bound_extent(v.i, tl.rows)
      .reorder(v.j, v.i)
      .gpu_threads(v.j, v.i);
  st.scoresAcc.compute_at(st.scores, v.j);
  st.tileMax.compute_at(st.state, st.rt).gpu_threads(v.i);
  st.tileMax.update().gpu_threads(v.i);
  st.probs.compute_at(st.state, st.rt)
      .bound_extent(v.j, tl.keyTile)
      .bound_extent(v.i, tl.rows)
      .reorder(v.j, v.i)
      .gpu_threads(v.j, v.i);
  st.tileSum.compute_at(st.state, st.rt).gpu_threads(v.i);
  st.tileSum.update().gpu_threads(v.i);
  st.pv.compute_at(st.state, st.rt)
      .split(v.c, c0, c1, lanes, TailStrategy::GuardWithIf)
      .reorder(c1, v.i, c0)
      .gpu_threads(c1, v.i);
  st.pvAcc.compute_at(st.pv, c1);
}

void scheduleProjectionGpu(Projection proj, const AttentionVars &v,
                           int64_t outFeatures, const ScheduleParams &p,
                           bool isOutput) {
  (void)p;
  // A plain tiled GEMM: 32 features x 8 tokens per block, one output per
  // thread, the reduction in registers.
  Var no("no"), ni("ni"), to("to"), ti("ti");
  Func out = proj.out;
  if (!isOutput)
    out.compute_root();
  out.bound(v.n, 0, static_cast<int>(outFeatures))
      .gpu_tile(v.n, v.t, no, to, ni, ti, 32, 8, TailStrategy::GuardWithIf);
  proj.acc.compute_at(out, ni);
}

std::string deviceSource(const Module &m) {
  for (const Buffer<> &b : m.buffers()) {
    if (b.type() != UInt(8) || b.dimensions() != 1)
      continue;
    std::string text(reinterpret_cast<const char *>(b.data()),
                     static_cast<size_t>(b.width()));
    while (!text.empty() && text.back() == '\0')
      text.pop_back();
    if (text.find(".version") != std::string::npos ||
        text.find("__kernel") != std::string::npos)
      return text;
  }
  return "";
}

} // namespace mhagen::hl
