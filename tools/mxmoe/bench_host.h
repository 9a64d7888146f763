// mxmoe bench on a host backend (cpu, reference): each T's time against the
// machine's read bandwidth, measured in the same run by a read stream on the
// forward's threads (read_stream.h), and the rate in GFLOP/s.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mxmoe/backend.h"
#include "plot_png.h"

namespace mxmoe::cli {

struct HostBench {
  std::vector<int64_t> tokens;
  int routing_sets = 8;
  int iterations = 0;  // 0: as many as about a second takes, 5 to 200
  uint64_t seed = 1;
  double warmup_s = 0;
};

// Prints model `name`'s table (one row per T, each with the read stream
// measured between its rounds of forwards), fills its JSON entry (every
// forward's time and every stream pass) and adds the measured and floor
// series (the touched experts' bytes at the 4 KiB-page stream's rate).
Status bench_host_model(const std::string& name, const MoeShape& shape, Backend& backend, const HostBench& bench,
                        uint32_t rgb, nlohmann::json* entry, std::vector<PlotSeries>* plot);

}  // namespace mxmoe::cli
