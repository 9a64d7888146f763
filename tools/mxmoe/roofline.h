// The floor a MoE forward cannot beat: bytes of the experts it touches over the
// measured copy bandwidth, or its FLOPs over the measured bf16 GEMM rate,
// whichever is larger (measured on an H200, see docs/PERF.md); and the time
// the board's power limit allows for the same bytes and FLOPs.
#pragma once

#include <cstdint>
#include <vector>

#include "mxmoe/moe.h"

namespace mxmoe::cli {

inline constexpr double kCopyBytesPerSecond = 4.14e12;
inline constexpr double kBf16FlopsPerSecond = 730e12;

// The H200's power limit and idle draw, and the energy above idle of one byte
// of an HBM read stream and of one bf16 GEMM FLOP (bench/power_ceilings, H200,
// 2026-12-01, two runs: 129.1-129.2 pJ, 0.862-0.864 pJ). Each workload alone
// already draws the limit: the read stream at 4.49 TB/s, the GEMM at 665
// TFLOP/s. So a forward that must both read B bytes and do F FLOPs takes at
// least about (B e_byte + F e_flop) / (limit - idle) at the limit, more than
// either rate allows where B and F are both large (docs/PERF.md, "The floor
// under the board's power limit").
inline constexpr double kBoardLimitWatts = 700;
inline constexpr double kIdleWatts = 120.2;
inline constexpr double kJoulesPerByteRead = 129.1e-12;
inline constexpr double kJoulesPerBf16Flop = 0.863e-12;

// MXFP4 codes + E8M0 scales + bf16 biases of one expert (w13 and w2).
double expert_bytes(const MoeShape& s);
// 2 * T * k * (2I * H + H * I).
double moe_flops(const MoeShape& s, int64_t tokens);
// Mean number of distinct experts over the routing sets.
double mean_experts_touched(const std::vector<Routing>& sets, int64_t experts);

struct Floor {
  double bytes = 0, flops = 0, us = 0;
  bool memory_bound = true;
  // The bytes' and FLOPs' energy over the power the limit leaves above idle.
  double capped_us = 0;
};
Floor moe_floor(const MoeShape& s, int64_t tokens, double experts_touched);

}  // namespace mxmoe::cli
