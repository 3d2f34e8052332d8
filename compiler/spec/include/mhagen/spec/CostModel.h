// Parameter, FLOP and memory counts of a spec (docs/design.md §3);
// this is what `mhagen explain` prints and what benchmarks divide by.
#ifndef MHAGEN_SPEC_COSTMODEL_H
#define MHAGEN_SPEC_COSTMODEL_H

#include "mhagen/spec/AttentionSpec.h"

#include <cstdint>
#include <string>

namespace mhagen {

/// Is key j visible to query i? (i in [0,Tq), j in [0,Tkv); query i sits at
/// absolute position i + Tkv - Tq; kvLen is the batch's padding length.)
/// The single definition of the mask used by the reference and the counts.
inline bool maskAllows(const MaskSpec &m, int64_t i, int64_t j, int64_t Tq,
                       int64_t Tkv, int64_t kvLen) {
  const int64_t pos = i + Tkv - Tq;
  if (m.isCausal() && j > pos)
    return false;
  if (m.window > 0 && j <= pos - m.window)
    return false;
  if (m.padding && j >= kvLen)
    return false;
  return true;
}

/// Visited (query, key) pairs for one sequence and one head, with every
/// padding length equal to Tkv.
int64_t visitedPairs(const MaskSpec &m, int64_t Tq, int64_t Tkv);

struct CostReport {
  int64_t Tq = 0, Tkv = 0, B = 1;
  // Parameters (op = layer; zero for sdpa, which takes Q, K, V directly).
  int64_t paramsWq = 0, paramsWk = 0, paramsWv = 0, paramsWo = 0;
  int64_t paramsBias = 0;
  int64_t paramsTotal = 0;
  // FLOPs for the whole batch (multiply-add = 2).
  double flopsProjections = 0; ///< Q, K, V and output projections
  double flopsScores = 0;      ///< Q K^T over visited pairs
  double flopsWeighted = 0;    ///< P V over visited pairs
  double flopsTotal = 0;
  /// 4*B*h*Tq*Tkv*dk: the convention benchmarks call "nominal" (every pair).
  double flopsNominalAttention = 0;
  int64_t visitedPairs = 0; ///< per sequence and head
  int64_t totalPairs = 0;   ///< Tq * Tkv
  int64_t kvBytesPerToken = 0;
  /// K and V of every sequence read once: B * T_kv * kvBytesPerToken.
  /// A decode step cannot take less than this over the memory bandwidth.
  int64_t kvBytesPerCall = 0;
  double memoryBandwidthGBs = 0; ///< given by the user (explain --mem-bw)
  double kvFloorMs = 0;          ///< kvBytesPerCall at that bandwidth
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
