// The SM120 instance of the Blackwell grouped GEMM (sm1xx_mxf8f4_grouped_gemm.cuh),
// in the configuration engines ship on SM120 (FlashInfer's, sglang's default
// there): 128 x 128 x 128 tiles, the cooperative ptr-array schedule, and an
// explicit stage count, since the automatic count can overflow SM120's
// 101,376 bytes of shared memory (NVIDIA/cutlass#3096, flashinfer#2723).
#include "cuda/sm120/sm120_grouped_gemm.h"

#include "cuda/sm1xx/sm1xx_mxf8f4_grouped_gemm.cuh"

#if !defined(CUTLASS_ARCH_MMA_SM120_SUPPORTED) && defined(__CUDA_ARCH__)
#error "sm120 code must be compiled for sm_120a (the block-scaled MMA is arch-specific)"
#endif

namespace mxmoe::sm120 {
namespace {

using namespace sm1xx;
using TileShape = cute::Shape<cute::Int<kTileM>, cute::Int<kTileN>, cute::Int<kTileK>>;
using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;
using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm120, cutlass::arch::OpClassBlockScaledTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD*, kAlignD, ElementD, LayoutD*,
    kAlignD, cutlass::epilogue::collective::EpilogueScheduleAuto>::CollectiveOp;
using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm120, cutlass::arch::OpClassBlockScaledTensorOp, ElementA, LayoutA*, kAlignA, ElementB, LayoutB*,
    kAlignB, float, TileShape, ClusterShape, cutlass::gemm::collective::StageCount<2>,
    cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>::CollectiveOp;
using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

static_assert(sizeof(typename Kernel::SharedStorage) <= 101376,
              "SM120 blocks have 101,376 bytes of shared memory: fewer stages or a smaller tile");
static_assert(kTileK % kKAlignment == 0 && kKAlignment % 128 == 0,
              "a K tile covers whole scale atoms (4 MX blocks of 32)");

}  // namespace

const blockscaled::GroupedGemm& grouped_gemm() { return sm1xx::grouped_gemm<Gemm>("sm120 CUTLASS"); }
bool can_implement(int groups, int m, int n, int k) { return sm1xx::can_implement<Gemm>(groups, m, n, k); }
int shared_memory_bytes() { return int(sizeof(typename Kernel::SharedStorage)); }
// Taking the address compiles the kernel into the binary.
const void* kernel() { return reinterpret_cast<const void*>(&cutlass::device_kernel<Kernel>); }

}  // namespace mxmoe::sm120
