#include "roofline.h"

#include <algorithm>

#include "mxmoe/format.h"

namespace mxmoe::cli {

double expert_bytes(const MoeShape& s) {
  const double H = double(s.hidden), I = double(s.intermediate);
  const double w13 = 2 * I * H / 2 + 2 * I * H / kMxBlock + 2 * I * 2;
  const double w2 = H * I / 2 + H * I / kMxBlock + H * 2;
  return w13 + w2;
}

double moe_flops(const MoeShape& s, int64_t tokens) {
  const double H = double(s.hidden), I = double(s.intermediate);
  return 2.0 * double(tokens) * double(s.topk) * (2 * I * H + H * I);
}

double mean_experts_touched(const std::vector<Routing>& sets, int64_t experts) {
  if (sets.empty()) return 0;
  double total = 0;
  for (const Routing& r : sets) {
    std::vector<bool> used(size_t(experts), false);
    for (int32_t id : r.ids) used[size_t(id)] = true;
    total += double(std::count(used.begin(), used.end(), true));
  }
  return total / double(sets.size());
}

Floor moe_floor(const MoeShape& s, int64_t tokens, double experts_touched, const DeviceCeilings& c) {
  Floor f;
  f.bytes = experts_touched * expert_bytes(s);
  f.flops = moe_flops(s, tokens);
  const double mem_us = f.bytes / c.copy_bytes_per_s * 1e6;
  const double math_us = f.flops / c.bf16_flops_per_s * 1e6;
  f.memory_bound = mem_us >= math_us;
  f.us = std::max(mem_us, math_us);
  const double headroom_w = c.power_limit_w - c.idle_w;
  if (c.joules_per_byte_read > 0 && c.joules_per_bf16_flop > 0 && headroom_w > 0)
    f.capped_us = (f.bytes * c.joules_per_byte_read + f.flops * c.joules_per_bf16_flop) / headroom_w * 1e6;
  return f;
}

}  // namespace mxmoe::cli
