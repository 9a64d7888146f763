// Code swizzles, bit-exactly, against the layout formula written element-wise
// and the kernels' shift-and-mask extraction of each bf16 pair.
#include <cmath>
#include <cstring>
#include <random>

#include <gtest/gtest.h>

#include "mxmoe/format.h"
#include "mxmoe/prepare.h"
#include "prepare/layout_index.h"
#include "prepare/pair_bits.h"

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

// The same byte in kMmaRowTiles128: the fragment-order byte of its 16-row
// group, with the 8 groups of each 128-row tile interleaved by 1 KB chunk,
// and a 64-wide tail's 512-byte group images (K % 128 == 64) back to back
// after the full chunks.
int64_t tile128_position(int64_t row, int64_t byte, int64_t row_bytes) {
  const int64_t tile = row / 128, group = (row % 128) / 16;
  const int64_t in_group = mma16_position(row % 16, byte, row_bytes);  // [c][1 KB], then the 512-byte tail
  const int64_t full = row_bytes / 64, c = in_group / 1024;
  const int64_t group_bytes = c < full ? 1024 : 512;
  return tile * 128 * row_bytes + c * 8192 + group * group_bytes + in_group % 1024;
}

// Each of the `per_row` bytes of each of `rows` rows lands on its own byte of
// `out`, at `position(row, i)`, and holds `expected(row, i)` there.
template <typename Position, typename Expected>
void expect_placed(const std::vector<uint8_t>& out, int64_t rows, int64_t per_row, Position position,
                   Expected expected, int64_t cols) {
  std::vector<bool> hit(out.size(), false);
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t i = 0; i < per_row; ++i) {
      const int64_t at = position(row, i);
      ASSERT_LT(at, int64_t(out.size()));
      ASSERT_FALSE(hit[size_t(at)]) << "two bytes land on " << at;
      hit[size_t(at)] = true;
      ASSERT_EQ(out[size_t(at)], expected(row, i)) << "cols " << cols << " row " << row << " byte " << i;
    }
}

// A bf16 bit pattern times 2^126 (the extraction yields E2M1 value * 2^-126).
double bf16_pattern_value(uint32_t bits16) {
  uint32_t f = bits16 << 16;
  float v;
  std::memcpy(&v, &f, 4);
  return std::ldexp(double(v), 126);
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
      for (int64_t b = 0; b < row_bytes; b += 4) {
        // A 4-byte word moves as a whole; its 8 codes come back from the
        // kernels' extraction as pairs of elements (2i, 2i + 1): byte i.
        const int64_t at = mma16_position(row, b, row_bytes);
        ASSERT_LT(at + 3, int64_t(out.size()));
        ASSERT_EQ(at % 4, 0);
        for (int j = 1; j < 4; ++j) ASSERT_EQ(mma16_position(row, b + j, row_bytes), at + j);
        uint32_t w;
        std::memcpy(&w, out.data() + at, 4);
        const uint8_t* src = dense.data() + row * row_bytes + b;
        for (int i = 0; i < 4; ++i) {
          const uint32_t pair = pair_bits::e2m1_pair_bits(w, i);
          // The rotate form (the wgmma consumers') reads the same pattern.
          ASSERT_EQ(pair_bits::e2m1_pair_bits<pair_bits::ShiftPipe::kAlu>(w, i), pair);
          const uint8_t lo = uint8_t(src[i] & 0xF), hi = uint8_t(src[i] >> 4);
          ASSERT_EQ(bf16_pattern_value(pair & 0xFFFF), double(e2m1_to_float(lo)))
              << "cols " << cols << " row " << row << " byte " << b << " pair " << i;
          ASSERT_EQ(bf16_pattern_value(pair >> 16), double(e2m1_to_float(hi)))
              << "cols " << cols << " row " << row << " byte " << b << " pair " << i;
          // Negative zero keeps its sign bit.
          ASSERT_EQ((pair >> 15) & 1, uint32_t(lo >> 3));
          ASSERT_EQ(pair >> 31, uint32_t(hi >> 3));
        }
        for (int j = 0; j < 4; ++j) {
          ASSERT_FALSE(hit[size_t(at + j)]) << "two bytes land on " << at + j;
          hit[size_t(at + j)] = true;
        }
      }
  }
}

