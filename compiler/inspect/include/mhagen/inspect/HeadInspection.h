// Per-head inspection of a layer (`mhagen heads`, `mhagen explain --plot`):
// each head's attention weights rebuilt from the kernel's log-sum-exp,
// P_ij = exp(s_ij - lse_i) (docs/design.md §1, "Logsumexp"), their
// entropy, and the pictures: one heatmap per head, a grid of all heads,
// and how the model width splits into heads and K/V groups.
#ifndef MHAGEN_INSPECT_HEADINSPECTION_H
#define MHAGEN_INSPECT_HEADINSPECTION_H

#include "mhagen/inspect/Image.h"
#include "mhagen/spec/AttentionSpec.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mhagen::inspect {

/// The call a layer kernel ran (op = layer, one sequence of T tokens), as
/// f32 values: what the weights are rebuilt from.
struct LayerCall {
  int64_t T = 0;
  const float *x = nullptr;                 ///< [T, d]
  const float *wq = nullptr, *wk = nullptr; ///< as in the ABI
  const float *bq = nullptr, *bk = nullptr; ///< bias = true
  /// qk_norm's weights ([dk] or [h*dk] and [kv*dk]).
  const float *qNorm = nullptr, *kNorm = nullptr;
  /// positions = runtime: each token's position ([T]).
  const int32_t *positions = nullptr;
  const float *sinks = nullptr;       ///< sinks = learned
  const float *alibiSlopes = nullptr; ///< alibi = runtime
  const float *scale = nullptr;       ///< scale = runtime
  const float *lse = nullptr;         ///< [T, h], the kernel's
};

/// Every head's attention weights and entropy.
struct HeadWeights {
  int64_t h = 0, T = 0;
  std::vector<float> weights;      ///< [h, T, T]; 0 where hidden
  std::vector<uint8_t> visible;    ///< [T, T]: the mask (the same per head)
  std::vector<double> entropy;     ///< [h, T] in nats (0 for a row that sees
                                   ///< nothing)
  std::vector<double> meanEntropy; ///< [h]: mean over rows
  /// [T]: the largest entropy row i can have, uniform over its outcomes:
  /// ln(keys it sees + 1 for a learned sink); 0 for a row that sees none
  /// (the same for every head).
  std::vector<double> maxEntropy;
  /// The largest |1 - (sum_j P_ij + sink share)| over rows that see a key:
  /// how well the kernel's lse normalises the rebuilt scores.
  double maxNormError = 0;
  float at(int64_t head, int64_t i, int64_t j) const {
    return weights[static_cast<size_t>((head * T + i) * T + j)];
  }
};

/// P_ij = exp(s_ij - lse_i) with s the spec's scaled, modified score of
/// query i and key j (the reference's arithmetic, in f64), over the keys
/// the mask shows; H_i = -sum_j P_ij ln P_ij, the learned sink's share
/// counted as one more outcome. Throws std::invalid_argument when the
/// spec is not a layer or a pointer it needs is null.
HeadWeights rebuildHeadWeights(const AttentionSpec &spec, const LayerCall &c);

/// Geometry of one head's heatmap: T x T weights pooled (max) into at most
/// 512 x 512 cells of `cell` pixels, axis labels left and below, a colour
/// bar (weight 0..1) on the right.
struct HeatmapLayout {
  int64_t T = 0;
  int cells = 0;    ///< cells per axis
  int64_t pool = 1; ///< tokens per cell
  int cell = 1;     ///< pixels per cell
  int mapX = 0, mapY = 0, mapSize = 0;
  int barX = 0, barW = 0;
  int width = 0, height = 0;
  /// Centre pixel of the cell holding query i, key j.
  int pixelX(int64_t j) const;
  int pixelY(int64_t i) const;
};
HeatmapLayout heatmapLayout(int64_t T);

/// One head's heatmap: weight by the colour map (fixed 0..1, so heads
/// compare), hidden cells in kHidden, the title, "query"/"key" axes with
/// their first and last token, and the colour bar.
Image renderHeatmap(const HeadWeights &w, int64_t head,
                    const std::string &title);
/// All heads in a grid (ceil(sqrt(h)) columns), titled by head and K/V
/// head, with one colour bar.
Image renderHeadGrid(const HeadWeights &w, const AttentionSpec &spec);

/// `explain --plot`: the h*dk columns of W_Q's output as h blocks, and the
/// kv*dk columns of W_K/W_V's below at the same pixels per column, each
/// K/V group in one hue (its query heads in that hue, alternately lighter).
struct HeadSplitLayout {
  int width = 0, height = 0;
  int left = 0;
  double pixelsPerColumn = 0;
  int qY = 0, kvY = 0, bandH = 0;
  int qBlockCenterX(int64_t head, int64_t dk) const;
  int kvBlockCenterX(int64_t g, int64_t dk) const;
};
HeadSplitLayout headSplitLayout(const AttentionSpec &spec);
/// The colour of K/V group g of n, and of query head `head` in it.
Rgb groupColor(int64_t g, int64_t n);
Rgb queryHeadColor(const AttentionSpec &spec, int64_t head);
Image renderHeadSplit(const AttentionSpec &spec);

} // namespace mhagen::inspect

#endif
