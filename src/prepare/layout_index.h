// Where each byte of a prepared tensor comes from: the plan's layouts as pure
// index functions, read by both executors of a plan. The host executor
// (prepare_slice, swizzle_codes, swizzle_scales, pack_blockscaled_scales)
// and the device one (src/cuda/prepare/) call these, so a layout changes here
// once. All are constexpr: nvcc compiles them for the device as well
// (--expt-relaxed-constexpr).
//
// Each function answers for one destination offset ("gather" form): a device
// thread per destination word needs no scatter and writes every byte once,
// padding included.
#pragma once

#include <cstdint>

#include "mxmoe/moe.h"
#include "prepare/blockscaled_scales.h"
#include "prepare/pair_bits.h"

namespace mxmoe::layout {

// ---- w13 rows -----------------------------------------------------------------

// The inverse of w13_gate_row / w13_up_row: the intermediate column `*j`
// and half (`*up`) that row `row` (< 2I) of layout `l` holds.
constexpr void w13_row_column(W13Layout l, int64_t I, int64_t row, int64_t* j, bool* up) {
  switch (l) {
    case W13Layout::kInterleaved: *j = row / 2; *up = row % 2 != 0; return;
    case W13Layout::kStackedUpGate: *up = row < I; *j = *up ? row : row - I; return;
    case W13Layout::kStackedGateUp: *up = row >= I; *j = *up ? row - I : row; return;
    case W13Layout::kInterleavedChunkOrder: *j = chunk_order_pair_column(I, row / 2); *up = row % 2 != 0; return;
    case W13Layout::kBlockedGateUp16: *j = row / 32 * 16 + row % 16; *up = row % 32 >= 16; return;
  }
  *j = -1;
  *up = false;
}

// The source row of w13 (layout `src_layout`, `src_I` columns) that row `row`
// of a prepared expert (layout `dst_layout`, `dst_I` columns starting at
// source column `j0`) copies, or -1 where that row is padding (its column
// lies at or past `j_end`).
constexpr int64_t w13_source_row(W13Layout dst_layout, int64_t dst_I, int64_t row, W13Layout src_layout,
                                 int64_t src_I, int64_t j0, int64_t j_end) {
  int64_t j = 0;
  bool up = false;
  w13_row_column(dst_layout, dst_I, row, &j, &up);
  if (j0 + j >= j_end) return -1;
  return up ? w13_up_row(src_layout, src_I, j0 + j) : w13_gate_row(src_layout, src_I, j0 + j);
}

// ---- codes in mma fragment order (WeightSwizzle::kMmaRowGroups16, kMmaRowTiles128) ----

// Byte `o` of a 16-row group in kMmaRowGroups16 order (rows of `row_bytes`,
// a multiple of 32): the group row (*row) and byte of that row (*byte) it
// holds. Full 128-K chunks are 1 KB [r][lane = 4g + t][16 bytes], a 64-wide
// tail 512 bytes [r][lane][8 bytes]; row 2g + r, bytes of MX block t.
constexpr void mma16_source(int64_t row_bytes, int64_t o, int* row, int64_t* byte) {
  const int64_t nfull = row_bytes / 64;
  if (o < nfull * 1024) {
    const int64_t c = o / 1024, in = o % 1024, lane = in % 512 / 16;
    *row = int(2 * (lane / 4) + in / 512);
    *byte = c * 64 + lane % 4 * 16 + in % 16;
    return;
  }
  const int64_t in = o - nfull * 1024, lane = in % 256 / 8;
  *row = int(2 * (lane / 4) + in / 256);
  *byte = nfull * 64 + lane % 4 * 8 + in % 8;
}

// Byte `o` of a 128-row tile in kMmaRowTiles128 order: the 16-row group
// (*group) and byte of its kMmaRowGroups16 image (*group_byte). Chunk c of the
// tile is its 8 groups' 1 KB images, [c][group][1 KB]; the tails follow,
// [group][512 bytes].
constexpr void tile128_source(int64_t row_bytes, int64_t o, int* group, int64_t* group_byte) {
  const int64_t chunks = row_bytes / 64;
  if (o < chunks * 8192) {
    *group = int(o % 8192 / 1024);
    *group_byte = o / 8192 * 1024 + o % 1024;
    return;
  }
  const int64_t in = o - chunks * 8192;
  *group = int(in / 512);
  *group_byte = chunks * 1024 + in % 512;
}

// Byte `o` of `rows` x `row_bytes` codes in fragment order `swizzle`: the dense
// row and byte it holds. kMmaRowTiles128 needs rows % 128 == 0.
constexpr void fragment_code_source(WeightSwizzle swizzle, int64_t row_bytes, int64_t o, int64_t* row,
                                    int64_t* byte) {
  int64_t first = 0, in = o;
  if (swizzle == WeightSwizzle::kMmaRowTiles128) {
    int group = 0;
    first = o / (128 * row_bytes) * 128;
    tile128_source(row_bytes, o % (128 * row_bytes), &group, &in);
    first += 16 * group;
  } else {
    first = o / (16 * row_bytes) * 16;
    in = o % (16 * row_bytes);
  }
  int r = 0;
  mma16_source(row_bytes, in, &r, byte);
  *row = first + r;
}

// Dense word (8 codes, element j in bits [4j, 4j + 4)) -> its stored word:
// each pair (2i, 2i + 1) as the bf16x2 pattern pair_bits.h reads back.
constexpr uint32_t permute_word_bits(uint32_t dense) {
  uint32_t out = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t lo = (dense >> (8 * i)) & 0xF, hi = (dense >> (8 * i + 4)) & 0xF;
    const uint32_t t = (((lo & 0x8) << 12) | ((lo & 0x7) << 6)) | ((((hi & 0x8) << 12) | ((hi & 0x7) << 6)) << 16);
    for (int p = 0; p < 32; ++p)  // the bits of kPatternBits, as a scalar the device code can read
      if ((pair_bits::kPatternMask >> p) & 1u) out |= ((t >> p) & 1u) << pair_bits::stored_bit(i, p);
  }
  return out;
}

