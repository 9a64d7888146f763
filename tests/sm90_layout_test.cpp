// The sm90 kernels' layouts, on the host: the activation operand's K order and
// shared-memory image, the packed tensors, the wgmma descriptor, the
// accumulator fragment, the shared-memory carve-up; and one weight tile
// through the whole wgmma data path (codes as uploaded -> bulk-copied stage ->
// register A fragments; x -> pack -> stage -> descriptor reads of B)
// emulated element by element against the dense product, bit-exactly.
// The fragment layouts are written here from the PTX ISA's definitions
// (wgmma m64nNk16 A from registers, f32 accumulators; K-major operand with
// the 128-byte swizzle), independently of the kernel code.
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "cuda/sm90/sm90_layout.h"
#include "mxmoe/format.h"
#include "mxmoe/prepare.h"
#include "prepare/pair_bits.h"

namespace mxmoe::sm90 {
namespace {

TEST(Sm90Layout, OperandKOrderIsABijectionMatchingTheFragments) {
  for (int width : {kChunk, kTailChunk}) {
    std::set<int> seen;
    for (int k = 0; k < width; ++k) {
      ASSERT_EQ(logical_k(physical_k(k, width), width), k);
      ASSERT_EQ(physical_k(logical_k(k, width), width), k);
      seen.insert(physical_k(k, width));
    }
    EXPECT_EQ(seen.size(), size_t(width));
    EXPECT_EQ(*seen.begin(), 0);
    EXPECT_EQ(*seen.rbegin(), width - 1);
  }
  // A 64-wide tail: lane t's 16 elements [16t, 16t + 16) are its two words.
  for (int s = 0; s < 4; ++s)
    for (int t = 0; t < 4; ++t)
      for (int reg = 0; reg < 4; ++reg)
        for (int b = 0; b < 2; ++b)
          EXPECT_EQ(physical_k(16 * s + 2 * t + 8 * (reg >> 1) + b, kTailChunk),
                    16 * t + 8 * a_word(s) + 2 * a_pair(s, reg) + b);
  // wgmma A fragment (PTX ISA, m64nNk16 .bf16 from registers): thread (g, t)
  // register a0 = row g, k {2t, 2t+1}; a1 = row g+8, same k; a2 = row g,
  // k {2t+8, 2t+9}; a3 = row g+8, k {2t+8, 2t+9}, per 16-wide step. The
  // kernel fills register `reg` of step s from word a_word(s), pair
  // a_pair(s, reg) of the lane's code block: pair i of word w is the physical
  // elements 8w + 2i (low half) and 8w + 2i + 1 (high half) of the lane's 32
  // elements [32t, 32t + 32). The operand order must put exactly those there.
  for (int s = 0; s < 8; ++s)
    for (int t = 0; t < 4; ++t)
      for (int reg = 0; reg < 4; ++reg)
        for (int b = 0; b < 2; ++b) {
          const int k = 16 * s + 2 * t + 8 * (reg >> 1) + b;
          EXPECT_EQ(physical_k(k), 32 * t + 8 * a_word(s) + 2 * a_pair(s, reg) + b)
              << "s " << s << " t " << t << " reg " << reg << " b " << b;
          EXPECT_EQ(a_second_row(reg), (reg & 1) == 1);
        }
}

TEST(Sm90Layout, StageImageIsTheSwizzledKMajorOperand) {
  for (int bn : kTokenTiles) {
    std::vector<int> owner(size_t(stage_bytes(bn) / 2), -1);
    for (int n = 0; n < bn; ++n)
      for (int k = 0; k < kChunk; ++k) {
        const int off = stage_offset(bn, n, k);
        ASSERT_EQ(off % 2, 0);
        ASSERT_GE(off, 0);
        ASSERT_LT(off, stage_bytes(bn));
        ASSERT_EQ(owner[size_t(off / 2)], -1) << "bn " << bn << " n " << n << " k " << k;
        owner[size_t(off / 2)] = n * kChunk + k;
        // Canonical K-major 128B-swizzle layout, from its definition: half
        // k / 64 is a block of bn rows x 128 bytes; within it, row n at n * 128
        // and the 16-byte piece j at j XOR (n mod 8); the atom is 8 rows.
        const int half = k / 64, j = (k % 64) / 8;
        EXPECT_EQ(off, half * bn * 128 + (n / 8) * 1024 + (n % 8) * 128 + ((j ^ (n % 8)) * 16) + (k % 8) * 2);
      }
  }
}

TEST(Sm90Layout, PackedTensorIsStagesBackToBack) {
  const int bn = 64;
  for (int64_t kp : {384, 320, 64}) {  // three chunks; two and a tail; a tail alone
    EXPECT_EQ(chunk_count(kp), int((kp + 127) / 128));
    std::vector<bool> hit(size_t(3 * packed_tile_bytes(bn, kp) / 2), false);
    for (int64_t tile = 0; tile < 3; ++tile)
      for (int n = 0; n < bn; ++n)
        for (int64_t e = 0; e < kp; ++e) {
          const int64_t off = packed_offset(bn, kp, tile, n, e);
          const int c = int(e / kChunk), width = kp - c * kChunk >= kChunk ? kChunk : kTailChunk;
          ASSERT_EQ(chunk_width(kp, c), width);
          ASSERT_EQ(off, tile * bn * kp * 2 + c * stage_bytes(bn) + stage_offset(bn, n, logical_k(int(e % kChunk), width)));
          // A tail's stage is the first 64-wide half of a stage image.
          ASSERT_LT(off - tile * bn * kp * 2 - c * stage_bytes(bn), bn * width * 2);
          ASSERT_FALSE(hit[size_t(off / 2)]);
          hit[size_t(off / 2)] = true;
        }
    for (bool h : hit) ASSERT_TRUE(h) << "K " << kp << ": a packed byte no element fills";
  }
}

TEST(Sm90Layout, EightRowsOnIsOneKilobyteOn) {
  // GEMM1's epilogue addresses a thread's outputs (token rows 8 jj + r, r < 8,
  // one operand column) from the row-r offset plus 1024 jj.
  for (int bn : kTokenTiles)
    for (int64_t kp : {384, 320})
      for (int64_t e : {0, 1, 37, 127, 128, 300})
        for (int r = 0; r < 8; ++r)
          for (int jj = 0; jj < bn / 8; ++jj)
            ASSERT_EQ(packed_offset(bn, kp, 2, 8 * jj + r, e), packed_offset(bn, kp, 2, r, e) + 1024 * jj)
                << bn << " " << kp << " " << e << " " << r << " " << jj;
}

TEST(Sm90Layout, PieceWordsWriteTheElementwiseImage) {
  // The pack kernel's gather (each operand piece's four words) against the
  // element-by-element image, for a chunk and a tail.
  std::mt19937 rng(7);
  for (int width : {kChunk, kTailChunk})
    for (int bn : kTokenTiles) {
      const int n = bn - 3;
      std::vector<uint16_t> x(static_cast<size_t>(width));
      for (auto& v : x) v = uint16_t(rng());
      std::vector<uint8_t> want(size_t(stage_bytes(bn)), 0), got(want.size(), 0);
      for (int e = 0; e < width; ++e)
        std::memcpy(&want[size_t(stage_offset(bn, n, logical_k(e, width)))], &x[size_t(e)], 2);
      for (int p = 0; p < width / 8; ++p)
        for (int t = 0; t < 4; ++t)
          std::memcpy(&got[size_t(stage_offset(bn, n, 8 * p) + 4 * t)], &x[size_t(piece_word_element(p, t, width))], 4);
      EXPECT_EQ(got, want) << "bn " << bn << " width " << width;
    }
}

TEST(Sm90Layout, DescriptorFields) {
  // Every 1024-aligned stage below 224 KB, so that the stage plus its largest
  // step offset (24 KB + 96 at 192 tokens) stays a shared address below
  // 256 KB: the step only adds to the 14-bit start address, and must not
  // carry into the fields above it.
  for (uint32_t stage = 0; stage < 224 * 1024; stage += 1024)
    for (int bn : kTokenTiles)
      for (int s = 0; s < 8; ++s) {
        const uint64_t d = b_descriptor(stage, bn, s);
        EXPECT_EQ(d, b_descriptor(stage, bn, 0) + b_descriptor_step(bn, s));  // the kernel's per-step add
        EXPECT_EQ((d & 0x3FFF) << 4, stage + uint32_t((s / 4) * bn * 128 + (s % 4) * 32));
        EXPECT_EQ((d >> 16) & 0x3FFF, 1u);          // leading byte offset (unused when swizzled)
        EXPECT_EQ(((d >> 32) & 0x3FFF) << 4, 1024u);  // stride byte offset: 8 rows x 128 bytes
        EXPECT_EQ((d >> 49) & 7, 0u);               // base offset
        EXPECT_EQ(d >> 62, 1u);                     // 128-byte swizzle
        EXPECT_EQ((d >> 14) & 3, 0u);
        EXPECT_EQ((d >> 30) & 3, 0u);
        EXPECT_EQ((d >> 46) & 7, 0u);
        EXPECT_EQ((d >> 52) & 0x3FF, 0u);
      }
}

TEST(Sm90Layout, AccumulatorFragment) {
  // f32 D of m64nNk16 (PTX ISA): thread T = 32w + 4g + t, value v holds row
  // 16w + g + 8 ((v / 2) % 2), column 2t + v % 2 + 8 (v / 4).
  for (int g = 0; g < 8; ++g)
    for (int t = 0; t < 4; ++t)
      for (int v = 0; v < 64; ++v) {
        EXPECT_EQ(acc_m(g, v), g + 8 * ((v / 2) % 2));
        EXPECT_EQ(acc_n(t, v), 2 * t + v % 2 + 8 * (v / 4));
      }
  // Rows of the tile: each consumer warpgroup's 4 warps x 16 rows cover the
  // 128 rows once, and a thread's two rows are a pair (2i, 2i + 1).
  std::set<int> rows;
  for (int q = 0; q < kConsumerWarpgroups; ++q)
    for (int w = 0; w < 4; ++w)
      for (int m = 0; m < 16; ++m) {
        rows.insert(tile_row(q, w, m));
        if (m < 8) {
          EXPECT_EQ(tile_row(q, w, m) % 2, 0);
          EXPECT_EQ(tile_row(q, w, m + 8), tile_row(q, w, m) + 1);
        }
      }
  EXPECT_EQ(rows.size(), size_t(kTileRows));
  EXPECT_EQ(*rows.rbegin(), kTileRows - 1);
}

TEST(Sm90Layout, SharedMemoryCarveUp) {
  for (int bn : kTokenTiles)
    for (int kp : {256, 2944, 8192})
      for (int stages = 2; stages <= 8; ++stages)
        for (bool staged : {false, true}) {
        const SmemLayout l = smem_layout(bn, kp, stages, staged);
        EXPECT_EQ(l.act % 1024, 0);
        EXPECT_EQ(l.codes % 1024, 0);  // every stage 1024-aligned: the swizzle atom
        EXPECT_EQ(stage_bytes(bn) % 1024, 0);
        // Bulk copy destinations (16-byte aligned) that do not overlap.
        EXPECT_EQ(l.items % 128, 0);
        EXPECT_EQ(l.item_stride % 128, 0);
        EXPECT_EQ(l.item_cols % 16, 0);
        EXPECT_EQ(l.item_bias % 16, 0);
        EXPECT_GE(l.item_cols, kTileRows * kp / 32);
        EXPECT_GE(l.item_bias, l.item_cols + 4 * bn);
        EXPECT_GE(l.item_stride, l.item_bias + 2 * kTileRows);
        EXPECT_EQ(l.out % 16, 0);  // a bulk copy's source
        EXPECT_EQ(l.out, l.items + 2 * l.item_stride);
        EXPECT_EQ(l.bars % 8, 0);
        EXPECT_EQ(l.bars, l.out + (staged ? output_half_bytes(bn) : 0));
        EXPECT_EQ(l.item_index, l.bars + (2 * stages + 4) * 8);
        EXPECT_EQ(l.bytes, 1024 + l.item_index + 2 * 4);
        }
}

// GEMM1's tile rt, row pair q (w13 in kInterleavedChunkOrder), writes GEMM2's
// input column j = chunk_order_pair_column(I, q): where the packed layout keeps
// column j of token row n must be the tile's output half at stage_offset(n, q % 64).
TEST(Sm90Layout, Gemm1TileOutputsAreOneHalfOfAStage) {
  for (int bn : {16, 48, 144}) {
    for (int64_t ip : {int64_t(128), int64_t(320), int64_t(2880)}) {
      std::set<int64_t> offsets;
      for (int64_t tile = 0; tile < 2; ++tile)
        for (int64_t q = 0; q < ip; ++q) {
          const int rt = int(q / 64);
          const int64_t j = chunk_order_pair_column(ip, q);
          ASSERT_GE(j, 0);
          ASSERT_LT(j, ip);
          ASSERT_EQ(chunk_order_pair(ip, j), q);
          for (int n = 0; n < bn; n += 5) {
            const int64_t want = packed_offset(bn, ip, tile, n, j);
            ASSERT_EQ(output_half_offset(bn, ip, tile, rt) + stage_offset(bn, n, int(q % 64)), want)
                << "bn=" << bn << " I=" << ip << " q=" << q << " n=" << n;
            offsets.insert(want);
          }
        }
      EXPECT_EQ(offsets.size(), size_t(2 * ip * ((bn + 4) / 5)));  // distinct places
    }
  }
}

// ---- One tile through the emulated wgmma data path -----------------------------

// Pair i of a stored code word (the kernels' e2m1_pair_bits), as two values:
// the bf16 patterns carry the E2M1 value times 2^-126.
void extract_pair(uint32_t w, int i, double* lo, double* hi) {
  const uint32_t p = pair_bits::e2m1_pair_bits(w, i);
  auto value = [](uint32_t bits16) {
    const uint32_t f = bits16 << 16;
    float v;
    std::memcpy(&v, &f, 4);
    return std::ldexp(double(v), 126);
  };
  *lo = value(p & 0xFFFF);
  *hi = value(p >> 16);
}

double bf16_value(uint16_t b) { return double(bf16_to_float(b)); }

struct TileCase {
  int bn;
  int64_t kp;
  int64_t row0;  // the item's first weight row in a 384-row matrix (three layout tiles)
  int rows;      // 128, or 64 (an expert's last tile when its rows are 64 mod 128)
};

void PrintTo(const TileCase& c, std::ostream* os) {
  *os << "token tile " << c.bn << ", K " << c.kp << ", rows " << c.row0 << " + " << c.rows;
}

class Sm90DataPath : public ::testing::TestWithParam<TileCase> {};

TEST_P(Sm90DataPath, EmulatedWgmmaEqualsTheDenseProduct) {
  const auto [bn, kp, row0, item_rows] = GetParam();
  const int64_t rows = 3 * kTileRows, row_bytes = kp / 2, nc = chunk_count(kp);
  std::mt19937 rng(uint32_t(1000 + bn + kp + row0 + item_rows));
  // Weights: random codes, scales 2^-2 .. 2^2; x: small integers in bf16. All
  // products and sums are exact in double, so the comparison is exact.
  std::vector<uint8_t> codes(size_t(rows * row_bytes)), scales(size_t(rows * kp / 32));
  for (auto& c : codes) c = uint8_t(rng());
  for (auto& s : scales) s = uint8_t(125 + rng() % 5);
  std::vector<uint8_t> uploaded(codes.size()), uploaded_scales(scales.size());
  ASSERT_TRUE(swizzle_codes(WeightSwizzle::kMmaRowTiles128, codes.data(), rows, kp, uploaded.data()).ok());
  ASSERT_TRUE(swizzle_scales(WeightSwizzle::kMmaRowTiles128, scales.data(), rows, kp, uploaded_scales.data()).ok());
  const int tile = 1;  // token tile index in the packed tensor
  std::vector<float> x(size_t(bn * kp));
  for (auto& v : x) v = float(int(rng() % 17) - 8);
  std::vector<uint8_t> packed(size_t(2 * packed_tile_bytes(bn, kp)));
  for (int n = 0; n < bn; ++n)
    for (int64_t e = 0; e < kp; ++e) {
      const uint16_t b = float_to_bf16(x[size_t(n * kp + e)]);
      std::memcpy(&packed[size_t(packed_offset(bn, kp, tile, n, e))], &b, 2);
    }

  // D[tile row][n] as the kernel computes it.
  std::vector<double> d(size_t(kTileRows * bn), 0.0);
  const uint32_t stage_addr = 7 * 1024;  // where the producer put the stage (1024-aligned)
  const int first_group = int(row0 % kTileRows) / kGroupRows;
  const int64_t layout_tile = row0 - row0 % kTileRows;
  for (int c = 0; c < nc; ++c) {
    const int width = chunk_width(kp, c), steps = width / 16, group_bytes = group_chunk_bytes(width);
    // Producer: the item's groups of chunk c -> code stage (one copy, or two
    // halves when the item starts half-way into a layout tile or holds 64
    // rows, whose four groups go to both halves); the item's scale rows; the
    // packed stage (tile, c).
    std::vector<uint8_t> code_stage(kCodeStageBytes, 0xEE);
    const uint8_t* src = &uploaded[size_t(layout_tile * row_bytes + c * kCodeStageBytes + first_group * group_bytes)];
    if (first_group == 0 && item_rows == kTileRows) {
      std::memcpy(code_stage.data(), src, size_t(8 * group_bytes));
    } else {
      const uint8_t* second = item_rows < kTileRows ? src : src - 4 * group_bytes + kTileRows * row_bytes;
      std::memcpy(code_stage.data(), src, size_t(4 * group_bytes));
      std::memcpy(code_stage.data() + 4 * group_bytes, second, size_t(4 * group_bytes));
    }
    const uint8_t* scale_tile = &uploaded_scales[size_t(row0 * (kp / 32))];
    const uint8_t* stage = &packed[size_t(tile * packed_tile_bytes(bn, kp) + c * stage_bytes(bn))];
    for (int q = 0; 64 * q < item_rows; ++q)
      for (int w = 0; w < 4; ++w) {
        const int G = 4 * q + w;
        // A: 16 rows x `width` operand k of this warp, from its 32 lanes' registers.
        std::vector<double> a(size_t(16 * width), std::nan(""));
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane / 4, t = lane % 4;
          uint32_t words[2][4];
          const int word_bytes = width / 8;  // 16, or 8 for a tail
          std::memcpy(words[0], &code_stage[size_t(G * group_bytes + lane * word_bytes)], size_t(word_bytes));
          std::memcpy(words[1], &code_stage[size_t(G * group_bytes + group_bytes / 2 + lane * word_bytes)],
                      size_t(word_bytes));
          // As the kernel indexes the fragment scale order: the group's 32-row
          // block and subtile, rows 2g and 2g + 1 adjacent.
          const uint8_t* group_scales = scale_tile + (G >> 1) * 32 * (kp / 32) + 2 * (G & 1);
          const int at = width == kChunk ? 128 * c + 16 * g + 4 * t : 128 * c + 8 * g + 4 * (t / 2);
          const double sc[2] = {std::ldexp(1.0, int(group_scales[at]) - 127),
                                std::ldexp(1.0, int(group_scales[at + 1]) - 127)};
          for (int s = 0; s < steps; ++s)
            for (int reg = 0; reg < 4; ++reg) {
              const int second = a_second_row(reg) ? 1 : 0;
              double lo, hi;
              extract_pair(words[second][a_word(s)], a_pair(s, reg), &lo, &hi);
              // PTX A fragment: a0/a1 at k 2t, 2t+1; a2/a3 at k 2t+8, 2t+9; a1/a3 row g+8.
              const int m = g + 8 * (reg & 1), k = 16 * s + 2 * t + 8 * (reg >> 1);
              a[size_t(m * width + k)] = lo * sc[second];
              a[size_t(m * width + k + 1)] = hi * sc[second];
            }
        }
        for (double v : a) ASSERT_FALSE(std::isnan(v)) << "an A element no thread holds";
        // B through the descriptor: K-major, 128-byte swizzle (address bits
        // 4-6 XOR bits 7-9), rows n at (n / 8) * SBO + (n % 8) * 128.
        for (int s = 0; s < steps; ++s) {
          const uint64_t desc = b_descriptor(stage_addr, bn, s);
          const uint32_t start = uint32_t(desc & 0x3FFF) << 4, sbo = uint32_t((desc >> 32) & 0x3FFF) << 4;
          ASSERT_EQ(desc >> 62, 1u);
          for (int n = 0; n < bn; ++n)
            for (int kk = 0; kk < 16; ++kk) {
              const uint32_t addr = start + (n / 8) * sbo + (n % 8) * 128 + kk * 2;
              const uint32_t phys = addr ^ (((addr >> 7) & 7) << 4);
              ASSERT_LT(phys - stage_addr, uint32_t(bn * width * 2)) << "outside the copied stage";
              uint16_t bits;
              std::memcpy(&bits, stage + (phys - stage_addr), 2);
              const double bv = bf16_value(bits);
              for (int m = 0; m < 16; ++m)
                d[size_t(tile_row(q, w, m) * bn + n)] += a[size_t(m * width + 16 * s + kk)] * bv;
            }
        }
      }
  }
  // The dense product on the original bytes.
  for (int r = 0; r < item_rows; ++r)
    for (int n = 0; n < bn; ++n) {
      double ref = 0;
      for (int64_t e = 0; e < kp; ++e) {
        const int64_t row = row0 + r;
        const double wv = double(e2m1_to_float(e2m1_code_at(&codes[size_t(row * row_bytes)], e))) *
                          std::ldexp(1.0, int(scales[size_t(row * (kp / 32) + e / 32)]) - 127);
        ref += wv * double(x[size_t(n * kp + e)]);
      }
      ASSERT_EQ(d[size_t(r * bn + n)], ref) << "row " << r << " token " << n;
    }
}

INSTANTIATE_TEST_SUITE_P(Tiles, Sm90DataPath,
                         ::testing::Values(TileCase{16, 256, 128, 128}, TileCase{32, 128, 0, 128},
                                           TileCase{64, 128, 0, 128}, TileCase{64, 384, 128, 128},
                                           TileCase{128, 256, 128, 128}, TileCase{128, 384, 0, 128},
                                           // 64-wide tails, items half-way into a layout tile, 64-row items
                                           TileCase{16, 320, 64, 128}, TileCase{48, 64, 0, 128},
                                           TileCase{32, 192, 192, 64}, TileCase{160, 320, 256, 64},
                                           TileCase{64, 448, 64, 64}, TileCase{192, 2880, 128, 128}));

}  // namespace
}  // namespace mxmoe::sm90
