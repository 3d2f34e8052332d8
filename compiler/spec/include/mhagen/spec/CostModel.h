// Parameter, FLOP and memory counts of a spec (docs/design.md §3);
// this is what `mhagen explain` prints and what benchmarks divide by.
#ifndef MHAGEN_SPEC_COSTMODEL_H
#define MHAGEN_SPEC_COSTMODEL_H

#include "mhagen/spec/AttentionSpec.h"

#include <algorithm>
#include <cstdint>
#include <string>

namespace mhagen {

/// Floor division (positions before the cache start are negative).
inline int64_t floorDiv(int64_t a, int64_t b) {
  return a / b - ((a % b != 0) && ((a < 0) != (b < 0)) ? 1 : 0);
}

/// Is key j visible, under one conjunction, to the query at absolute
/// position pos (docs/design.md §2; kvLen is the batch's padding length)?
inline bool clauseAllows(const MaskClause &c, int64_t pos, int64_t j,
                         int64_t kvLen) {
  if (c.isCausal() && j > pos)
    return false;
  if (c.window > 0 && j <= pos - c.window)
    return false;
  if (c.padding && j >= kvLen)
    return false;
  if (c.sink > 0 && j >= c.sink)
    return false;
  return true;
}

/// Is key j visible to query i? (i in [0,Tq), j in [0,Tkv); query i sits at
/// absolute position i + Tkv - Tq; kvLen is the batch's padding length.)
/// The single definition of the mask used by the reference and the counts:
/// visible under some clause of the union.
inline bool maskAllows(const MaskSpec &m, int64_t i, int64_t j, int64_t Tq,
                       int64_t Tkv, int64_t kvLen) {
  if (m.isNone())
    return true;
  const int64_t pos = i + Tkv - Tq;
  for (const MaskClause &c : m.anyOf)
    if (clauseAllows(c, pos, j, kvLen))
      return true;
  return false;
}

/// A closed range of key tiles; empty when hi < lo.
struct KeyTileRange {
  int64_t lo = 0, hi = -1;
  bool empty() const { return hi < lo; }
};

/// The key tiles (of keyTile keys) that may hold a key visible under
/// clause c to some query at positions [firstPos, lastPos]: every tile
/// outside is hidden from every row of the query tile. Both backends skip
/// key tiles by this rule (docs/design.md §2, "Tile skipping"). Without
/// padding every tile inside holds a key some row sees (the rows of a
/// query tile are consecutive positions), so a union of these ranges
/// visits exactly the tiles the mask does not hide completely.
inline KeyTileRange clauseKeyTiles(const MaskClause &c, int64_t firstPos,
                                   int64_t lastPos, int64_t Tkv, int64_t kvLen,
                                   int64_t keyTile) {
  KeyTileRange r{0, floorDiv(Tkv - 1, keyTile)};
  if (c.isCausal())
    r.hi = std::min(r.hi, floorDiv(lastPos, keyTile));
  if (c.window > 0)
    r.lo = std::max(r.lo, floorDiv(firstPos - c.window + 1, keyTile));
  if (c.padding)
    r.hi = std::min(r.hi, floorDiv(kvLen - 1, keyTile));
  if (c.sink > 0)
    r.hi = std::min(r.hi, floorDiv(c.sink - 1, keyTile));
  return r;
}

/// Visible (query, key) pairs for one sequence and one head, with every
/// padding length equal to Tkv: the exact count.
int64_t visitedPairs(const MaskSpec &m, int64_t Tq, int64_t Tkv);

/// The keys that at least one of a sequence's Tq queries (its last Tq
/// tokens) sees, its padding length kvLen: what a kernel must read of K
/// and V, at least.
int64_t visitedKeys(const MaskSpec &m, int64_t Tq, int64_t Tkv, int64_t kvLen);

/// The (query, key) pairs a tiled kernel computes for one sequence and
/// one head: every pair of each (query tile, key tile) block it visits,
/// with queryTile tokens and keyTile keys per tile and the union of
/// clauseKeyTiles per query tile (padding lengths equal to Tkv).
int64_t tiledPairs(const MaskSpec &m, int64_t Tq, int64_t Tkv,
                   int64_t queryTile, int64_t keyTile);

struct CostReport {
  int64_t Tq = 0, Tkv = 0, B = 1;
  // Parameters (op = layer; zero for sdpa, which takes Q, K, V directly).
  int64_t paramsWq = 0, paramsWk = 0, paramsWv = 0, paramsWo = 0;
  int64_t paramsBias = 0;
  int64_t paramsNorm = 0; ///< qk_norm's weights (q_norm and k_norm)
  int64_t paramsTotal = 0;
  // FLOPs for the whole batch (multiply-add = 2).
  double flopsProjections = 0; ///< Q, K, V and output projections
  double flopsScores = 0;      ///< Q K^T over visited pairs
  double flopsWeighted = 0;    ///< P V over visited pairs
  double flopsTotal = 0;
  /// 4*B*h*Tq*Tkv*dk: the convention benchmarks call "nominal" (every pair).
  double flopsNominalAttention = 0;
  int64_t visitedPairs = 0; ///< per sequence and head, exact
  /// What the tiled kernel computes (tiledPairs with the report's tiles):
  /// hidden pairs in partly visible tiles are computed and masked.
  int64_t tiledPairs = 0;
  int64_t totalPairs = 0; ///< Tq * Tkv
  int64_t kvBytesPerToken = 0;
  /// Keys per sequence that some query sees (visitedKeys): a window or a
  /// sink hides the rest, and the kernel skips their tiles.
  int64_t visitedKeys = 0;
  /// K and V of those keys read once: B * visitedKeys * kvBytesPerToken.
  /// A decode step cannot take less than this over the memory bandwidth.
  int64_t kvBytesPerCall = 0;
  double memoryBandwidthGBs = 0; ///< given by the user (explain --mem-bw)
  double kvFloorMs = 0;          ///< kvBytesPerCall at that bandwidth
  /// op = layer: the weights' bytes (parameters in the dtype), which every
  /// call reads once.
  int64_t weightBytes = 0;
  /// A layer with a cache: what a step cannot read less of, weights plus
  /// the cached K/V it attends over (weightBytes + kvBytesPerCall), and
  /// that over the bandwidth.
  int64_t stepFloorBytes = 0;
  double stepFloorMs = 0;
  int64_t naiveScoreBytes = 0;   ///< h*Tq*Tkv f32 scores, one sequence
  int64_t fusedScratchBytes = 0; ///< per thread, default tiles
  int64_t fusedQueryTile = 0, fusedKeyTile = 0;
};

/// Tq/Tkv/B come from the spec when it fixes them, else from the arguments.
/// `memoryBandwidthGBs` > 0 also gives the K/V bandwidth floor in ms.
CostReport computeCost(const AttentionSpec &spec, int64_t Tq, int64_t Tkv,
                       int64_t B, double memoryBandwidthGBs = 0);

/// Human-readable report (what `mhagen explain` prints).
std::string formatCostReport(const AttentionSpec &spec, const CostReport &r);
/// The same as a JSON object (one spec), keys in a fixed order.
std::string costReportJson(const AttentionSpec &spec, const CostReport &r);

} // namespace mhagen

#endif
