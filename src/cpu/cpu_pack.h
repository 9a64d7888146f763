// The cpu backend's weights, prepared by the cpu plan and written in the
// kernels' order (kCpuRowGroups16, kBlockedGateUp16) in one pass straight
// from the caller's weights into the huge-page buffers: no dense padded copy
// in between, each source byte read once, the 16-row groups shared among the
// OpenMP threads. The bytes equal prepare_weights' under the cpu plan, then
// swizzle_codes / swizzle_scales (tests/cpu_pack_test.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/huge_pages.h"
#include "mxmoe/moe.h"
#include "mxmoe/prepare.h"

namespace mxmoe::cpu {

struct PackedWeights {
  HostBuffer w13_codes, w13_scales, w2_codes, w2_scales;
  std::vector<uint16_t> b13, b2, router_weight, router_bias;  // as prepare_weights' (b13 in the plan's order)
};

// `plan` is the cpu plan of `w`'s shape: it pads nothing (H and I are whole
// MX blocks, its alignment), so every prepared row is a source row. Checks
// the values as validate_weight_values does, with its messages: a scale byte
// 0xFF (E8M0 NaN, which the kernels would read as an Inf exponent) is found
// in the packing pass itself, the biases and router by a vectorized scan.
Status pack_cpu_weights(const PreparePlan& plan, const MoeWeightsView& w, PackedWeights* out);

}  // namespace mxmoe::cpu
