// A log-log line plot written as PNG (libpng), for `mxmoe bench --png`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mxmoe/status.h"

namespace mxmoe::cli {

struct PlotSeries {
  std::string label;
  uint32_t rgb = 0;  // 0xRRGGBB
  bool dashed = false;
  std::vector<double> x, y;  // positive values
};

Status write_loglog_png(const std::string& path, const std::string& title, const std::string& x_label,
                        const std::string& y_label, const std::vector<PlotSeries>& series);

}  // namespace mxmoe::cli
