// Code swizzles, bit-exactly, against the layout formula written element-wise.
#include <random>

#include <gtest/gtest.h>

#include "mxmoe/prepare.h"

namespace mxmoe {
namespace {

// Where dense code byte (row, byte) lands in mma fragment order, from the
// definition: group of 16 rows, lane group g = (row % 16) / 2 holds rows 2g and
// 2g+1 (r = row % 2); K chunk c of 64 bytes a row, lane t = its 16-byte quarter;
// a 32-byte tail chunk has 8-byte quarters.
int64_t mma16_position(int64_t row, int64_t byte, int64_t row_bytes) {
  const int64_t group = row / 16, i = row % 16, g = i / 2, r = i % 2;
  const int64_t full_bytes = row_bytes / 64 * 64;
  const int64_t base = group * 16 * row_bytes;
  if (byte < full_bytes) {
    const int64_t c = byte / 64, t = (byte % 64) / 16, w = byte % 16;
    return base + c * 1024 + r * 512 + (4 * g + t) * 16 + w;
  }
  const int64_t off = byte - full_bytes, t = off / 8, w = off % 8;
  return base + (full_bytes / 64) * 1024 + r * 256 + (4 * g + t) * 8 + w;
}

TEST(Swizzle, MmaRowGroups16IsTheFragmentOrder) {
  for (int64_t cols : {64, 128, 192, 2880, 2944, 768}) {
    const int64_t rows = 48, row_bytes = cols / 2;
    std::vector<uint8_t> dense(size_t(rows * row_bytes)), out(dense.size(), 0);
    std::mt19937 rng{static_cast<unsigned>(cols)};
    for (auto& b : dense) b = uint8_t(rng());
    ASSERT_TRUE(swizzle_codes(WeightSwizzle::kMmaRowGroups16, dense.data(), rows, cols, out.data()).ok());
    std::vector<bool> hit(out.size(), false);
    for (int64_t row = 0; row < rows; ++row)
      for (int64_t b = 0; b < row_bytes; ++b) {
        const int64_t at = mma16_position(row, b, row_bytes);
        ASSERT_LT(at, int64_t(out.size()));
        ASSERT_EQ(out[size_t(at)], dense[size_t(row * row_bytes + b)]) << "cols " << cols << " row " << row << " byte " << b;
        ASSERT_FALSE(hit[size_t(at)]) << "two bytes land on " << at;
        hit[size_t(at)] = true;
      }
  }
}

TEST(Swizzle, NoneCopiesAndBadShapesAreRefused) {
  std::vector<uint8_t> dense(16 * 32), out(dense.size());
  for (size_t i = 0; i < dense.size(); ++i) dense[i] = uint8_t(i * 7 + 1);
  ASSERT_TRUE(swizzle_codes(WeightSwizzle::kNone, dense.data(), 16, 64, out.data()).ok());
  EXPECT_EQ(out, dense);
  EXPECT_FALSE(swizzle_codes(WeightSwizzle::kMmaRowGroups16, dense.data(), 8, 128, out.data()).ok());
  EXPECT_FALSE(swizzle_codes(WeightSwizzle::kMmaRowGroups16, dense.data(), 16, 32, out.data()).ok());
}

TEST(Swizzle, PortablePlanUsesFragmentOrder) {
  EXPECT_EQ(make_plan(BackendKind::kPortable, kGptOss20b).swizzle, WeightSwizzle::kMmaRowGroups16);
  EXPECT_EQ(make_plan(BackendKind::kCpu, kGptOss20b).swizzle, WeightSwizzle::kNone);
}

}  // namespace
}  // namespace mxmoe
