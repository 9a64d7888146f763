// Our block-scaled scale layout against CUTLASS's own: the cute layout of
// Sm1xxBlockScaledConfig<32>::tile_atom_to_shape_SFA / SFB, evaluated on the
// host for every (row, block) of many shapes, and the packed buffer bit-exactly
// (padding included) against one built from that layout.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cutlass/detail/sm100_blockscaled_layout.hpp"
#include "mxmoe/format.h"
#include "prepare/blockscaled_scales.h"

namespace mxmoe {
namespace {

using Config = cutlass::detail::Sm1xxBlockScaledConfig<kMxBlock>;

struct Shape {
  int64_t rows, k;
};
// 1 row, rows around the 128-row atom, K of the padded gpt-oss GEMMs (2944 =
// 2880 padded to 128; 1536 and 768: the TP 2 / TP 4 shards of I padded), and
// K whose block count is not a multiple of 4 (2880: 90 blocks).
const Shape kShapes[] = {{1, 2944}, {127, 2944}, {128, 1536}, {129, 2944}, {300, 768},
                         {1, 128},  {257, 256},  {129, 2880}, {5, 2880},   {2944, 2944}};

TEST(BlockscaledLayout, OffsetsAreCutlasss) {
  for (const Shape s : kShapes) {
    SCOPED_TRACE("rows=" + std::to_string(s.rows) + " K=" + std::to_string(s.k));
    const int64_t kb = s.k / kMxBlock;
    // A operand (M = rows) and B operand (N = rows): the same atom tiling.
    const auto sfa = Config::tile_atom_to_shape_SFA(cute::make_shape(int(s.rows), 64, int(s.k), 1));
    const auto sfb = Config::tile_atom_to_shape_SFB(cute::make_shape(64, int(s.rows), int(s.k), 1));
    EXPECT_EQ(int64_t(cute::cosize(sfa)), blockscaled_scale_bytes(s.rows, kb));
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t b = 0; b < kb; ++b) {
        const int64_t ours = blockscaled_scale_offset(r, b, kb);
        ASSERT_EQ(int64_t(sfa(int(r), int(b * kMxBlock), 0)), ours) << "row " << r << " block " << b;
        ASSERT_EQ(int64_t(sfb(int(r), int(b * kMxBlock), 0)), ours) << "row " << r << " block " << b;
        // Every element of the block shares its scale (the layout's stride-0 mode).
        ASSERT_EQ(int64_t(sfa(int(r), int(b * kMxBlock + 31), 0)), ours);
      }
  }
}

TEST(BlockscaledLayout, PackedBytesMatchTheLayoutPaddingIncluded) {
  std::mt19937 rng(7);
  for (const Shape s : kShapes) {
    SCOPED_TRACE("rows=" + std::to_string(s.rows) + " K=" + std::to_string(s.k));
    const int64_t kb = s.k / kMxBlock, stride = kb + 3;
    std::vector<uint8_t> dense(size_t(s.rows * stride));
    for (auto& v : dense) v = uint8_t(100 + rng() % 40);  // never 127, so padding stands out
    const auto sfa = Config::tile_atom_to_shape_SFA(cute::make_shape(int(s.rows), 64, int(s.k), 1));
    std::vector<uint8_t> expect(size_t(cute::cosize(sfa)), kE8M0Neutral);
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t b = 0; b < kb; ++b) expect[size_t(sfa(int(r), int(b * kMxBlock), 0))] = dense[size_t(r * stride + b)];
    std::vector<uint8_t> got(size_t(blockscaled_scale_bytes(s.rows, kb)), 0xFF);
    ASSERT_TRUE(pack_blockscaled_scales(dense.data(), s.rows, kb, stride, got.data()).ok());
    ASSERT_EQ(got, expect);
    for (uint8_t v : got) ASSERT_NE(v, kE8M0NaN);
  }
}

TEST(BlockscaledLayout, RefusesBadArguments) {
  uint8_t out[512];
  EXPECT_FALSE(pack_blockscaled_scales(out, 2, 4, 3, out).ok());      // stride below the row
  EXPECT_FALSE(pack_blockscaled_scales(nullptr, 2, 4, 4, out).ok());  // no source
  EXPECT_TRUE(pack_blockscaled_scales(nullptr, 0, 4, 4, out).ok());   // no rows: nothing to read
}

}  // namespace
}  // namespace mxmoe
