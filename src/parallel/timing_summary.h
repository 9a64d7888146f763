// From per-rank event times of timed batches to one ParallelTiming.
#pragma once

#include <vector>

#include "mxmoe/parallel.h"

namespace mxmoe::parallel {

// One timed batch (`forwards` forwards back to back): on each rank, the
// elapsed time and the part of it that was compute.
struct BatchTimes {
  std::vector<double> total_us, compute_us;  // [ranks]
};

// Per batch, the slowest rank's total and the slowest rank's compute, each
// divided by `forwards`; median_us and min_us over batches of the first,
// compute_us the median of the second; comm_share = 1 - compute / median,
// clamped to [0, 1]. iterations = batches * forwards.
ParallelTiming summarize_batches(const std::vector<BatchTimes>& batches, int forwards);

}  // namespace mxmoe::parallel
