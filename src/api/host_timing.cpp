#include "api/host_timing.h"

#include <algorithm>
#include <chrono>
#include <vector>

namespace mxmoe {

Status time_host_forward(const MoeShape& shape, int64_t tokens, int routing_sets, int iterations, uint64_t seed,
                         double min_warmup_s, double power_window_s, const std::function<Status(const RoutingView&)>& forward,
                         ForwardTiming* out) {
  if (tokens <= 0 || !out) return Status::InvalidArgument("timing needs positive tokens and an output");
  std::vector<Routing> sets;
  for (int i = 0; i < std::max(routing_sets, 1); ++i)
    sets.push_back(make_random_routing(tokens, shape.experts, shape.topk, seed + uint64_t(i)));
  using Clock = std::chrono::steady_clock;
  const auto warm_start = Clock::now();
  for (size_t i = 0; std::chrono::duration<double>(Clock::now() - warm_start).count() < min_warmup_s; ++i)
    MXMOE_RETURN_IF_ERROR(forward(sets[i % sets.size()].view()));
  *out = ForwardTiming{};
  for (int it = 0; it < std::max(iterations, 1); ++it) {
    const RoutingView r = sets[size_t(it) % sets.size()].view();
    const auto t0 = Clock::now();
    MXMOE_RETURN_IF_ERROR(forward(r));
    out->batch_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::vector<double> times = out->batch_us;
  std::sort(times.begin(), times.end());
  out->median_us = times[times.size() / 2];
  out->min_us = times.front();
  out->iterations = int(times.size());
  if (power_window_s > 0) out->power_note = "the CPU backends measure no board power";
  return Status::Ok();
}

}  // namespace mxmoe
