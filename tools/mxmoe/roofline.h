// The floor a MoE forward cannot beat on one GPU: bytes of the experts it
// touches over the GPU's copy rate, or its FLOPs over its bf16 GEMM rate,
// whichever is larger; and the time the board's power limit allows for the
// same bytes and FLOPs (device_ceilings.h holds the rates, the limit and the
// energies).
#pragma once

#include <cstdint>
#include <vector>

#include "device_ceilings.h"
#include "mxmoe/moe.h"

namespace mxmoe::cli {

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
  // Each workload alone may draw the whole limit (on the H200 an HBM read
  // stream and a bf16 GEMM both do), so a forward that must both read B
  // bytes and do F FLOPs takes at least (B e_byte + F e_flop) / (limit -
  // idle), more than either rate allows where B and F are both large
  // (docs/PERF.md, "The floor under the board's power limit"). 0 where the
  // ceilings hold no energies.
  double capped_us = 0;
};
Floor moe_floor(const MoeShape& s, int64_t tokens, double experts_touched, const DeviceCeilings& ceilings);

}  // namespace mxmoe::cli
