#include "plot_png.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>

#include <fmt/format.h>
#include <png.h>

namespace mxmoe::cli {
namespace {

constexpr int kWidth = 960, kHeight = 640;
constexpr int kLeft = 110, kRight = 250, kTop = 60, kBottom = 80;  // plot margins

// 3x5 pixel glyphs, rows separated by spaces ('#' = ink).
const std::map<char, const char*>& glyphs() {
  static const std::map<char, const char*> g = {
      {'0', "### #.# #.# #.# ###"}, {'1', ".#. ##. .#. .#. ###"}, {'2', "### ..# ### #.. ###"}, {'3', "### ..# ### ..# ###"},
      {'4', "#.# #.# ### ..# ..#"}, {'5', "### #.. ### ..# ###"}, {'6', "### #.. ### #.# ###"}, {'7', "### ..# ..# ..# ..#"},
      {'8', "### #.# ### #.# ###"}, {'9', "### #.# ### ..# ###"}, {'A', ".#. #.# ### #.# #.#"}, {'B', "##. #.# ##. #.# ##."},
      {'C', "### #.. #.. #.. ###"}, {'D', "##. #.# #.# #.# ##."}, {'E', "### #.. ### #.. ###"}, {'F', "### #.. ### #.. #.."},
      {'G', "### #.. #.# #.# ###"}, {'H', "#.# #.# ### #.# #.#"}, {'I', "### .#. .#. .#. ###"}, {'J', "..# ..# ..# #.# ###"},
      {'K', "#.# #.# ##. #.# #.#"}, {'L', "#.. #.. #.. #.. ###"}, {'M', "#.# ### ### #.# #.#"}, {'N', "##. #.# #.# #.# #.#"},
      {'O', "### #.# #.# #.# ###"}, {'P', "### #.# ### #.. #.."}, {'Q', "### #.# #.# ### ..#"}, {'R', "### #.# ##. #.# #.#"},
      {'S', "### #.. ### ..# ###"}, {'T', "### .#. .#. .#. .#."}, {'U', "#.# #.# #.# #.# ###"}, {'V', "#.# #.# #.# #.# .#."},
      {'W', "#.# #.# ### ### #.#"}, {'X', "#.# #.# .#. #.# #.#"}, {'Y', "#.# #.# .#. .#. .#."}, {'Z', "### ..# .#. #.. ###"},
      {'.', "... ... ... ... .#."}, {'-', "... ... ### ... ..."}, {'/', "..# ..# .#. #.. #.."}, {':', "... .#. ... .#. ..."},
      {'%', "#.# ..# .#. #.. #.#"}, {'(', ".#. #.. #.. #.. .#."}, {')', ".#. ..# ..# ..# .#."}, {'=', "... ### ... ### ..."},
      {'_', "... ... ... ... ###"}, {',', "... ... ... .#. #.."}, {'+', "... .#. ### .#. ..."},
  };
  return g;
}

struct Canvas {
  std::vector<uint8_t> rgb = std::vector<uint8_t>(size_t(kWidth * kHeight * 3), 255);

