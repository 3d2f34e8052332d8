#include "mhagen/spec/CostModel.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace mhagen {

// The fused kernels walk query tiles of 64 rows and key tiles of 32 keys by
// default (the Halide CPU schedule's defaults); explain reports the scratch
// that implies.
static constexpr int64_t kReportQueryTile = 64;
static constexpr int64_t kReportKeyTile = 32;

// Length of the union of closed ranges (sorted and merged).
template <typename Range> static int64_t unionLength(std::vector<Range> rs) {
  std::sort(rs.begin(), rs.end(),
            [](const Range &a, const Range &b) { return a.lo < b.lo; });
  int64_t covered = 0, end = INT64_MIN; // last index counted
  for (const Range &r : rs) {
    if (r.empty())
      continue;
    const int64_t lo = std::max(r.lo, end == INT64_MIN ? r.lo : end + 1);
    if (r.hi >= lo)
      covered += r.hi - lo + 1;
    end = std::max(end, r.hi);
  }
  return covered;
}

int64_t visitedPairs(const MaskSpec &m, int64_t Tq, int64_t Tkv) {
  if (m.isNone())
    return Tq * Tkv;
  int64_t count = 0;
  for (int64_t i = 0; i < Tq; ++i) {
    const int64_t pos = i + Tkv - Tq;
    // Each clause shows one range of keys to a row; with tiles of one key
    // and one query the tile ranges are those key ranges.
    std::vector<KeyTileRange> keys;
    for (const MaskClause &c : m.anyOf)
      keys.push_back(clauseKeyTiles(c, pos, pos, Tkv, Tkv, 1));
    count += unionLength(keys);
  }
  return count;
}

int64_t visitedKeys(const MaskSpec &m, int64_t Tq, int64_t Tkv, int64_t kvLen) {
  if (m.isNone())
    return Tkv;
  // A clause's key range only moves forward from row to row and the ranges
  // of consecutive rows overlap or nest, so its union over the rows is the
  // range clauseKeyTiles gives (tiles of one key) for all of them at once.
  std::vector<KeyTileRange> keys;
  for (const MaskClause &c : m.anyOf)
    keys.push_back(clauseKeyTiles(c, Tkv - Tq, Tkv - 1, Tkv, kvLen, 1));
  return unionLength(keys);
}

int64_t tiledPairs(const MaskSpec &m, int64_t Tq, int64_t Tkv,
                   int64_t queryTile, int64_t keyTile) {
  int64_t count = 0;
  for (int64_t first = 0; first < Tq; first += queryTile) {
    const int64_t rows = std::min(queryTile, Tq - first);
    const int64_t firstPos = first + Tkv - Tq, lastPos = firstPos + rows - 1;
    std::vector<KeyTileRange> tiles;
    if (m.isNone())
      tiles.push_back({0, floorDiv(Tkv - 1, keyTile)});
    for (const MaskClause &c : m.anyOf)
      tiles.push_back(clauseKeyTiles(c, firstPos, lastPos, Tkv, Tkv, keyTile));
    // Every visited tile is full but the last one (T_kv's remainder).
    int64_t keys = unionLength(tiles) * keyTile;
    const int64_t lastTile = floorDiv(Tkv - 1, keyTile);
    for (const KeyTileRange &t : tiles)
      if (!t.empty() && t.lo <= lastTile && lastTile <= t.hi) {
        keys -= (lastTile + 1) * keyTile - Tkv;
        break;
      }
    count += rows * keys;
  }
  return count;
}

