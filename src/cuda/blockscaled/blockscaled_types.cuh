// CUTLASS's types for the arrays of GroupedGemmArgs: the per-group strides
// and the scale-factor layout of Sm1xxBlockScaledConfig<32>, which the SM100
// and SM120 ptr-array block-scaled mainloops both read (their files
// static_assert that their Internal* types are these). Only cute's layout
// headers: this compiles for any arch, so the problem descriptors and the
// emulated GEMM run on every GPU.
#pragma once

#include <cstdint>

#include "cute/tensor.hpp"  // first: cute headers see the overloads declared before them
#include "cutlass/detail/sm100_blockscaled_layout.hpp"
#include "cutlass/numeric_types.h"

namespace mxmoe::blockscaled {

using ScaleConfig = cutlass::detail::Sm1xxBlockScaledConfig<32>;
// (M, K, L) of a row-major A, (N, K, L) of a K-major B, (M, N, L) of a
// row-major D: one runtime stride (the row pitch in elements), unit stride
// along the row, no batch.
using RowStride = cute::Stride<int64_t, cute::Int<1>, cute::Int<0>>;
using StrideA = RowStride;
using StrideB = RowStride;
using StrideD = RowStride;
using LayoutSF = ScaleConfig::LayoutSF;
using ProblemShape = cute::Shape<int, int, int>;

using ElementA = cutlass::float_e4m3_t;
using ElementB = cutlass::float_e2m1_t;
using ElementSF = cutlass::float_ue8m0_t;
using ElementD = cutlass::bfloat16_t;

CUTE_HOST_DEVICE RowStride row_stride(int64_t pitch) {
  return RowStride{pitch, cute::Int<1>{}, cute::Int<0>{}};
}
CUTE_HOST_DEVICE LayoutSF layout_sfa(int m, int n, int k) {
  return ScaleConfig::tile_atom_to_shape_SFA(cute::make_shape(m, n, k, 1));
}
CUTE_HOST_DEVICE LayoutSF layout_sfb(int m, int n, int k) {
  return ScaleConfig::tile_atom_to_shape_SFB(cute::make_shape(m, n, k, 1));
}

}  // namespace mxmoe::blockscaled
