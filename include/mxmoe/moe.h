// The MoE layer as mxmoe sees it: shapes, non-owning views of MXFP4 expert
// weights, and routing. No framework types: raw pointers and sizes.
//
// Per expert e (GPT-OSS checkpoint order):
//   w13 [2I, H]  MXFP4, rows interleaved: row 2j = gate_j, row 2j+1 = up_j
//                (prepared weights may stack or reorder them: see W13Layout)
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
  // Interleaved (gate, up) pairs, ordered within each 128-column chunk of I
  // (the last one 64 wide when I % 128 == 64) by the K order of the sm90
  // GEMMs' activation operand: the pair at position k of a chunk is its
  // column chunk_order_column(k, width). An sm90 GEMM1 tile of 128 rows then
  // produces one contiguous half of a GEMM2 activation stage (sm90 backend).
  // Needs I % 64 == 0.
  kInterleavedChunkOrder,
  // Gates and ups in blocks of 16 columns: rows 32q .. 32q + 15 hold gate_j
  // and rows 32q + 16 .. 32q + 31 up_j for j = 16q .. 16q + 15 (cpu backend:
  // a 16-row group of gates and the next group of the same columns' ups give
  // two vectors whose lanes pair up for the SwiGLU). Needs I % 16 == 0.
  kBlockedGateUp16,
};

// The K order of a chunk of `width` (128, or 64 for a last chunk) that the
// sm90 GEMMs use for their activation operand (derived from the mma fragment
// in src/cuda/sm90/sm90_layout.h): operand position k holds the chunk's
// element chunk_order_column(k, width); chunk_order_position is the inverse.
inline constexpr int64_t chunk_order_column(int64_t k, int64_t width) {
  const int64_t s = k >> 4, t = (k >> 1) & 3, p = (k >> 3) & 1, b = k & 1;
  return (width / 4) * t + 8 * (s >> 1) + 4 * (s & 1) + 2 * p + b;
}
inline constexpr int64_t chunk_order_position(int64_t e, int64_t width) {
  const int64_t t = e / (width / 4), w = (e >> 3) & (width / 32 - 1), i = e & 7;
  return 32 * w + 8 * (i >> 1) + 2 * t + (i & 1);
}
// Pair position of column j in kInterleavedChunkOrder, and the column at
// pair position q, for intermediate size I.
inline constexpr int64_t chunk_order_pair(int64_t I, int64_t j) {
  const int64_t c0 = j / 128 * 128;
  return c0 + chunk_order_position(j - c0, I - c0 < 128 ? 64 : 128);
}
inline constexpr int64_t chunk_order_pair_column(int64_t I, int64_t q) {
  const int64_t c0 = q / 128 * 128;
  return c0 + chunk_order_column(q - c0, I - c0 < 128 ? 64 : 128);
}

// Row of w13 (and entry of b13) holding gate_j or up_j, for intermediate size I.
inline constexpr int64_t w13_gate_row(W13Layout l, int64_t I, int64_t j) {
  switch (l) {
    case W13Layout::kInterleaved: return 2 * j;
    case W13Layout::kStackedUpGate: return I + j;
    case W13Layout::kStackedGateUp: return j;
    case W13Layout::kInterleavedChunkOrder: return 2 * chunk_order_pair(I, j);
    case W13Layout::kBlockedGateUp16: return 2 * j - j % 16;
  }
  return -1;
}
inline constexpr int64_t w13_up_row(W13Layout l, int64_t I, int64_t j) {
  switch (l) {
    case W13Layout::kStackedUpGate: return j;
    case W13Layout::kStackedGateUp: return I + j;
    case W13Layout::kBlockedGateUp16: return w13_gate_row(l, I, j) + 16;
    case W13Layout::kInterleaved:
    case W13Layout::kInterleavedChunkOrder: break;
  }
  return w13_gate_row(l, I, j) + 1;
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
