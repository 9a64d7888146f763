// Instances of the sm90 MXFP4 grouped GEMM (every token tile of is_token_tile; SwiGLU or
// bias-and-route epilogue) and their launcher.
#include "cuda/sm90/sm90_mxfp4_gemm.cuh"
#include "cuda/sm90/heuristics.h"
#include "cuda/sm90/sm90_mxfp4_gemm_launch.h"

namespace mxmoe::sm90 {
namespace {

template <int BN, bool kSwiglu>
cudaError_t launch(const GemmParams& p, int grid, bool overlap, cudaStream_t stream) {
  const int smem = smem_layout(BN, p.k, p.stages).bytes;
  return smxx::launch_kernel(sm90_mxfp4_moe_gemm<BN, kSwiglu>, dim3(unsigned(grid)), dim3(kThreads), size_t(smem),
                             stream, overlap, p);
}

template <int BN, bool kSwiglu>
cudaError_t allow_max_smem() {
  return cudaFuncSetAttribute(sm90_mxfp4_moe_gemm<BN, kSwiglu>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              kMaxDynamicSmem);
}

}  // namespace

cudaError_t launch_sm90_mxfp4_gemm(const GemmParams& p, int token_tile, bool swiglu, int grid, bool overlap,
                                   cudaStream_t stream) {
  if (p.stages < 2 || smem_layout(token_tile, p.k, p.stages).bytes > kMaxDynamicSmem) return cudaErrorInvalidValue;
  switch (token_tile) {
    case 16: return swiglu ? launch<16, true>(p, grid, overlap, stream) : launch<16, false>(p, grid, overlap, stream);
    case 32: return swiglu ? launch<32, true>(p, grid, overlap, stream) : launch<32, false>(p, grid, overlap, stream);
    case 48: return swiglu ? launch<48, true>(p, grid, overlap, stream) : launch<48, false>(p, grid, overlap, stream);
    case 64: return swiglu ? launch<64, true>(p, grid, overlap, stream) : launch<64, false>(p, grid, overlap, stream);
    case 96: return swiglu ? launch<96, true>(p, grid, overlap, stream) : launch<96, false>(p, grid, overlap, stream);
    case 128: return swiglu ? launch<128, true>(p, grid, overlap, stream) : launch<128, false>(p, grid, overlap, stream);
    case 160: return swiglu ? launch<160, true>(p, grid, overlap, stream) : launch<160, false>(p, grid, overlap, stream);
    case 192: return swiglu ? launch<192, true>(p, grid, overlap, stream) : launch<192, false>(p, grid, overlap, stream);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t init_sm90_mxfp4_gemm() {
  const cudaError_t errs[] = {allow_max_smem<16, true>(), allow_max_smem<16, false>(),
                              allow_max_smem<32, true>(), allow_max_smem<32, false>(),
                              allow_max_smem<48, true>(), allow_max_smem<48, false>(),
                              allow_max_smem<64, true>(), allow_max_smem<64, false>(),
                              allow_max_smem<96, true>(), allow_max_smem<96, false>(),
                              allow_max_smem<128, true>(), allow_max_smem<128, false>(),
                              allow_max_smem<160, true>(), allow_max_smem<160, false>(),
                              allow_max_smem<192, true>(), allow_max_smem<192, false>()};
  for (cudaError_t e : errs)
    if (e != cudaSuccess) return e;
  return cudaSuccess;
}

}  // namespace mxmoe::sm90
