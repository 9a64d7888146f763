// The CUTLASS instantiation behind sm120_grouped_gemm.h: a ptr-array
// (grouped) block-scaled GEMM for SM120, A = MXFP8 rows (row-major [M, K]),
// B = MXFP4 weights (column-major, i.e. our [N, K] rows), D = bf16 [M, N].
// The configuration engines ship on SM120 (FlashInfer's, sglang's default
// there): 128 x 128 x 128 tiles, a 1 x 1 x 1 cluster, the cooperative
// ptr-array schedule, and an explicit stage count, since the automatic count
// can overflow SM120's shared memory (NVIDIA/cutlass#3096, flashinfer#2723).
#include "cuda/sm120/sm120_grouped_gemm.h"

#include <vector>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"

#if !defined(CUTLASS_ARCH_MMA_SM120_SUPPORTED) && defined(__CUDA_ARCH__)
#error "sm120 code must be compiled for sm_120a (the block-scaled MMA is arch-specific)"
#endif

namespace mxmoe::sm120::cutlass_types {

using namespace cute;

using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>;  // M, N, K per expert
using ElementA = cutlass::mx_float8_t<cutlass::float_e4m3_t>;
using ElementB = cutlass::mx_float4_t<cutlass::float_e2m1_t>;
using ElementD = cutlass::bfloat16_t;
using LayoutA = cutlass::layout::RowMajor;
using LayoutB = cutlass::layout::ColumnMajor;
using LayoutD = cutlass::layout::RowMajor;
// 16-byte global accesses: 16 E4M3, 32 packed E2M1, 8 bf16.
constexpr int kAlignA = 16, kAlignB = 32, kAlignD = 8;
constexpr int kStages = 2;
using TileShape = Shape<Int<kTileM>, Int<kTileN>, Int<kTileK>>;
using ClusterShape = Shape<_1, _1, _1>;

using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm120, cutlass::arch::OpClassBlockScaledTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD*, kAlignD, ElementD, LayoutD*,
    kAlignD, cutlass::epilogue::collective::EpilogueScheduleAuto>::CollectiveOp;
using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm120, cutlass::arch::OpClassBlockScaledTensorOp, ElementA, LayoutA*, kAlignA, ElementB, LayoutB*,
    kAlignB, float, TileShape, ClusterShape, cutlass::gemm::collective::StageCount<kStages>,
    cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>::CollectiveOp;
using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

static_assert(sizeof(typename Kernel::SharedStorage) <= 101376,
              "SM120 blocks have 101,376 bytes of shared memory: fewer stages or a smaller tile");
static_assert(kTileK % kKAlignment == 0, "a K tile covers whole scale atoms (4 MX blocks)");

}  // namespace mxmoe::sm120::cutlass_types

namespace mxmoe::sm120 {

using cutlass_types::Gemm;
using cutlass_types::Kernel;
using cutlass_types::ProblemShape;

bool can_implement(int groups, int m, int n, int k) {
  if (groups <= 0) return false;
  std::vector<typename ProblemShape::UnderlyingProblemShape> sizes(size_t(groups), {m, n, k});
  typename Gemm::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
  args.problem_shape = {groups, nullptr, sizes.data()};
  return Gemm::can_implement(args) == cutlass::Status::kSuccess;
}

int shared_memory_bytes() { return int(sizeof(typename Kernel::SharedStorage)); }

}  // namespace mxmoe::sm120

// The device kernel itself, so the SM120 MMA is in the binary (and its SASS
// can be checked) before the launcher that runs it exists.
template __global__ void cutlass::device_kernel<mxmoe::sm120::cutlass_types::Kernel>(
    CUTLASS_GRID_CONSTANT mxmoe::sm120::cutlass_types::Kernel::Params const);
