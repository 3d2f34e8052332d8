// Head weights, entropy and plots (HeadInspection.h).
#include "mhagen/inspect/HeadInspection.h"

#include "mhagen/reference/Reference.h"
#include "mhagen/spec/CostModel.h"
#include "mhagen/spec/ScoreModifiers.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>

namespace mhagen::inspect {

HeadWeights rebuildHeadWeights(const AttentionSpec &s, const LayerCall &c) {
  if (s.op != Op::Layer)
    throw std::invalid_argument("head inspection needs op = layer");
  if (!c.x || !c.wq || !c.wk || !c.lse || c.T < 1)
    throw std::invalid_argument("head inspection: x, w_q, w_k and lse are "
                                "required, with T >= 1");
  if ((s.bias && (!c.bq || !c.bk)) || (s.sinks && !c.sinks) ||
      (s.alibi == AlibiSlopes::Runtime && !c.alibiSlopes) ||
      (s.scaleAtRuntime && !c.scale) ||
      (s.qk_norm.enabled() && (!c.qNorm || !c.kNorm)) ||
      (s.positionsAtRuntime && !c.positions))
    throw std::invalid_argument("head inspection: the spec's biases, sinks, "
                                "slopes, scale, norm weights or positions "
                                "are missing");
  const int64_t T = c.T, h = s.h, dk = s.d_k, group = s.groupSize();
  // Q and K of every head, in f64 (the reference's projections, QK-norm
  // and rotary positions).
  std::vector<double> q =
      ref::project<double>(c.x, T, s.d, c.wq, h * dk, s.bias ? c.bq : nullptr);
  std::vector<double> k = ref::project<double>(c.x, T, s.d, c.wk, s.n_kv * dk,
                                               s.bias ? c.bk : nullptr);
  const ref::QkTransform transform(s);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t position = s.positionsAtRuntime ? c.positions[t] : t;
    transform.apply(h, c.qNorm, position, &q[static_cast<size_t>(t * h * dk)]);
    transform.apply(s.n_kv, c.kNorm, position,
                    &k[static_cast<size_t>(t * s.n_kv * dk)]);
  }
  const double scale = s.scaleAtRuntime ? *c.scale : s.effectiveScale();
  std::vector<double> slopes(static_cast<size_t>(h), 0.0);
  if (s.alibi == AlibiSlopes::Standard) {
    const std::vector<double> standard = standardAlibiSlopes(h);
    for (int64_t i = 0; i < h; ++i)
      slopes[i] = static_cast<float>(standard[i]); // as the kernels hold them
  } else if (s.alibi == AlibiSlopes::Runtime) {
    for (int64_t i = 0; i < h; ++i)
      slopes[i] = c.alibiSlopes[i];
  }

  HeadWeights w;
  w.h = h;
  w.T = T;
  w.weights.assign(static_cast<size_t>(h * T * T), 0.0f);
  w.visible.assign(static_cast<size_t>(T * T), 0);
  w.entropy.assign(static_cast<size_t>(h * T), 0.0);
  w.meanEntropy.assign(static_cast<size_t>(h), 0.0);
  w.maxEntropy.assign(static_cast<size_t>(T), 0.0);
  for (int64_t i = 0; i < T; ++i) {
    int64_t seen = 0;
    for (int64_t j = 0; j < T; ++j) {
      w.visible[i * T + j] = maskAllows(s.mask, i, j, T, T, T) ? 1 : 0;
      seen += w.visible[i * T + j];
    }
    // The sink is one more outcome of a row that sees a key (below).
    if (seen > 0)
      w.maxEntropy[i] = std::log(static_cast<double>(seen + (s.sinks ? 1 : 0)));
  }

  for (int64_t head = 0; head < h; ++head) {
    const int64_t g = head / group;
    double sum = 0;
    for (int64_t i = 0; i < T; ++i) {
      const double lse = c.lse[i * h + head];
      double mass = 0, entropy = 0;
      bool any = false;
      for (int64_t j = 0; j < T; ++j) {
        if (!w.visible[i * T + j] || !std::isfinite(lse))
          continue;
        any = true;
        double dot = 0;
        for (int64_t e = 0; e < dk; ++e)
          dot +=
              q[i * h * dk + head * dk + e] * k[j * s.n_kv * dk + g * dk + e];
        double score = dot * scale;
        if (s.softcap)
          score = *s.softcap * std::tanh(score / *s.softcap);
        score += slopes[head] * static_cast<double>(j - i);
        const double p = std::exp(score - lse);
        w.weights[(head * T + i) * T + j] = static_cast<float>(p);
        mass += p;
        if (p > 0)
          entropy -= p * std::log(p);
      }
      if (s.sinks && any) {
        const double p = std::exp(static_cast<double>(c.sinks[head]) - lse);
        mass += p;
        if (p > 0)
          entropy -= p * std::log(p);
      }
      if (any)
        w.maxNormError = std::max(w.maxNormError, std::fabs(1.0 - mass));
      w.entropy[head * T + i] = std::max(0.0, entropy);
      sum += w.entropy[head * T + i];
    }
    w.meanEntropy[head] = sum / static_cast<double>(T);
  }
  return w;
}

