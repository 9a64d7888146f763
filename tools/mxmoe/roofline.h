// The floor a MoE forward cannot beat: bytes of the experts it touches over the
// measured copy bandwidth, or its FLOPs over the measured bf16 GEMM rate,
// whichever is larger (measured on an H200, see docs/PERF.md).
#pragma once

#include <cstdint>
#include <vector>

#include "mxmoe/moe.h"

namespace mxmoe::cli {

inline constexpr double kCopyBytesPerSecond = 4.14e12;
inline constexpr double kBf16FlopsPerSecond = 730e12;

// MXFP4 codes + E8M0 scales + bf16 biases of one expert (w13 and w2).
double expert_bytes(const MoeShape& s);
// 2 * T * k * (2I * H + H * I).
double moe_flops(const MoeShape& s, int64_t tokens);
// Mean number of distinct experts over the routing sets.
double mean_experts_touched(const std::vector<Routing>& sets, int64_t experts);

struct Floor {
  double bytes = 0, flops = 0, us = 0;
  bool memory_bound = true;
};
Floor moe_floor(const MoeShape& s, int64_t tokens, double experts_touched);

}  // namespace mxmoe::cli