TEST(Swizzle, MmaRowTiles128InterleavesATilesGroupsByChunk) {
  for (int64_t cols : {128, 256, 2944, 768, 64, 192, 2880, 1472}) {
    const int64_t rows = 256, row_bytes = cols / 2;
    std::vector<uint8_t> dense(size_t(rows * row_bytes)), groups(dense.size()), out(dense.size(), 0);
    std::mt19937 rng{static_cast<unsigned>(cols + 1)};
    for (auto& b : dense) b = uint8_t(rng());
    ASSERT_TRUE(swizzle_codes(WeightSwizzle::kMmaRowGroups16, dense.data(), rows, cols, groups.data()).ok());
    ASSERT_TRUE(swizzle_codes(WeightSwizzle::kMmaRowTiles128, dense.data(), rows, cols, out.data()).ok());
    // Every byte where the formula puts it, carrying the fragment-order byte
    // (same word bits) of its row.
    expect_placed(
        out, rows, row_bytes, [&](int64_t row, int64_t b) { return tile128_position(row, b, row_bytes); },
        [&](int64_t row, int64_t b) { return groups[size_t(mma16_position(row, b, row_bytes))]; }, cols);
    if (HasFatalFailure()) return;
    // A tile's chunk c (here the second tile's last full one) is one 8 KB
    // run: group g's 1 KB image at 1024 g; a tail is one 4 KB run of 512.
    const int64_t c = row_bytes / 64 - 1;
    for (int64_t g = 0; g < 8 && c >= 0; ++g)
      ASSERT_EQ(0, std::memcmp(&out[size_t(128 * row_bytes + 8192 * c + 1024 * g)],
                               &groups[size_t(128 * row_bytes + g * 16 * row_bytes + 1024 * c)], 1024));
    if (row_bytes % 64 != 0)
      for (int64_t g = 0; g < 8; ++g)
        ASSERT_EQ(0, std::memcmp(&out[size_t(128 * row_bytes + 8192 * (c + 1) + 512 * g)],
                                 &groups[size_t(128 * row_bytes + g * 16 * row_bytes + 1024 * (c + 1))], 512));
  }
}

// Where dense scale byte (row, block) lands in the fragment scale order, from
// the definition: 32-row blocks in place; in a block, row 16m + 2g + r, MX
// block 4c + t of a 128-wide chunk at 128c + 16g + 4t + 2m + r; a 64-wide
// tail chunk's two blocks at 128 (K / 128) + 8g + 4t + 2m + r.
int64_t scale_position(int64_t row, int64_t block, int64_t blocks) {
  const int64_t m = (row % 32) / 16, g = (row % 16) / 2, r = row % 2;
  const int64_t c = block / 4, t = block % 4, base = row / 32 * 32 * blocks;
  if (c < blocks / 4) return base + 128 * c + 16 * g + 4 * t + 2 * m + r;
  return base + 128 * c + 8 * g + 4 * t + 2 * m + r;
}

