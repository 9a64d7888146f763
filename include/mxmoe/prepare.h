// Weight preparation: a plan per (backend, shape) and the padded, re-laid-out
// copy of the weights a backend reads.
//
// Padding invariants (checked bit-exactly by the tests):
//   - padded E2M1 positions hold code 0 (+0.0);
//   - padded E8M0 scale positions hold 127 (1.0), never 0xFF (NaN);
//   - padded bias entries are 0; padded router columns are 0;
//   - every tensor is allocated up to its readable extent, so tile loops of the
//     backend never read outside the allocation, even without masks.
// A padded intermediate column j has zero weights and zero bias, so h = 0,
// g = 0 and a_j = 0: it contributes nothing to w2's product.
#pragma once

#include <cstdint>
#include <string>

#include "mxmoe/backend.h"
#include "mxmoe/moe.h"
#include "mxmoe/status.h"

namespace mxmoe {

// Per-dimension alignment a backend's tile loops need (multiples of 32).
struct BackendAlignment {
  int64_t hidden = 32;
  int64_t intermediate = 32;
};
BackendAlignment backend_alignment(BackendKind kind);

struct PreparePlan {
  BackendKind backend = BackendKind::kCpu;
  MoeShape shape;  // original shape
  int64_t hidden_padded = 0;
  int64_t intermediate_padded = 0;
  W13Layout w13_layout = W13Layout::kInterleaved;
  // Readable extent of each prepared tensor in bytes (== its allocation size).
  int64_t w13_codes_bytes = 0, w13_scales_bytes = 0;
  int64_t w2_codes_bytes = 0, w2_scales_bytes = 0;

  MoeShape padded_shape() const {
    return {shape.experts, hidden_padded, intermediate_padded, shape.topk};
  }
};

PreparePlan make_plan(BackendKind backend, const MoeShape& shape);

struct PreparedWeights {
  PreparePlan plan;
  MoeWeights weights;  // dense at plan.padded_shape(), laid out per plan.w13_layout
  MoeWeightsView view() const { return weights.view(); }
};

Status prepare_weights(const PreparePlan& plan, const MoeWeightsView& original,
                       PreparedWeights* out);

}  // namespace mxmoe
