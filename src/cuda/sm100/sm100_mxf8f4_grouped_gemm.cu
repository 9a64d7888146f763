// The SM100 instance of the Blackwell grouped GEMM (sm1xx_mxf8f4_grouped_gemm.cuh),
// in the configuration engines ship on SM100: one-SM UMMA of M = 128, N = 128,
// K tile 128 (KernelPtrArrayTmaWarpSpecialized1SmMxf8f6f4Sm100), scales
// copied into tensor memory, and as many stages as shared memory holds
// beside the epilogue's.
#include "cuda/sm100/sm100_grouped_gemm.h"

#include "cuda/sm1xx/sm1xx_mxf8f4_grouped_gemm.cuh"

#if !defined(CUTLASS_ARCH_MMA_SM100_SUPPORTED) && defined(__CUDA_ARCH__)
#error "sm100 code must be compiled for sm_100a (tcgen05 block-scaled MMA is arch-specific)"
#endif

namespace mxmoe::sm100 {
namespace {

using namespace sm1xx;
using TileShape = cute::Shape<cute::Int<kTileM>, cute::Int<kTileN>, cute::Int<kTileK>>;
using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;
using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm100, cutlass::arch::OpClassBlockScaledTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD*, kAlignD, ElementD, LayoutD*,
    kAlignD, cutlass::epilogue::PtrArrayTmaWarpSpecialized1Sm>::CollectiveOp;
using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm100, cutlass::arch::OpClassBlockScaledTensorOp, ElementA, LayoutA*, kAlignA, ElementB, LayoutB*,
    kAlignB, float, TileShape, ClusterShape, cutlass::gemm::collective::StageCountAutoCarveout<int(sizeof(typename Epilogue::SharedStorage))>,
    cutlass::gemm::KernelPtrArrayTmaWarpSpecialized1SmMxf8f6f4Sm100>::CollectiveOp;
using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

static_assert(sizeof(typename Kernel::SharedStorage) <= 232448,
              "SM100 blocks have 232,448 bytes of shared memory: fewer stages or a smaller tile");
static_assert(kTileK % kKAlignment == 0 && kKAlignment % 128 == 0,
              "a K tile covers whole scale atoms (4 MX blocks of 32)");

}  // namespace

const blockscaled::GroupedGemm& grouped_gemm() { return sm1xx::grouped_gemm<Gemm>("sm100 CUTLASS"); }
bool can_implement(int groups, int m, int n, int k) { return sm1xx::can_implement<Gemm>(groups, m, n, k); }
int shared_memory_bytes() { return int(sizeof(typename Kernel::SharedStorage)); }
// Taking the address compiles the kernel into the binary.
const void* kernel() { return reinterpret_cast<const void*>(&cutlass::device_kernel<Kernel>); }

}  // namespace mxmoe::sm100
