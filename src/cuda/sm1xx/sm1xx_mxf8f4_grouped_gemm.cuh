// The CUTLASS 4.x ptr-array (grouped) block-scaled GEMM both Blackwell
// backends use: A = MXFP8 rows (E4M3, E8M0 per 32; row-major [M, K]), B =
// MXFP4 weights (E2M1, E8M0 per 32; column-major, i.e. our [N, K] rows), fp32
// accumulation, D = bf16 [M, N] row-major, one problem per expert: the
// operand types and checks both arch files share. Each arch file builds its
// own kernel (arch tag, schedules, tile, stages) and is compiled for its own
// target only (sm_100a or sm_120a: the block-scaled MMAs are arch-specific).
// Only the arch files include this.
#pragma once

#include <type_traits>
#include <vector>

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "cuda/blockscaled/blockscaled_types.cuh"
#include "cuda/blockscaled/grouped_gemm_args.h"
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

// Whether `Gemm` reads the arrays of GroupedGemmArgs in the types
// launch_grouped_problems writes them in (blockscaled_types.cuh).
template <class Gemm>
constexpr bool reads_grouped_gemm_args() {
  using K = typename Gemm::GemmKernel;
  using M = typename K::CollectiveMainloop;
  return std::is_same_v<typename K::InternalStrideA, blockscaled::StrideA> &&
         std::is_same_v<typename K::InternalStrideB, blockscaled::StrideB> &&
         std::is_same_v<typename K::InternalStrideD, blockscaled::StrideD> &&
         std::is_same_v<typename M::InternalLayoutSFA, blockscaled::LayoutSF> &&
         std::is_same_v<typename M::InternalLayoutSFB, blockscaled::LayoutSF> &&
         std::is_same_v<typename ProblemShape::UnderlyingProblemShape, blockscaled::ProblemShape>;
}

// CUTLASS's arguments over the device arrays of `a`: the problem sizes are
// read on the device only (no host copy: the scheduler sizes its persistent
// grid by `sms`), D = 1.0 * A B^T (no C).
template <class Gemm>
typename Gemm::Arguments grouped_arguments(const blockscaled::GroupedGemmArgs& a, int device, int sms) {
  typename Gemm::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
  args.problem_shape = {a.groups, static_cast<typename ProblemShape::UnderlyingProblemShape*>(a.problem_shapes),
                        nullptr};
  auto& m = args.mainloop;
  m.ptr_A = reinterpret_cast<decltype(m.ptr_A)>(a.a);
  m.dA = static_cast<decltype(m.dA)>(a.stride_a);
  m.ptr_B = reinterpret_cast<decltype(m.ptr_B)>(a.b);
  m.dB = static_cast<decltype(m.dB)>(a.stride_b);
  m.ptr_SFA = reinterpret_cast<decltype(m.ptr_SFA)>(a.sfa);
  m.layout_SFA = static_cast<decltype(m.layout_SFA)>(a.layout_sfa);
  m.ptr_SFB = reinterpret_cast<decltype(m.ptr_SFB)>(a.sfb);
  m.layout_SFB = static_cast<decltype(m.layout_SFB)>(a.layout_sfb);
  auto& e = args.epilogue;
  e.thread.alpha = 1.0f;
  e.thread.beta = 0.0f;
  e.ptr_C = nullptr;
  e.dC = static_cast<decltype(e.dC)>(a.stride_d);
  e.ptr_D = reinterpret_cast<decltype(e.ptr_D)>(a.d);
  e.dD = static_cast<decltype(e.dD)>(a.stride_d);
  args.hw_info.device_id = device;
  args.hw_info.sm_count = sms;
  return args;
}

// CUTLASS's workspace for `groups` problems (its per-group TMA descriptors
// and the scheduler's state), which depends on nothing the device writes.
template <class Gemm>
size_t grouped_workspace_bytes(int groups, int sms) {
  blockscaled::GroupedGemmArgs a;
  a.groups = groups;
  return Gemm::get_workspace_size(grouped_arguments<Gemm>(a, 0, sms));
}

// initialize (host: kernel parameters and TMA descriptors; the workspace's
// set-up enqueued on `stream`) and run on `stream`. Errors name the arch
// ("sm100: ...").
template <class Gemm>
Status run_grouped(const blockscaled::GroupedGemmArgs& a, void* workspace, size_t bytes, int sms,
                   cudaStream_t stream) {
  constexpr int arch = Gemm::GemmKernel::ArchTag::kMinComputeCapability;
  int device = 0;
  if (const cudaError_t err = cudaGetDevice(&device); err != cudaSuccess)
    return Status::CudaError(fmt::format("sm{}: cudaGetDevice: {}", arch, cudaGetErrorString(err)));
  const typename Gemm::Arguments args = grouped_arguments<Gemm>(a, device, sms);
  if (Gemm::get_workspace_size(args) > bytes)
    return Status::InvalidArgument(fmt::format("sm{}: GEMM workspace of {} bytes, {} needed", arch, bytes,
                                               Gemm::get_workspace_size(args)));
  Gemm gemm;
  cutlass::Status st = gemm.initialize(args, workspace, stream);
  if (st == cutlass::Status::kSuccess) st = gemm.run(stream);
  if (st != cutlass::Status::kSuccess)
    return Status::CudaError(fmt::format("sm{}: CUTLASS grouped GEMM: {} ({})", arch, cutlassGetStatusString(st),
                                         cudaGetErrorString(cudaGetLastError())));
  return Status::Ok();
}

// `Gemm` as the pipeline's GroupedGemm, called `name`.
template <class Gemm>
const blockscaled::GroupedGemm& grouped_gemm(const char* name) {
  static_assert(reads_grouped_gemm_args<Gemm>(),
                "the GEMM must read the descriptor arrays in the types launch_grouped_problems writes");
  static const blockscaled::GroupedGemm gemm{name, grouped_workspace_bytes<Gemm>, run_grouped<Gemm>};
  return gemm;
}

}  // namespace mxmoe::sm1xx
