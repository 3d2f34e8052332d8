// Image, colour map and PNG I/O (Image.h).
#include "mhagen/inspect/Image.h"

#include <png.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

namespace mhagen::inspect {

// The 5x7 glyph of c, 7 rows of 5 bits (bit 4 = leftmost); null if none.
const uint8_t *glyph5x7(char c);

Image::Image(int width, int height, Rgb background) : w_(width), h_(height) {
  if (width <= 0 || height <= 0 || width > 16384 || height > 16384)
    throw ImageError("image size " + std::to_string(width) + " x " +
                     std::to_string(height) + " is outside 1..16384");
  px_.resize(static_cast<size_t>(w_) * h_ * 3);
  fill(0, 0, w_, h_, background);
}

Rgb Image::at(int x, int y) const {
  if (x < 0 || y < 0 || x >= w_ || y >= h_)
    throw ImageError("pixel (" + std::to_string(x) + ", " + std::to_string(y) +
                     ") is outside the image");
  const size_t i = (static_cast<size_t>(y) * w_ + x) * 3;
  return {px_[i], px_[i + 1], px_[i + 2]};
}

void Image::set(int x, int y, Rgb c) {
  if (x < 0 || y < 0 || x >= w_ || y >= h_)
    return;
  const size_t i = (static_cast<size_t>(y) * w_ + x) * 3;
  px_[i] = c.r;
  px_[i + 1] = c.g;
  px_[i + 2] = c.b;
}

void Image::fill(int x, int y, int w, int h, Rgb c) {
  const int x0 = std::max(0, x), y0 = std::max(0, y);
  const int x1 = std::min(w_, x + w), y1 = std::min(h_, y + h);
  for (int yy = y0; yy < y1; ++yy)
    for (int xx = x0; xx < x1; ++xx)
      set(xx, yy, c);
}

int Image::textWidth(const std::string &s, int scale) {
  return static_cast<int>(s.size()) * 6 * scale;
}

int Image::text(int x, int y, const std::string &s, Rgb c, int scale) {
  for (char ch : s) {
    const uint8_t *g = glyph5x7(ch);
    for (int row = 0; row < kGlyphHeight; ++row)
      for (int col = 0; col < 5; ++col) {
        const bool on = g ? (g[row] >> (4 - col)) & 1
                          : (row == 0 || row == 6 || col == 0 || col == 4);
        if (on)
          fill(x + col * scale, y + row * scale, scale, scale, c);
      }
    x += 6 * scale;
  }
  return x;
}

Rgb colormap(double v) {
  // Viridis sampled at 0, 1/8, ..., 1; linear between the samples.
  static const Rgb stops[] = {{68, 1, 84},    {71, 44, 122},  {59, 81, 139},
                              {44, 113, 142}, {33, 144, 141}, {39, 173, 129},
                              {92, 200, 99},  {170, 220, 50}, {253, 231, 37}};
  if (!(v > 0))
    return stops[0];
  if (v >= 1)
    return stops[8];
  const double x = v * 8;
  const int i = static_cast<int>(x);
  const double f = x - i;
  auto mix = [&](uint8_t a, uint8_t b) {
    return static_cast<uint8_t>(std::lround(a + (b - a) * f));
  };
  return {mix(stops[i].r, stops[i + 1].r), mix(stops[i].g, stops[i + 1].g),
          mix(stops[i].b, stops[i + 1].b)};
}

namespace {
struct File {
  FILE *f;
  ~File() {
    if (f)
      std::fclose(f);
  }
};
} // namespace

void writePng(const std::string &path, const Image &img) {
  File file{std::fopen(path.c_str(), "wb")};
  if (!file.f)
    throw ImageError(path + ": cannot write");
  png_structp png =
      png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!png || !info) {
    png_destroy_write_struct(&png, &info);
    throw ImageError(path + ": libpng could not start");
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    throw ImageError(path + ": libpng failed while writing");
  }
  png_init_io(png, file.f);
  png_set_IHDR(png, info, static_cast<png_uint_32>(img.width()),
               static_cast<png_uint_32>(img.height()), 8, PNG_COLOR_TYPE_RGB,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  const uint8_t *data = img.rgb().data();
  for (int y = 0; y < img.height(); ++y)
    png_write_row(png, const_cast<png_bytep>(data + static_cast<size_t>(y) *
                                                        img.width() * 3));
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
}

Image readPng(const std::string &path) {
  File file{std::fopen(path.c_str(), "rb")};
  if (!file.f)
    throw ImageError(path + ": cannot open");
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!png || !info) {
    png_destroy_read_struct(&png, &info, nullptr);
    throw ImageError(path + ": libpng could not start");
  }
  std::unique_ptr<Image> img;
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    throw ImageError(path + ": not a PNG libpng can read");
  }
  png_init_io(png, file.f);
  png_read_info(png, info);
  const int w = static_cast<int>(png_get_image_width(png, info));
  const int h = static_cast<int>(png_get_image_height(png, info));
  if (png_get_color_type(png, info) != PNG_COLOR_TYPE_RGB ||
      png_get_bit_depth(png, info) != 8) {
    png_destroy_read_struct(&png, &info, nullptr);
    throw ImageError(path + ": not an 8-bit RGB PNG");
  }
  img = std::make_unique<Image>(w, h);
  std::vector<uint8_t> row(static_cast<size_t>(w) * 3);
  for (int y = 0; y < h; ++y) {
    png_read_row(png, row.data(), nullptr);
    for (int x = 0; x < w; ++x)
      img->set(x, y, {row[x * 3], row[x * 3 + 1], row[x * 3 + 2]});
  }
  png_destroy_read_struct(&png, &info, nullptr);
  return *img;
}

} // namespace mhagen::inspect