CostReport computeCost(const AttentionSpec &s, int64_t Tq, int64_t Tkv,
                       int64_t B, double memoryBandwidthGBs) {
  CostReport r;
  r.Tq = s.T ? *s.T : Tq;
  r.Tkv = s.T_kv ? *s.T_kv : (s.T ? *s.T : Tkv);
  if (s.op == Op::Layer && !s.layerCache)
    r.Tkv = r.Tq; // a layer attends over its own input (else its cache)
  r.B = s.B ? *s.B : B;
  const double Bd = static_cast<double>(r.B);

  if (s.op == Op::Layer) {
    r.paramsWq = s.d * s.h * s.d_k;
    r.paramsWk = s.d * s.n_kv * s.d_k;
    r.paramsWv = s.d * s.n_kv * s.d_v;
    r.paramsWo = s.h * s.d_v * s.d;
    if (s.bias)
      r.paramsBias = s.h * s.d_k + s.n_kv * s.d_k + s.n_kv * s.d_v + s.d;
    if (s.qk_norm.enabled())
      r.paramsNorm = s.qk_norm.groupWidth(s.h, s.d_k) +
                     s.qk_norm.groupWidth(s.n_kv, s.d_k);
    r.paramsTotal = r.paramsWq + r.paramsWk + r.paramsWv + r.paramsWo +
                    r.paramsBias + r.paramsNorm;
    // K and V are projected for the call's tokens only (a cache holds
    // the others).
    r.flopsProjections = Bd * (2.0 * r.Tq * s.d * s.h * s.d_k +
                               2.0 * r.Tq * s.d * s.n_kv * (s.d_k + s.d_v) +
                               2.0 * r.Tq * s.h * s.d_v * s.d);
    r.weightBytes = r.paramsTotal * dtypeBytes(s.dtype);
  }
  r.visitedPairs = visitedPairs(s.mask, r.Tq, r.Tkv);
  r.tiledPairs =
      tiledPairs(s.mask, r.Tq, r.Tkv, kReportQueryTile, kReportKeyTile);
  r.totalPairs = r.Tq * r.Tkv;
  r.flopsScores = Bd * 2.0 * r.visitedPairs * s.h * s.d_k;
  r.flopsWeighted = Bd * 2.0 * r.visitedPairs * s.h * s.d_v;
  r.flopsTotal = r.flopsProjections + r.flopsScores + r.flopsWeighted;
  r.flopsNominalAttention = 4.0 * Bd * s.h * r.Tq * r.Tkv * s.d_k;
  r.kvBytesPerToken = s.kvBytesPerToken();
  r.visitedKeys = visitedKeys(s.mask, r.Tq, r.Tkv, r.Tkv);
  r.kvBytesPerCall = r.B * r.visitedKeys * r.kvBytesPerToken;
  r.memoryBandwidthGBs = memoryBandwidthGBs;
  if (s.cachedLayer())
    r.stepFloorBytes = r.weightBytes + r.kvBytesPerCall;
  if (memoryBandwidthGBs > 0) {
    r.kvFloorMs = 1e3 * static_cast<double>(r.kvBytesPerCall) /
                  (memoryBandwidthGBs * 1e9);
    r.stepFloorMs = 1e3 * static_cast<double>(r.stepFloorBytes) /
                    (memoryBandwidthGBs * 1e9);
  }
  r.naiveScoreBytes = s.h * r.Tq * r.Tkv * 4;
  r.fusedQueryTile = kReportQueryTile;
  r.fusedKeyTile = kReportKeyTile;
  // Per thread: the query tile (f32), score and probability tiles, the
  // P*V tile and the running state (accumulator + max + sum per row).
  r.fusedScratchBytes =
      4 * kReportQueryTile * (s.d_k + 2 * kReportKeyTile + 2 * s.d_v + 4);
  return r;
}

static std::string withCommas(int64_t v) {
  std::string s = std::to_string(v < 0 ? -v : v);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3)
    s.insert(static_cast<size_t>(i), ",");
  return (v < 0 ? "-" : "") + s;
}

static std::string human(double v, const char *unit) {
  const char *prefixes[] = {"", "K", "M", "G", "T", "P"};
  int p = 0;
  while (v >= 1000.0 && p < 5) {
    v /= 1000.0;
    ++p;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g %s%s", v, prefixes[p], unit);
  return buf;
}

static std::string bytes(int64_t v) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double x = static_cast<double>(v);
  int u = 0;
  while (x >= 1024.0 && u < 4) {
    x /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(v));
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", x, units[u]);
  return buf;
}

