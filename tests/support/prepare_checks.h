// Independent checks of prepared weights: the expected bytes of every prepared
// tensor are rebuilt here from the original (without the library's copy code)
// and compared as raw bytes, padding and prefetch rows included.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "mxmoe/format.h"
#include "mxmoe/prepare.h"

namespace mxmoe::testing {

// Row of gate_j (is_up = false) or up_j in a w13 of `I` columns, written out
// from the layout's definition rather than taken from moe.h.
inline int64_t expected_w13_row(W13Layout l, int64_t I, int64_t j, bool is_up) {
  switch (l) {
    case W13Layout::kInterleaved: return 2 * j + (is_up ? 1 : 0);
    case W13Layout::kStackedUpGate: return is_up ? j : I + j;
    case W13Layout::kStackedGateUp: return is_up ? I + j : j;
    case W13Layout::kBlockedGateUp16: return 32 * (j / 16) + (is_up ? 16 : 0) + j % 16;
    case W13Layout::kInterleavedChunkOrder: {
      // Column j sits at the pair position k of its chunk whose wgmma operand
      // slot reads it: slot k (k16 step s = k / 16, thread t = (k / 2) % 4,
      // second register pair (k / 8) % 2, half b = k % 2) reads the chunk's
      // element (width / 4) t + 8 (s / 2) + 4 (s % 2) + 2 second + b (the
      // fragment, sm90_layout.h); searched here rather than inverted.
      const int64_t c0 = j / 128 * 128, width = I - c0 < 128 ? 64 : 128;
      for (int64_t k = 0; k < width; ++k) {
        const int64_t s = k / 16, t = (k / 2) % 4, second = (k / 8) % 2, b = k % 2;
        if (c0 + (width / 4) * t + 8 * (s / 2) + 4 * (s % 2) + 2 * second + b == j) return 2 * (c0 + k) + (is_up ? 1 : 0);
      }
      return -1;
    }
  }
  return -1;
}

// What a shard / prepared copy holds: experts [expert_begin, +E) and original
// intermediate columns [j0, j0 + Ip), b2 when with_b2. `original` is dense and
// interleaved (as make_random_weights builds it).
struct ExpectedSlice {
  int64_t expert_begin = 0;
  int64_t j0 = 0;
  bool with_b2 = true;
};

// Compares every byte of `p` with what the invariants say it must hold.
inline void expect_prepared_bytes(const MoeWeights& original, const PreparedWeights& p,
                                  const ExpectedSlice& s = {}) {
  const PreparePlan& plan = p.plan;
  const int64_t E = plan.shape.experts, H = original.shape.hidden, I = original.shape.intermediate;
  const int64_t Hp = plan.hidden_padded, Ip = plan.intermediate_padded, pre = plan.prefetch_rows;
  ASSERT_EQ(int64_t(p.weights.w13_codes.size()), plan.w13_codes_bytes);
  ASSERT_EQ(int64_t(p.weights.w13_scales.size()), plan.w13_scales_bytes);
  ASSERT_EQ(int64_t(p.weights.w2_codes.size()), plan.w2_codes_bytes);
  ASSERT_EQ(int64_t(p.weights.w2_scales.size()), plan.w2_scales_bytes);
  ASSERT_EQ(plan.w13_codes_bytes, (E * 2 * Ip + pre) * Hp / 2);
  ASSERT_EQ(plan.w2_scales_bytes, (E * Hp + pre) * Ip / 32);

  std::vector<uint8_t> c13(size_t(plan.w13_codes_bytes), 0), s13(size_t(plan.w13_scales_bytes), 127);
  std::vector<uint8_t> c2(size_t(plan.w2_codes_bytes), 0), s2(size_t(plan.w2_scales_bytes), 127);
  std::vector<uint16_t> b13(size_t(E * 2 * Ip), 0), b2(size_t(E * Hp), 0);
  for (int64_t e = 0; e < E; ++e) {
    const int64_t se = s.expert_begin + e;
    for (int64_t j = 0; j < Ip; ++j) {
      const int64_t gj = s.j0 + j;
      if (gj >= I) continue;
      for (bool up : {false, true}) {
        const int64_t src = se * 2 * I + 2 * gj + (up ? 1 : 0);
        const int64_t dst = e * 2 * Ip + expected_w13_row(plan.w13_layout, Ip, j, up);
        for (int64_t b = 0; b < H / 2; ++b)
          c13[size_t(dst * Hp / 2 + b)] = original.w13_codes[size_t(src * H / 2 + b)];
        for (int64_t b = 0; b < H / 32; ++b)
          s13[size_t(dst * Hp / 32 + b)] = original.w13_scales[size_t(src * H / 32 + b)];
        b13[size_t(dst)] = original.b13[size_t(src)];
      }
    }
    for (int64_t h = 0; h < H; ++h) {
      const int64_t src = se * H + h, dst = e * Hp + h;
      for (int64_t k = 0; k < Ip && s.j0 + k < I; k += 2)
        c2[size_t(dst * Ip / 2 + k / 2)] = original.w2_codes[size_t(src * I / 2 + (s.j0 + k) / 2)];
      for (int64_t k = 0; k < Ip && s.j0 + k < I; k += 32)
        s2[size_t(dst * Ip / 32 + k / 32)] = original.w2_scales[size_t(src * I / 32 + (s.j0 + k) / 32)];
      if (s.with_b2) b2[size_t(dst)] = original.b2[size_t(src)];
    }
  }
  // EXPECT_TRUE on whole vectors: gtest would print megabytes on failure.
  EXPECT_TRUE(c13 == p.weights.w13_codes) << "w13 codes differ";
  EXPECT_TRUE(s13 == p.weights.w13_scales) << "w13 scales differ";
  EXPECT_TRUE(c2 == p.weights.w2_codes) << "w2 codes differ";
  EXPECT_TRUE(s2 == p.weights.w2_scales) << "w2 scales differ";
  EXPECT_TRUE(b13 == p.weights.b13) << "b13 differs";
  EXPECT_TRUE(b2 == p.weights.b2) << "b2 differs";
}

// Dequantized valid region of the prepared view == dequantized original, as
// bit patterns (NaN-safe, -0 vs +0 distinguished).
inline void expect_same_dequantized(const MoeWeights& original, const PreparedWeights& p,
                                    const ExpectedSlice& s = {}) {
  const MoeWeightsView ov = original.view(), pv = p.view();
  const int64_t E = p.plan.shape.experts, H = ov.shape.hidden, I = ov.shape.intermediate;
  const int64_t Ip = p.plan.intermediate_padded;
  std::vector<float> a(size_t(std::max(H, I))), b(a.size());
  int64_t mismatched_rows = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t se = s.expert_begin + e;
    for (int64_t j = 0; j < Ip && s.j0 + j < I; ++j)
      for (bool up : {false, true}) {
        const int64_t sr = 2 * (s.j0 + j) + (up ? 1 : 0);
        const int64_t dr = expected_w13_row(p.plan.w13_layout, Ip, j, up);
        mxfp4_dequantize_row(ov.w13.code_row(se, sr), ov.w13.scale_row(se, sr), H, a.data());
        mxfp4_dequantize_row(pv.w13.code_row(e, dr), pv.w13.scale_row(e, dr), H, b.data());
        mismatched_rows += std::memcmp(a.data(), b.data(), size_t(H) * 4) != 0;
      }
    const int64_t n = std::min(Ip, I - s.j0);
    if (n <= 0) continue;
    for (int64_t h = 0; h < H; ++h) {
      mxfp4_dequantize_row(ov.w2.code_row(se, h) + s.j0 / 2, ov.w2.scale_row(se, h) + s.j0 / 32, n,
                           a.data());
      mxfp4_dequantize_row(pv.w2.code_row(e, h), pv.w2.scale_row(e, h), n, b.data());
      mismatched_rows += std::memcmp(a.data(), b.data(), size_t(n) * 4) != 0;
    }
  }
  EXPECT_EQ(mismatched_rows, 0);
}

// x [T, H] -> [T, Hp] with zero columns appended.
inline std::vector<float> pad_columns(const std::vector<float>& x, int64_t T, int64_t H, int64_t Hp) {
  std::vector<float> out(size_t(T * Hp), 0.0f);
  for (int64_t t = 0; t < T; ++t)
    std::copy(x.begin() + t * H, x.begin() + (t + 1) * H, out.begin() + t * Hp);
  return out;
}

}  // namespace mxmoe::testing
