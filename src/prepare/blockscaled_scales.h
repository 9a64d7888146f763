// E8M0 scales in the layout the Blackwell block-scaled MMAs read (CUTLASS's
// Sm1xxBlockScaledConfig<32>, SM100 and SM120 alike), for an operand of
// `rows` rows (tokens of A, or output features of B) and `k_blocks` MX blocks
// of 32 along K.
//
// The unit is a 512-byte atom holding the scales of 128 rows x 4 blocks: row
// r = 32 * q + p (p < 32, q < 4) and block c < 4 of the atom sit at byte
// 16 p + 4 q + c, so one 32-bit word holds one row's four blocks (the tensor
// memory's word) and a row's words are 16 bytes apart across the 32-row
// groups. Atoms run along K first: atom (R, C) of rows [128 R, 128 R + 128)
// and blocks [4 C, 4 C + 4) starts at 512 (R * ceil(k_blocks / 4) + C). Rows
// past `rows` up to a multiple of 128 and blocks past `k_blocks` up to a
// multiple of 4 are padding; pack_blockscaled_scales writes 127 (scale 1.0)
// there, never 0xFF (NaN): a padded element meets a zero code either way.
#pragma once

#include <cstdint>

#include "mxmoe/status.h"

namespace mxmoe {

inline constexpr int64_t kScaleAtomRows = 128;
inline constexpr int64_t kScaleAtomBlocks = 4;
inline constexpr int64_t kScaleAtomBytes = kScaleAtomRows * kScaleAtomBlocks;

inline constexpr int64_t blockscaled_k_atoms(int64_t k_blocks) {
  return (k_blocks + kScaleAtomBlocks - 1) / kScaleAtomBlocks;
}
inline constexpr int64_t blockscaled_scale_bytes(int64_t rows, int64_t k_blocks) {
  return (rows + kScaleAtomRows - 1) / kScaleAtomRows * blockscaled_k_atoms(k_blocks) * kScaleAtomBytes;
}
// Byte of the scale of row r, block b.
inline constexpr int64_t blockscaled_scale_offset(int64_t r, int64_t b, int64_t k_blocks) {
  const int64_t atom = r / kScaleAtomRows * blockscaled_k_atoms(k_blocks) + b / kScaleAtomBlocks;
  return atom * kScaleAtomBytes + 16 * (r % 32) + 4 * (r % kScaleAtomRows / 32) + b % kScaleAtomBlocks;
}

// The inverse: byte `o` of the packed scales holds row *row, block *block;
// where that lies past (rows, k_blocks) the byte is padding (127).
inline constexpr void blockscaled_scale_source(int64_t k_blocks, int64_t o, int64_t* row, int64_t* block) {
  const int64_t atom = o / kScaleAtomBytes, in = o % kScaleAtomBytes, k_atoms = blockscaled_k_atoms(k_blocks);
  *row = atom / k_atoms * kScaleAtomRows + 32 * (in % 16 / 4) + in / 16;
  *block = atom % k_atoms * kScaleAtomBlocks + in % 4;
}

// Writes the dense scales (rows x k_blocks, rows `row_stride` bytes apart)
// into `out`, blockscaled_scale_bytes(rows, k_blocks) bytes, padding included.
Status pack_blockscaled_scales(const uint8_t* dense, int64_t rows, int64_t k_blocks, int64_t row_stride,
                               uint8_t* out);

}  // namespace mxmoe