/// "<lead>X ms at Y GB/s", or nothing when the bandwidth is unknown.
static std::string msAtBandwidth(const char *lead, double ms, double gbs) {
  if (gbs <= 0)
    return "";
  char buf[96];
  std::snprintf(buf, sizeof buf, "%s%.3g ms at %.3g GB/s", lead, ms, gbs);
  return buf;
}

std::string formatCostReport(const AttentionSpec &s, const CostReport &r) {
  std::ostringstream os;
  char buf[256];
  os << "spec " << s.kernelName() << " (hash " << s.hash() << ")\n";
  os << "  op " << toString(s.op) << ", d " << s.d << ", h " << s.h << ", kv "
     << s.n_kv << " (group " << s.groupSize() << "), dk " << s.d_k << ", dv "
     << s.d_v << ", mask " << s.mask.str() << ", dtype " << toString(s.dtype)
     << ", scale ";
  if (s.scaleAtRuntime)
    os << "runtime";
  else
    os << s.effectiveScale();
  os << "\n";
  os << "  sizes: B " << r.B << ", T_q " << r.Tq << ", T_kv " << r.Tkv << "\n";
  os << "parameters:\n";
  if (s.op == Op::Layer) {
    auto mat = [&](const char *name, int64_t rows, int64_t cols, int64_t n) {
      std::snprintf(buf, sizeof buf, "  %-6s %lld x %lld = %s\n", name,
                    static_cast<long long>(rows), static_cast<long long>(cols),
                    withCommas(n).c_str());
      os << buf;
    };
    mat("W_Q", s.d, s.h * s.d_k, r.paramsWq);
    mat("W_K", s.d, s.n_kv * s.d_k, r.paramsWk);
    mat("W_V", s.d, s.n_kv * s.d_v, r.paramsWv);
    mat("W_O", s.h * s.d_v, s.d, r.paramsWo);
    os << "  biases " << withCommas(r.paramsBias) << "\n";
    if (s.qk_norm.enabled())
      os << "  norms  " << withCommas(r.paramsNorm) << " (q_norm, k_norm)\n";
    os << "  total  " << withCommas(r.paramsTotal) << "\n";
  } else {
    os << "  none (op = sdpa takes Q, K, V; the projections are outside "
          "the kernel)\n";
  }
  os << "FLOPs (multiply-add = 2, whole batch):\n";
  if (s.op == Op::Layer)
    os << "  projections   " << human(r.flopsProjections, "FLOP") << "\n";
  os << "  scores QK^T   " << human(r.flopsScores, "FLOP") << "\n";
  os << "  weighted PV   " << human(r.flopsWeighted, "FLOP") << "\n";
  os << "  total         " << human(r.flopsTotal, "FLOP") << "\n";
  std::snprintf(buf, sizeof buf,
                "  visited pairs %s of %s per head and sequence (%.1f%%)\n",
                withCommas(r.visitedPairs).c_str(),
                withCommas(r.totalPairs).c_str(),
                r.totalPairs ? 100.0 * r.visitedPairs / r.totalPairs : 0.0);
  os << buf;
  // The cost check of tile skipping: what the tiled kernel computes
  // against the exact count (only partly visible tiles add to it).
  std::snprintf(buf, sizeof buf,
                "  tiled pairs   %s (query tile %lld, key tile %lld): %.3fx "
                "the visible pairs\n",
                withCommas(r.tiledPairs).c_str(),
                static_cast<long long>(kReportQueryTile),
                static_cast<long long>(kReportKeyTile),
                r.visitedPairs ? static_cast<double>(r.tiledPairs) /
                                     static_cast<double>(r.visitedPairs)
                               : 0.0);
  os << buf;
  if (s.effectiveMask().hasPadding())
    os << "  (padding counted as full length; the real count depends on "
          "the lengths passed at call time)\n";
  if (s.op == Op::Sdpa && s.ragged)
    os << "  (ragged: counted as B sequences of T_q queries and T_kv keys; a "
          "call costs sum_b n_b * L_b over its q_offsets and kv_lens, one "
          "kernel call per run of equal query counts)\n";
  os << "memory:\n";
  os << "  K/V bytes per token   " << withCommas(r.kvBytesPerToken) << " ("
     << bytes(r.kvBytesPerToken) << ")\n";
  os << "  K/V read per call     " << bytes(r.kvBytesPerCall) << " (B * "
     << r.visitedKeys << " keys seen of T_kv " << r.Tkv << " * "
     << r.kvBytesPerToken << ")";
  os << msAtBandwidth("; floor ", r.kvFloorMs, r.memoryBandwidthGBs) << "\n";
  if (s.op == Op::Layer)
    os << "  weights               " << bytes(r.weightBytes)
       << " (read once a call)\n";
  if (s.cachedLayer()) {
    os << "  step floor            " << bytes(r.stepFloorBytes)
       << " (weights + K/V read; a decode step, T_q 1, reads at least "
          "this)"
       << msAtBandwidth("; ", r.stepFloorMs, r.memoryBandwidthGBs) << "\n";
  }
  if (s.op == Op::Sdpa && s.pagedKv())
    os << "  K/V cache             paged: blocks of " << s.kv_block
       << " tokens, " << bytes(s.kv_block * r.kvBytesPerToken)
       << " per block (K and V); each sequence reads ceil(len / " << s.kv_block
       << ") blocks through its table\n";
  os << "  naive score matrix    " << bytes(r.naiveScoreBytes)
     << " per sequence (h*T_q*T_kv f32)\n";
  os << "  fused scratch         " << bytes(r.fusedScratchBytes)
     << " per thread (query tile " << r.fusedQueryTile << ", key tile "
     << r.fusedKeyTile << "; independent of T_kv)\n";
  return os.str();
}

