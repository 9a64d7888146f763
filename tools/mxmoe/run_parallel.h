// mxmoe run --tp N / --ep N: one forward across N GPUs, compared with the
// same forward on one GPU (the same backend) and, with --check, the fp64
// reference.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mxmoe/parallel.h"

namespace mxmoe::cli {

struct ParallelRun {
  ParallelMode mode;
  int size;
  std::string backend;  // --backend (choose_parallel_backend)
  bool check;
  std::string output;
};

// Exit code: 0, 1 when a comparison fails, 2 on an error (printed).
int run_parallel(const ParallelRun& run, const MoeWeightsView& weights, const std::vector<float>& x,
                 int64_t tokens);

}  // namespace mxmoe::cli