// ---- heatmaps --------------------------------------------------------------

namespace {

constexpr int kMaxCells = 512;
constexpr int kTitleH = 14, kAxisLeft = 44, kAxisBelow = 26;
constexpr int kBarGap = 10, kBarW = 12, kBarLabels = 30;

// The weight and visibility of one pooled cell: the largest weight of
// the block, hidden only if every pair in it is.
struct Cell {
  float value = 0;
  bool visible = false;
};

Cell cellOf(const HeadWeights &w, int64_t head, int64_t pool, int64_t ci,
            int64_t cj) {
  Cell c;
  for (int64_t i = ci * pool; i < std::min(w.T, (ci + 1) * pool); ++i)
    for (int64_t j = cj * pool; j < std::min(w.T, (cj + 1) * pool); ++j)
      if (w.visible[i * w.T + j]) {
        c.visible = true;
        c.value = std::max(c.value, w.at(head, i, j));
      }
  return c;
}

void drawMap(Image &img, const HeadWeights &w, int64_t head, int x0, int y0,
             int cells, int64_t pool, int cell) {
  for (int ci = 0; ci < cells; ++ci)
    for (int cj = 0; cj < cells; ++cj) {
      const Cell c = cellOf(w, head, pool, ci, cj);
      img.fill(x0 + cj * cell, y0 + ci * cell, cell, cell,
               c.visible ? colormap(c.value) : kHidden);
    }
}

// A vertical colour bar, 1 at the top and 0 at the bottom, labelled.
void drawBar(Image &img, int x, int y, int h) {
  for (int r = 0; r < h; ++r)
    img.fill(x, y + r, kBarW, 1,
             colormap(1.0 - static_cast<double>(r) / std::max(1, h - 1)));
  img.text(x + kBarW + 3, y, "1", kBlack);
  img.text(x + kBarW + 3, y + h - Image::kGlyphHeight, "0", kBlack);
  img.text(x + kBarW + 3, y + h / 2 - 3, "p", kBlack);
}

} // namespace

HeatmapLayout heatmapLayout(int64_t T) {
  HeatmapLayout l;
  l.T = T;
  l.pool = (T + kMaxCells - 1) / kMaxCells;
  l.cells = static_cast<int>((T + l.pool - 1) / l.pool);
  l.cell = std::clamp(kMaxCells / l.cells, 1, 16);
  l.mapSize = l.cells * l.cell;
  l.mapX = kAxisLeft;
  l.mapY = kTitleH + 6;
  l.barX = l.mapX + l.mapSize + kBarGap;
  l.barW = kBarW;
  l.width = l.barX + kBarW + kBarLabels;
  l.height = l.mapY + l.mapSize + kAxisBelow;
  return l;
}

int HeatmapLayout::pixelX(int64_t j) const {
  return mapX + static_cast<int>(j / pool) * cell + cell / 2;
}

int HeatmapLayout::pixelY(int64_t i) const {
  return mapY + static_cast<int>(i / pool) * cell + cell / 2;
}

Image renderHeatmap(const HeadWeights &w, int64_t head,
                    const std::string &title) {
  const HeatmapLayout l = heatmapLayout(w.T);
  Image img(l.width, l.height);
  img.text(l.mapX, 4, title, kBlack);
  drawMap(img, w, head, l.mapX, l.mapY, l.cells, l.pool, l.cell);
  // Axes: queries down the left, keys along the bottom, first and last
  // token at each end.
  const std::string last = std::to_string(w.T - 1);
  img.text(2, l.mapY, "query", kBlack);
  img.text(l.mapX - Image::textWidth("0") - 3, l.mapY + 9, "0", kBlack);
  img.text(l.mapX - Image::textWidth(last) - 3,
           l.mapY + l.mapSize - Image::kGlyphHeight, last, kBlack);
  const int below = l.mapY + l.mapSize + 3;
  img.text(l.mapX, below, "0", kBlack);
  img.text(l.mapX + l.mapSize - Image::textWidth(last), below, last, kBlack);
  img.text(l.mapX + l.mapSize / 2 - Image::textWidth("key") / 2, below + 10,
           "key", kBlack);
  drawBar(img, l.barX, l.mapY, l.mapSize);
  return img;
}