TEST(Swizzle, FragmentScaleOrderGivesALaneItsFourScalesInOneWord) {
  for (auto order : {WeightSwizzle::kMmaRowGroups16, WeightSwizzle::kMmaRowTiles128})
    for (int64_t cols : {64, 128, 192, 2880, 2944, 768, 1472}) {
      const int64_t rows = 96, blocks = cols / 32;
      std::vector<uint8_t> dense(size_t(rows * blocks)), out(dense.size(), 0);
      std::mt19937 rng{static_cast<unsigned>(cols + 7)};
      for (auto& b : dense) b = uint8_t(rng());
      ASSERT_TRUE(swizzle_scales(order, dense.data(), rows, cols, out.data()).ok());
      expect_placed(
          out, rows, blocks, [&](int64_t row, int64_t b) { return scale_position(row, b, blocks); },
          [&](int64_t row, int64_t b) { return dense[size_t(row * blocks + b)]; }, cols);
      if (HasFatalFailure()) return;
      // As a kernel reads it: lane 4g + t's word of chunk c in the second
      // 32-row block holds rows 2g, 2g + 1, 16 + 2g, 17 + 2g at block 4c + t.
      for (int64_t c = 0; c < blocks / 4; ++c)
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane / 4, t = lane % 4;
          const uint8_t* w = &out[size_t(32 * blocks + 128 * c + 4 * lane)];
          for (int mr = 0; mr < 4; ++mr)
            ASSERT_EQ(w[mr], dense[size_t((32 + 16 * (mr / 2) + 2 * g + mr % 2) * blocks + 4 * c + t)]);
        }
    }
}

// kCpuRowGroups16, element by element from its definition: element (row, k)
// of group row / 16 is a nibble of the group's block k / 32 (256 bytes at
// 256 (k / 32)): byte 64 q + 4 r + i with r = row % 16, q = (k % 16) / 4,
// i = k % 4, low nibble for k % 32 < 16, high nibble for the rest. Every
// nibble of the output is written once; a group's scales are [block][row].
TEST(Swizzle, CpuRowGroups16PairsEachCodeWithTheOneSixteenFurther) {
  std::mt19937 rng(29);
  for (int64_t cols : {32, 64, 160, 736, 2880}) {
    SCOPED_TRACE(::testing::Message() << "cols " << cols);
    const int64_t rows = 48, row_bytes = cols / 2, blocks = cols / 32;
    std::vector<uint8_t> dense(size_t(rows * row_bytes)), out(dense.size(), 0);
    for (auto& b : dense) b = uint8_t(rng());
    ASSERT_TRUE(swizzle_codes(WeightSwizzle::kCpuRowGroups16, dense.data(), rows, cols, out.data()).ok());
    std::vector<int> hits(out.size() * 2, 0);
    for (int64_t row = 0; row < rows; ++row)
      for (int64_t k = 0; k < cols; ++k) {
        const int64_t kb = k % 32, r = row % 16;
        const int64_t byte = row / 16 * 16 * row_bytes + 256 * (k / 32) + 64 * ((kb % 16) / 4) + 4 * r + kb % 4;
        const bool high = kb >= 16;
        ++hits[size_t(2 * byte + high)];
        const uint8_t want = e2m1_code_at(dense.data() + row * row_bytes, k);
        ASSERT_EQ(high ? out[size_t(byte)] >> 4 : out[size_t(byte)] & 0xF, want) << "row " << row << " k " << k;
      }
    for (int h : hits) ASSERT_EQ(h, 1);

    std::vector<uint8_t> scales(size_t(rows * blocks)), sout(scales.size(), 0);
    for (auto& b : scales) b = uint8_t(rng());
    ASSERT_TRUE(swizzle_scales(WeightSwizzle::kCpuRowGroups16, scales.data(), rows, cols, sout.data()).ok());
    for (int64_t row = 0; row < rows; ++row)
      for (int64_t b = 0; b < blocks; ++b)
        ASSERT_EQ(sout[size_t(row / 16 * 16 * blocks + 16 * b + row % 16)], scales[size_t(row * blocks + b)])
            << "row " << row << " block " << b;
  }
  std::vector<uint8_t> small(16 * 32), out(small.size());
  EXPECT_FALSE(swizzle_codes(WeightSwizzle::kCpuRowGroups16, small.data(), 8, 64, out.data()).ok());    // rows
  EXPECT_FALSE(swizzle_codes(WeightSwizzle::kCpuRowGroups16, small.data(), 16, 48, out.data()).ok());   // cols
  EXPECT_FALSE(swizzle_scales(WeightSwizzle::kCpuRowGroups16, small.data(), 24, 64, out.data()).ok());  // rows
}

