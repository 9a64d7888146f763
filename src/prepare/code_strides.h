// Byte strides of the fragment-order code layouts (WeightSwizzle) as the GEMMs
// walk them: the 16-row group g counted from a 128-row-aligned row starts at
// (g / 8) * tile + (g % 8) * group bytes from it, and the group's 128-K chunk
// c (1 KB, [r][lane][16 bytes]) at chunk * c from there. A 64-wide tail chunk
// (K % 128 == 64; 512 bytes, [r][lane][8 bytes]) of group g is at
// (g / 8) * tile + chunk * (K / 128) + (g % 8) * tail_group.
#pragma once

#include <cstdint>

#include "mxmoe/prepare.h"

namespace mxmoe {

struct CodeStrides {
  int64_t tile, group, chunk, tail_group;
};

// row_bytes: K / 2 of the tensor.
inline CodeStrides code_strides(WeightSwizzle swizzle, int64_t row_bytes) {
  if (swizzle == WeightSwizzle::kMmaRowTiles128) return {128 * row_bytes, 1024, 8192, 512};
  return {128 * row_bytes, 16 * row_bytes, 1024, 16 * row_bytes};  // kMmaRowGroups16
}

}  // namespace mxmoe
