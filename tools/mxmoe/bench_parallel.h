// mxmoe bench --tp N / --ep N: one model's layer across N GPUs against the
// same layer on one GPU (portable), over a token sweep.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "device_ceilings.h"
#include "mxmoe/parallel.h"
#include "plot_png.h"

namespace mxmoe::cli {

struct ParallelBench {
  ParallelMode mode;
  int size;
  BackendKind backend;  // each rank's, and the one-GPU baseline's
  std::vector<int64_t> tokens;
  int routing_sets;
  int iterations;
  uint64_t seed;
};

// Prints a table for model `name` (random weights in bench.seed), fills its
// JSON entry and adds plot series in `rgb`: N GPUs, one GPU (lighter), and
// the floor over N GPUs (dashed), each at `ceilings` (the first GPU's).
Status bench_parallel_model(const std::string& name, const MoeShape& shape, const ParallelBench& bench,
                            const DeviceCeilings& ceilings, uint32_t rgb, nlohmann::json* entry,
                            std::vector<PlotSeries>* plot);

}  // namespace mxmoe::cli
