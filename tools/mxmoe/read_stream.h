// The machine's read bandwidth, measured beside a CPU backend's timings: a
// read stream on as many threads as a forward uses, over a buffer of 4 KiB
// pages and over one of transparent huge pages.
#pragma once

#include <cstddef>
#include <vector>

#include "mxmoe/status.h"

namespace mxmoe::cli {

struct ReadStream {
  int threads = 0;
  size_t bytes = 0;                             // each buffer
  std::vector<double> gbps_4k, gbps_huge;       // one per pass, in the order run
  double median_4k() const;
  double median_huge() const;
};

// `passes` passes over each buffer of `bytes` (far above the last-level
// cache, so that each pass comes from DRAM); each thread sums its contiguous
// part, as each thread of a forward streams its contiguous run of experts.
Status measure_read_stream(size_t bytes, int passes, ReadStream* out);

}  // namespace mxmoe::cli
