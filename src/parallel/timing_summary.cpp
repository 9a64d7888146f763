#include "parallel/timing_summary.h"

#include <algorithm>

namespace mxmoe::parallel {

ParallelTiming summarize_batches(const std::vector<BatchTimes>& batches, int forwards) {
  ParallelTiming out;
  if (batches.empty() || forwards < 1) return out;
  std::vector<double> total, compute;
  for (const BatchTimes& b : batches) {
    if (b.total_us.empty() || b.compute_us.empty()) return ParallelTiming{};
    total.push_back(*std::max_element(b.total_us.begin(), b.total_us.end()) / forwards);
    compute.push_back(*std::max_element(b.compute_us.begin(), b.compute_us.end()) / forwards);
  }
  std::sort(total.begin(), total.end());
  std::sort(compute.begin(), compute.end());
  out.median_us = total[total.size() / 2];
  out.min_us = total.front();
  out.compute_us = compute[compute.size() / 2];
  out.comm_share = out.median_us > 0 ? std::clamp(1.0 - out.compute_us / out.median_us, 0.0, 1.0) : 0.0;
  out.iterations = int(batches.size()) * forwards;
  return out;
}

}  // namespace mxmoe::parallel
