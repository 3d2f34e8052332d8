// A small RGB raster for the plots mhagen writes (attention heatmaps, the
// head split of `explain --plot`): filled rectangles, text in an embedded
// 5x7 bitmap font, a perceptual colour map, and PNG files through libpng.
#ifndef MHAGEN_INSPECT_IMAGE_H
#define MHAGEN_INSPECT_IMAGE_H

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace mhagen::inspect {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb &o) const {
    return r == o.r && g == o.g && b == o.b;
  }
  bool operator!=(const Rgb &o) const { return !(*this == o); }
};

constexpr Rgb kWhite{255, 255, 255};
constexpr Rgb kBlack{0, 0, 0};
/// Cells the mask hides (no weight at all), distinct from weight 0.
constexpr Rgb kHidden{215, 215, 215};

struct ImageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Image {
public:
  Image(int width, int height, Rgb background = kWhite);
  int width() const { return w_; }
  int height() const { return h_; }
  Rgb at(int x, int y) const;
  void set(int x, int y, Rgb c); ///< ignores points outside
  void fill(int x, int y, int w, int h, Rgb c);
  /// Text in the 5x7 font, `scale` pixels per font pixel, top-left at
  /// (x, y); returns the x after the last glyph. Characters without a
  /// glyph draw as a hollow box.
  int text(int x, int y, const std::string &s, Rgb c, int scale = 1);
  /// Width in pixels of `s` at `scale` (6 * scale per character).
  static int textWidth(const std::string &s, int scale = 1);
  static constexpr int kGlyphHeight = 7;
  const std::vector<uint8_t> &rgb() const { return px_; }

private:
  int w_, h_;
  std::vector<uint8_t> px_; ///< row-major RGB
};

/// The colour of v in [0, 1] (clamped) on a viridis-like map: dark blue
/// (0) through teal and green to yellow (1).
Rgb colormap(double v);

/// Writes an 8-bit RGB PNG; throws ImageError naming the path.
void writePng(const std::string &path, const Image &img);
/// Reads a PNG written by writePng (8-bit RGB); throws ImageError.
Image readPng(const std::string &path);

} // namespace mhagen::inspect

#endif
