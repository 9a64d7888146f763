// .npy files (NumPy format 1.0/2.0/3.0): float32 C-order arrays in and out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mxmoe/status.h"

namespace mxmoe {

struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

// Reads a little-endian float32 ('<f4'), C-order array. Errors name the file and
// the problem: bad magic, truncated header or data, wrong dtype, Fortran order.
Status read_npy_f32(const std::string& path, NpyArray* out);

// read_npy_f32, then checks the array is 2-D [rows, cols] (e.g. X [T, H]).
Status read_npy_f32_matrix(const std::string& path, int64_t cols, NpyArray* out);

// Writes a version 1.0 file (header padded to 64 bytes), '<f4', C order.
Status write_npy_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape);

}  // namespace mxmoe