Image renderHeadGrid(const HeadWeights &w, const AttentionSpec &spec) {
  const int64_t pool = (w.T + 255) / 256;
  const int cells = static_cast<int>((w.T + pool - 1) / pool);
  const int cell = std::clamp(192 / cells, 1, 8);
  const int tile = cells * cell, gap = 12;
  const int cols = static_cast<int>(std::ceil(std::sqrt(double(w.h))));
  const int rows = static_cast<int>((w.h + cols - 1) / cols);
  const int stepX = tile + gap, stepY = tile + kTitleH + gap;
  const int width = gap + cols * stepX + kBarGap + kBarW + kBarLabels;
  const int height = gap + rows * stepY;
  Image img(width, height);
  for (int64_t head = 0; head < w.h; ++head) {
    const int x = gap + static_cast<int>(head % cols) * stepX;
    const int y = gap + static_cast<int>(head / cols) * stepY;
    img.text(x, y,
             "h" + std::to_string(head) + " kv" +
                 std::to_string(head / spec.groupSize()),
             kBlack);
    drawMap(img, w, head, x, y + kTitleH, cells, pool, cell);
  }
  drawBar(img, gap + cols * stepX, gap + kTitleH, std::max(tile, 40));
  return img;
}

// ---- the head split
// ----------------------------------------------------------

namespace {
constexpr int kSplitWidth = 900, kSplitLeft = 12, kBandH = 36;

Rgb lighter(Rgb c) {
  auto up = [](uint8_t v) {
    return static_cast<uint8_t>(v + (255 - v) * 45 / 100);
  };
  return {up(c.r), up(c.g), up(c.b)};
}
} // namespace

Rgb groupColor(int64_t g, int64_t n) {
  return colormap(n <= 1 ? 0.5 : 0.1 + 0.8 * static_cast<double>(g) / (n - 1));
}

Rgb queryHeadColor(const AttentionSpec &s, int64_t head) {
  const Rgb c = groupColor(head / s.groupSize(), s.n_kv);
  return head % 2 ? lighter(c) : c;
}

HeadSplitLayout headSplitLayout(const AttentionSpec &s) {
  HeadSplitLayout l;
  l.width = kSplitWidth;
  l.left = kSplitLeft;
  l.pixelsPerColumn =
      static_cast<double>(kSplitWidth - 2 * kSplitLeft) / (s.h * s.d_k);
  l.bandH = kBandH;
  l.qY = 24;
  l.kvY = l.qY + kBandH + 40;
  l.height = l.kvY + kBandH + 40;
  return l;
}

int HeadSplitLayout::qBlockCenterX(int64_t head, int64_t dk) const {
  return left + static_cast<int>((head + 0.5) * dk * pixelsPerColumn);
}

int HeadSplitLayout::kvBlockCenterX(int64_t g, int64_t dk) const {
  return left + static_cast<int>((g + 0.5) * dk * pixelsPerColumn);
}

Image renderHeadSplit(const AttentionSpec &s) {
  const HeadSplitLayout l = headSplitLayout(s);
  Image img(l.width, l.height);
  auto px = [&](int64_t column) {
    return l.left + static_cast<int>(column * l.pixelsPerColumn);
  };
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "q: %lld heads x dk %lld = %lld columns of w_q (d = %lld)",
                static_cast<long long>(s.h), static_cast<long long>(s.d_k),
                static_cast<long long>(s.h * s.d_k),
                static_cast<long long>(s.d));
  img.text(l.left, l.qY - 12, buf, kBlack);
  for (int64_t head = 0; head < s.h; ++head) {
    const int x0 = px(head * s.d_k), x1 = px((head + 1) * s.d_k);
    img.fill(x0, l.qY, std::max(1, x1 - x0), l.bandH, queryHeadColor(s, head));
    const std::string label = std::to_string(head);
    if (x1 - x0 >= Image::textWidth(label) + 2)
      img.text(x0 + (x1 - x0 - Image::textWidth(label)) / 2, l.qY + l.bandH + 3,
               label, kBlack);
  }
  std::snprintf(buf, sizeof buf,
                "k/v: %lld heads x dk %lld = %lld columns of w_k, w_v; each "
                "shared by %lld query heads",
                static_cast<long long>(s.n_kv), static_cast<long long>(s.d_k),
                static_cast<long long>(s.n_kv * s.d_k),
                static_cast<long long>(s.groupSize()));
  img.text(l.left, l.kvY - 12, buf, kBlack);
  for (int64_t g = 0; g < s.n_kv; ++g) {
    const int x0 = px(g * s.d_k), x1 = px((g + 1) * s.d_k);
    img.fill(x0, l.kvY, std::max(1, x1 - x0), l.bandH, groupColor(g, s.n_kv));
    // A white line between blocks where they are wide enough to show it.
    if (g > 0 && x1 - x0 >= 4)
      img.fill(x0, l.kvY, 1, l.bandH, kWhite);
    const std::string label = std::to_string(g);
    if (x1 - x0 >= Image::textWidth(label) + 2)
      img.text(x0 + (x1 - x0 - Image::textWidth(label)) / 2,
               l.kvY + l.bandH + 3, label, kBlack);
  }
  return img;
}

} // namespace mhagen::inspect
