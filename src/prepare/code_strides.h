// Byte strides of the fragment-order code layouts (WeightSwizzle) as the GEMMs
// walk them: the 16-row group g counted from a 128-row-aligned row starts at
// (g / 8) * tile + (g % 8) * group bytes from it, and the group's 128-K chunk
// c (1 KB, [r][lane][16 bytes]) at chunk * c from there.
#pragma once

#include <cstdint>

#include "mxmoe/prepare.h"

namespace mxmoe {

struct CodeStrides {
  int64_t tile, group, chunk;
};

// row_bytes: K / 2 of the tensor.
inline CodeStrides code_strides(WeightSwizzle swizzle, int64_t row_bytes) {
  if (swizzle == WeightSwizzle::kMmaRowTiles128) return {128 * row_bytes, 1024, 8192};
  return {128 * row_bytes, 16 * row_bytes, 1024};  // kMmaRowGroups16
}

}  // namespace mxmoe
