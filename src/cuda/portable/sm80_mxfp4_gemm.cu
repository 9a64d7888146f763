// Instances of the MXFP4 grouped GEMM (token tiles 8, 32, 64; SwiGLU or
// bias-and-route epilogue) and their launcher.
#include <atomic>

#include "cuda/portable/sm80_mxfp4_gemm.cuh"
#include "cuda/portable/pdl.cuh"
#include "cuda/portable/sm80_mxfp4_gemm_launch.h"

namespace mxmoe::portable {

namespace {
template <int NT, bool kSwiglu>
cudaError_t launch(const GemmParams& p, int64_t max_tiles, bool overlap, cudaStream_t stream) {
  constexpr int rows = GemmConfig<NT>::kRowsPerBlock;
  const dim3 grid(unsigned(max_tiles), unsigned((p.n_rows + rows - 1) / rows));
  const int smem = GemmConfig<NT>::kSplitK ? act_stage_bytes(p.k) : 0;
  if (smem > kMaxActStageBytes) return cudaErrorInvalidValue;
  // Static (8 KB of split-K sums) plus dynamic shared memory above 48 KB needs
  // an opt-in, once per instance and size (a host-side attribute, legal while
  // a stream is being captured).
  static std::atomic<int> opted_in{0};
  if (smem > opted_in.load()) {
    const cudaError_t err = cudaFuncSetAttribute(sm80_mxfp4_moe_gemm<NT, kSwiglu>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err != cudaSuccess) return err;
    opted_in.store(smem);
  }
  return launch_kernel(sm80_mxfp4_moe_gemm<NT, kSwiglu>, grid, dim3(GemmConfig<NT>::kWarps * 32), size_t(smem),
                       stream, overlap, p);
}
}  // namespace

cudaError_t launch_mxfp4_moe_gemm(const GemmParams& p, int token_tile, bool swiglu,
                                  int64_t max_tiles, bool overlap, cudaStream_t stream) {
  const auto a = [&](auto f) { return f(p, max_tiles, overlap, stream); };
  switch (token_tile) {
    case 8: return swiglu ? a(launch<1, true>) : a(launch<1, false>);
    case 32: return swiglu ? a(launch<4, true>) : a(launch<4, false>);
    case 64: return swiglu ? a(launch<8, true>) : a(launch<8, false>);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace mxmoe::portable
