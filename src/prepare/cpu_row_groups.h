// The host executor of WeightSwizzle::kCpuRowGroups16 (include/mxmoe/prepare.h)
// for one 16-row group, reading its rows wherever they lie: from a dense
// stack (swizzle_codes, swizzle_scales) or straight from a checkpoint's rows
// (the cpu backend's packing, src/cpu/cpu_pack.h). Whole 16-byte vectors,
// never single nibbles: a row's 16 bytes of one MX block become its 16 bytes
// of the group's block with a few shifts, masks and one byte interleave, and
// a group's scales are 16 x 16 byte transposes.
#pragma once

#include <cstdint>

namespace mxmoe {

// The group's codes: `rows[r]` holds row r's `cols` elements (cols / 2 bytes,
// cols % 32 == 0); writes the group's 8 * cols bytes at `out`.
void cpu16_group_codes(const uint8_t* const rows[16], int64_t cols, uint8_t* out);

// The group's scales: `rows[r]` holds row r's `blocks` E8M0 bytes; writes the
// group's 16 * blocks bytes at `out`, [block][row]. Returns whether any byte
// was 0xFF (E8M0 NaN), so that a caller checks them in the same pass.
bool cpu16_group_scales(const uint8_t* const rows[16], int64_t blocks, uint8_t* out);

}  // namespace mxmoe