std::string costReportJson(const AttentionSpec &s, const CostReport &r) {
  nlohmann::ordered_json j;
  j["name"] = s.kernelName();
  j["hash"] = s.hash();
  j["op"] = toString(s.op);
  j["d"] = s.d;
  j["h"] = s.h;
  j["kv"] = s.n_kv;
  j["dk"] = s.d_k;
  j["dv"] = s.d_v;
  j["mask"] = s.mask.str();
  j["dtype"] = toString(s.dtype);
  if (s.scaleAtRuntime)
    j["scale"] = "runtime";
  else
    j["scale"] = s.effectiveScale();
  j["B"] = r.B;
  j["T_q"] = r.Tq;
  j["T_kv"] = r.Tkv;
  nlohmann::ordered_json p;
  p["W_Q"] = r.paramsWq;
  p["W_K"] = r.paramsWk;
  p["W_V"] = r.paramsWv;
  p["W_O"] = r.paramsWo;
  p["biases"] = r.paramsBias;
  if (s.qk_norm.enabled())
    p["norms"] = r.paramsNorm;
  p["total"] = r.paramsTotal;
  j["parameters"] = p;
  nlohmann::ordered_json f;
  f["projections"] = r.flopsProjections;
  f["scores"] = r.flopsScores;
  f["weighted_sum"] = r.flopsWeighted;
  f["total"] = r.flopsTotal;
  f["nominal_attention"] = r.flopsNominalAttention;
  j["flops"] = f;
  j["visited_pairs"] = r.visitedPairs;
  j["tiled_pairs"] = r.tiledPairs;
  j["total_pairs"] = r.totalPairs;
  nlohmann::ordered_json m;
  m["kv_bytes_per_token"] = r.kvBytesPerToken;
  m["kv_keys_visited"] = r.visitedKeys;
  m["kv_bytes_per_call"] = r.kvBytesPerCall;
  if (r.memoryBandwidthGBs > 0) {
    m["memory_bandwidth_gbs"] = r.memoryBandwidthGBs;
    m["kv_floor_ms"] = r.kvFloorMs;
  }
  if (s.op == Op::Layer)
    m["weight_bytes"] = r.weightBytes;
  if (s.cachedLayer()) {
    m["step_floor_bytes"] = r.stepFloorBytes;
    if (r.memoryBandwidthGBs > 0)
      m["step_floor_ms"] = r.stepFloorMs;
  }
  m["naive_score_bytes"] = r.naiveScoreBytes;
  m["fused_scratch_bytes_per_thread"] = r.fusedScratchBytes;
  j["memory"] = m;
  return j.dump(2);
}

} // namespace mhagen
