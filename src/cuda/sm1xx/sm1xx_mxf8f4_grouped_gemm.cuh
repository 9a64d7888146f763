// The CUTLASS 4.x ptr-array (grouped) block-scaled GEMM both Blackwell
// backends use: A = MXFP8 rows (E4M3, E8M0 per 32; row-major [M, K]), B =
// MXFP4 weights (E2M1, E8M0 per 32; column-major, i.e. our [N, K] rows), fp32
// accumulation, D = bf16 [M, N] row-major, one problem per expert: the
// operand types and checks both arch files share. Each arch file builds its
// own kernel (arch tag, schedules, tile, stages) and is compiled for its own
// target only (sm_100a or sm_120a: the block-scaled MMAs are arch-specific).
// Only the arch files include this.
#pragma once

#include <vector>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"

namespace mxmoe::sm1xx {

using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;  // M, N, K per expert
using ElementA = cutlass::mx_float8_t<cutlass::float_e4m3_t>;
using ElementB = cutlass::mx_float4_t<cutlass::float_e2m1_t>;
using ElementD = cutlass::bfloat16_t;
using LayoutA = cutlass::layout::RowMajor;
using LayoutB = cutlass::layout::ColumnMajor;
using LayoutD = cutlass::layout::RowMajor;
// 16-byte global accesses: 16 E4M3, 32 packed E2M1, 8 bf16.
inline constexpr int kAlignA = 16, kAlignB = 32, kAlignD = 8;

// CUTLASS's host-side checks (operand alignment for the TMA copies) of
// `Gemm` for `groups` problems of m x n x k.
template <class Gemm>
bool can_implement(int groups, int m, int n, int k) {
  if (groups <= 0) return false;
  std::vector<typename ProblemShape::UnderlyingProblemShape> sizes(size_t(groups), {m, n, k});
  typename Gemm::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
  args.problem_shape = {groups, nullptr, sizes.data()};
  return Gemm::can_implement(args) == cutlass::Status::kSuccess;
}

}  // namespace mxmoe::sm1xx