  void set(int x, int y, uint32_t c) {
    if (x < 0 || y < 0 || x >= kWidth || y >= kHeight) return;
    uint8_t* p = &rgb[size_t((y * kWidth + x) * 3)];
    p[0] = uint8_t(c >> 16), p[1] = uint8_t(c >> 8), p[2] = uint8_t(c);
  }
  void line(double x0, double y0, double x1, double y1, uint32_t c, bool dashed = false, int width = 2) {
    const int steps = int(std::max(std::fabs(x1 - x0), std::fabs(y1 - y0))) + 1;
    for (int i = 0; i <= steps; ++i) {
      if (dashed && (i / 8) % 2) continue;
      const double t = double(i) / steps;
      for (int w = 0; w < width; ++w)
        set(int(std::lround(x0 + t * (x1 - x0))) + w / 2, int(std::lround(y0 + t * (y1 - y0))) + w % 2, c);
    }
  }
  // Text at (x, y) top-left, glyphs 3x5 scaled by `scale`.
  void text(int x, int y, const std::string& s, uint32_t c, int scale = 2) {
    for (char ch : s) {
      const auto it = glyphs().find(char(std::toupper(static_cast<unsigned char>(ch))));
      if (it != glyphs().end())
        for (int cell = 0; cell < 15; ++cell)
          if (it->second[cell + cell / 3] == '#')
            for (int dy = 0; dy < scale; ++dy)
              for (int dx = 0; dx < scale; ++dx) set(x + (cell % 3) * scale + dx, y + (cell / 3) * scale + dy, c);
      x += 4 * scale;
    }
  }
};

std::string tick_label(double v) {
  if (v >= 1e6) return fmt::format("{:g}M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:g}K", v / 1e3);
  return fmt::format("{:g}", v);
}

}  // namespace

Status write_loglog_png(const std::string& path, const std::string& title, const std::string& x_label,
                        const std::string& y_label, const std::vector<PlotSeries>& series) {
  double xmin = 1e300, xmax = 0, ymin = 1e300, ymax = 0;
  for (const auto& s : series)
    for (size_t i = 0; i < s.x.size(); ++i)
      if (s.x[i] > 0 && s.y[i] > 0) {
        xmin = std::min(xmin, s.x[i]), xmax = std::max(xmax, s.x[i]);
        ymin = std::min(ymin, s.y[i]), ymax = std::max(ymax, s.y[i]);
      }
  if (xmax <= 0) return Status::InvalidArgument("plot: no positive data");
  const double lx0 = std::floor(std::log10(xmin)), lx1 = std::max(std::ceil(std::log10(xmax)), lx0 + 1);
  const double ly0 = std::floor(std::log10(ymin)), ly1 = std::max(std::ceil(std::log10(ymax)), ly0 + 1);
  const int pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  auto px = [&](double x) { return kLeft + (std::log10(x) - lx0) / (lx1 - lx0) * pw; };
  auto py = [&](double y) { return kTop + ph - (std::log10(y) - ly0) / (ly1 - ly0) * ph; };

  Canvas c;
  // Decade grid lines and labels.
  for (double d = lx0; d <= lx1; ++d) {
    c.line(px(std::pow(10, d)), kTop, px(std::pow(10, d)), kTop + ph, 0xDDDDDD, false, 1);
    c.text(int(px(std::pow(10, d))) - 8, kTop + ph + 10, tick_label(std::pow(10, d)), 0x000000);
  }
  for (double d = ly0; d <= ly1; ++d) {
    c.line(kLeft, py(std::pow(10, d)), kLeft + pw, py(std::pow(10, d)), 0xDDDDDD, false, 1);
    const std::string l = tick_label(std::pow(10, d));
    c.text(kLeft - 10 - 8 * int(l.size()), int(py(std::pow(10, d))) - 5, l, 0x000000);
  }
  c.line(kLeft, kTop + ph, kLeft + pw, kTop + ph, 0x000000);
  c.line(kLeft, kTop, kLeft, kTop + ph, 0x000000);
  c.text(kLeft, 20, title, 0x000000, 3);
  c.text(kLeft + pw / 2 - 4 * int(x_label.size()), kHeight - 40, x_label, 0x000000);
  c.text(10, kTop - 25, y_label, 0x000000);

  int legend_y = kTop;
  for (const auto& s : series) {
    for (size_t i = 0; i + 1 < s.x.size(); ++i)
      c.line(px(s.x[i]), py(s.y[i]), px(s.x[i + 1]), py(s.y[i + 1]), s.rgb, s.dashed);
    for (size_t i = 0; i < s.x.size(); ++i)
      for (int d = -3; d <= 3; ++d) c.line(px(s.x[i]) - 3, py(s.y[i]) + d, px(s.x[i]) + 3, py(s.y[i]) + d, s.rgb, false, 1);
    c.line(kLeft + pw + 15, legend_y + 5, kLeft + pw + 45, legend_y + 5, s.rgb, s.dashed);
    c.text(kLeft + pw + 52, legend_y, s.label, 0x000000);
    legend_y += 22;
  }

  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return Status::IoError(fmt::format("{}: cannot create", path));
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!png || !info || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    std::fclose(f);
    return Status::IoError(fmt::format("{}: PNG encoding failed", path));
  }
  png_init_io(png, f);
  png_set_IHDR(png, info, kWidth, kHeight, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < kHeight; ++y) png_write_row(png, &c.rgb[size_t(y * kWidth * 3)]);
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return std::fclose(f) == 0 ? Status::Ok() : Status::IoError(fmt::format("{}: write failed", path));
}

}  // namespace mxmoe::cli