// The read-back the device executor uses to re-lay a cpu pack for a GPU
// (layout_index.h): every dense word and scale byte comes back from the cpu
// order, at the widths of gpt-oss and its shards.
TEST(Swizzle, CpuRowGroups16ReadsBackEveryDenseWordAndScale) {
  std::mt19937 rng(31);
  for (int64_t cols : {32, 64, 160, 736, 2880}) {
    SCOPED_TRACE(::testing::Message() << "cols " << cols);
    const int64_t rows = 32, row_bytes = cols / 2, blocks = cols / 32;
    std::vector<uint8_t> dense(size_t(rows * row_bytes)), out(dense.size());
    std::vector<uint8_t> scales(size_t(rows * blocks)), sout(scales.size());
    for (auto& b : dense) b = uint8_t(rng());
    for (auto& b : scales) b = uint8_t(rng());
    ASSERT_TRUE(swizzle_codes(WeightSwizzle::kCpuRowGroups16, dense.data(), rows, cols, out.data()).ok());
    ASSERT_TRUE(swizzle_scales(WeightSwizzle::kCpuRowGroups16, scales.data(), rows, cols, sout.data()).ok());
    for (int64_t row = 0; row < rows; ++row) {
      const uint8_t* group = out.data() + row / 16 * 16 * row_bytes;
      for (int64_t x = 0; x < row_bytes; x += 4) {
        uint32_t want;
        std::memcpy(&want, dense.data() + row * row_bytes + x, 4);
        ASSERT_EQ(layout::cpu16_dense_word(group, int(row % 16), x), want) << "row " << row << " byte " << x;
      }
      for (int64_t b = 0; b < blocks; ++b)
        ASSERT_EQ(sout[size_t(row / 16 * 16 * blocks + layout::cpu16_scale_byte(int(row % 16), b))],
                  scales[size_t(row * blocks + b)])
            << "row " << row << " block " << b;
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
  std::vector<uint8_t> big(128 * 96);
  EXPECT_FALSE(swizzle_codes(WeightSwizzle::kMmaRowTiles128, big.data(), 64, 128, out.data()).ok());   // rows
  EXPECT_FALSE(swizzle_codes(WeightSwizzle::kMmaRowTiles128, big.data(), 128, 96, big.data()).ok());  // K % 64
  ASSERT_TRUE(swizzle_scales(WeightSwizzle::kNone, dense.data(), 16, 1024, out.data()).ok());
  EXPECT_EQ(out, dense);
  EXPECT_FALSE(swizzle_scales(WeightSwizzle::kMmaRowGroups16, dense.data(), 16, 64, out.data()).ok());  // rows
  EXPECT_FALSE(swizzle_scales(WeightSwizzle::kMmaRowTiles128, dense.data(), 32, 96, out.data()).ok());  // K % 64
}

TEST(Swizzle, EachPlanNamesItsOrder) {
  EXPECT_EQ(make_plan(BackendKind::kPortable, kGptOss20b).swizzle, WeightSwizzle::kMmaRowGroups16);
  // sm90's wgmma A fragment of a warp is the mma.m16n8k16 A fragment of its 16
  // rows: the same words (tests/sm90_layout_test.cpp follows them into wgmma),
  // a tile's groups interleaved by chunk.
  EXPECT_EQ(make_plan(BackendKind::kSm90, kGptOss20b).swizzle, WeightSwizzle::kMmaRowTiles128);
  EXPECT_EQ(make_plan(BackendKind::kReference, kGptOss20b).swizzle, WeightSwizzle::kNone);
  // The CPU kernels' order, with w13's gates and ups in alternate 16-row groups.
  EXPECT_EQ(make_plan(BackendKind::kCpu, kGptOss20b).swizzle, WeightSwizzle::kCpuRowGroups16);
  EXPECT_EQ(make_plan(BackendKind::kCpu, kGptOss20b).w13_layout, W13Layout::kBlockedGateUp16);
}

}  // namespace
}  // namespace mxmoe