// ---- the cpu order (WeightSwizzle::kCpuRowGroups16), read back -------------------

// The dense word at byte `x` (a multiple of 4) of row `r` (< 16) of a 16-row
// group stored in kCpuRowGroups16 order at `group`: its 8 codes (elements
// 2x .. 2x + 7, one MX block's) gathered from their nibbles. Element k of the
// group's row r is the low (k % 32 < 16) or high nibble of byte
// 256 (k / 32) + 64 ((k % 16) / 4) + 4 r + k % 4.
constexpr uint32_t cpu16_dense_word(const uint8_t* group, int r, int64_t x) {
  uint32_t v = 0;
  for (int j = 0; j < 8; ++j) {
    const int64_t k = 2 * x + j, kb = k % 32;
    const uint8_t byte = group[256 * (k / 32) + 64 * (kb % 16 / 4) + 4 * r + kb % 4];
    v |= uint32_t(kb < 16 ? byte & 0xF : byte >> 4) << (4 * j);
  }
  return v;
}

// The byte of a 16-row group's kCpuRowGroups16 scales ([block][row]) that
// holds row r's scale of MX block b.
constexpr int64_t cpu16_scale_byte(int r, int64_t b) { return 16 * b + r; }

// ---- scales ---------------------------------------------------------------------

// Byte `o` of `blocks` scale bytes a row in the fragment scale order
// (swizzle_scales): the dense row and MX block it holds. A 32-row block keeps
// its dense bytes; its 128-K chunk c is 128 bytes [g (8)][t (4)][m (2)][r (2)],
// a 64-wide tail 64 bytes [g][t (2)][m][r]: row 16m + 2g + r, block 4c + t.
constexpr void fragment_scale_source(int64_t blocks, int64_t o, int64_t* row, int64_t* block) {
  const int64_t first = o / (32 * blocks) * 32, in = o % (32 * blocks), nfull = blocks / 4;
  const int64_t tb = in < nfull * 128 ? 4 : 2;  // blocks of this chunk
  const int64_t c = in / 128, at = in < nfull * 128 ? in % 128 : in - nfull * 128;
  const int64_t r = at % 2, m = at / 2 % 2, t = at / 4 % tb, g = at / 4 / tb;
  *row = first + 16 * m + 2 * g + r;
  *block = (in < nfull * 128 ? 4 * c : 4 * nfull) + t;
}

// The Blackwell block-scaled scale atoms: blockscaled_scale_source in
// blockscaled_scales.h.

}  // namespace mxmoe::layout
