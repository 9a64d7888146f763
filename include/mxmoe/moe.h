// The MoE layer as mxmoe sees it: shapes, non-owning views of MXFP4 expert
// weights, and routing. No framework types: raw pointers and sizes.
//
// Per expert e (GPT-OSS checkpoint order):
//   w13 [2I, H]  MXFP4, rows interleaved: row 2j = gate_j, row 2j+1 = up_j
//                (prepared weights may stack the halves instead: see W13Layout)
//   b13 [2I]     bf16
//   w2  [H, I]   MXFP4
//   b2  [H]      bf16
// Router: weight [E, H] bf16, bias [E] bf16.
// Forward: logits = x W^T + b; top-k (ties -> lower id); softmax over the k;
//   h = w13 x + b13; g = min(h_2j, limit); u = clamp(h_2j+1, -limit, limit);
//   a_j = g * sigmoid(alpha * g) * (u + 1); y += weight * (w2 a + b2).
#pragma once

#include <cstdint>
#include <vector>

#include "mxmoe/status.h"

namespace mxmoe {

struct MoeShape {
  int64_t experts = 0;
  int64_t hidden = 0;        // H
  int64_t intermediate = 0;  // I (per expert; w13 has 2I rows)
  int64_t topk = 0;
};

// gpt-oss-20b / gpt-oss-120b MoE block shapes.
inline constexpr MoeShape kGptOss20b{32, 2880, 2880, 4};
inline constexpr MoeShape kGptOss120b{128, 2880, 2880, 4};

// How w13's 2I rows (and b13's 2I entries) are ordered for one expert.
enum class W13Layout {
  kInterleaved,    // row 2j = gate_j, 2j+1 = up_j (checkpoint order)
  kStackedUpGate,  // rows [0, I) = up, [I, 2I) = gate (CUTLASS/FlashInfer SwiGLU epilogues)
  kStackedGateUp,  // rows [0, I) = gate, [I, 2I) = up
};

// Row of w13 (and entry of b13) holding gate_j or up_j, for intermediate size I.
inline constexpr int64_t w13_gate_row(W13Layout l, int64_t I, int64_t j) {
  return l == W13Layout::kInterleaved ? 2 * j : l == W13Layout::kStackedUpGate ? I + j : j;
}
inline constexpr int64_t w13_up_row(W13Layout l, int64_t I, int64_t j) {
  return l == W13Layout::kInterleaved ? 2 * j + 1 : l == W13Layout::kStackedUpGate ? j : I + j;
}

struct SwigluParams {
  float alpha = 1.702f;
  float limit = 7.0f;
};

// Checks experts/hidden/intermediate/topk are positive, topk <= experts, and
// hidden and intermediate are multiples of 32. Names the offending field.
Status validate_shape(const MoeShape& shape);

// A stack of `experts` MXFP4 matrices, each [rows, cols] with K = cols along the
// packed axis. Element (e, r, k) has its code in
//   codes[e * code_expert_stride + r * code_row_stride + k / 2] (nibble k & 1)
// and its scale in
//   scales[e * scale_expert_stride + r * scale_row_stride + k / 32].
// Strides are in bytes; a dense tensor has code_row_stride = cols / 2,
// scale_row_stride = cols / 32. Prepared (padded) tensors use larger strides.
struct MxMatrixView {
  const uint8_t* codes = nullptr;
  const uint8_t* scales = nullptr;
  int64_t experts = 0, rows = 0, cols = 0;
  int64_t code_row_stride = 0, code_expert_stride = 0;
  int64_t scale_row_stride = 0, scale_expert_stride = 0;

  static MxMatrixView dense(const uint8_t* codes, const uint8_t* scales, int64_t experts,
                            int64_t rows, int64_t cols) {
    return {codes, scales, experts, rows, cols, cols / 2, rows * (cols / 2),
            cols / 32, rows * (cols / 32)};
  }
  const uint8_t* code_row(int64_t e, int64_t r) const {
    return codes + e * code_expert_stride + r * code_row_stride;
  }
  const uint8_t* scale_row(int64_t e, int64_t r) const {
    return scales + e * scale_expert_stride + r * scale_row_stride;
  }
};

// Everything one MoE layer needs, as views. Router pointers may be null when the
// caller supplies routing.
struct MoeWeightsView {
  MoeShape shape;
  SwigluParams swiglu;
  const uint16_t* router_weight = nullptr;  // bf16 [E, H]
  const uint16_t* router_bias = nullptr;    // bf16 [E]
  MxMatrixView w13;                         // [E, 2I, H]
  const uint16_t* b13 = nullptr;            // bf16 [E, 2I]
  MxMatrixView w2;                          // [E, H, I]
  const uint16_t* b2 = nullptr;             // bf16 [E, H]
  int64_t b13_expert_stride = 0;            // elements; dense: 2I
  int64_t b2_expert_stride = 0;             // elements; dense: H
  W13Layout w13_layout = W13Layout::kInterleaved;  // order of w13 rows and b13 entries
};

// Checks pointers are non-null and view extents agree with the shape.
Status validate_weights(const MoeWeightsView& w);

// Owned, dense host copy of one layer's weights.
struct MoeWeights {
  MoeShape shape;
  SwigluParams swiglu;
  std::vector<uint16_t> router_weight, router_bias;
  std::vector<uint8_t> w13_codes, w13_scales;  // [E, 2I, H/2], [E, 2I, H/32]
  std::vector<uint16_t> b13;                   // [E, 2I]
  std::vector<uint8_t> w2_codes, w2_scales;    // [E, H, I/2], [E, H, I/32]
  std::vector<uint16_t> b2;                    // [E, H]
  W13Layout w13_layout = W13Layout::kInterleaved;

  MoeWeightsView view() const;
};

// Random weights in a realistic range: scales around 2^-7..2^-5 so activations
// stay O(1), random codes, non-zero biases. Deterministic in `seed`.
MoeWeights make_random_weights(const MoeShape& shape, uint64_t seed);

// Top-k routing per token: ids [T, k] (int32) and weights [T, k] (fp32, already
// softmaxed over the k).
struct RoutingView {
  const int32_t* ids = nullptr;
  const float* weights = nullptr;
  int64_t tokens = 0;
  int64_t topk = 0;
};

struct Routing {
  std::vector<int32_t> ids;
  std::vector<float> weights;
  int64_t tokens = 0, topk = 0;
  RoutingView view() const { return {ids.data(), weights.data(), tokens, topk}; }
};

// Random routing: k distinct experts per token, weights a softmax of random
// logits. Deterministic in `seed`. Benchmarks rotate several such sets.
Routing make_random_routing(int64_t tokens, int64_t experts, int64_t topk, uint64_t seed);

// Checks ids in [0, experts) and finite weights.
Status validate_routing(const RoutingView& r, int64_t experts);

}  // namespace mxmoe
