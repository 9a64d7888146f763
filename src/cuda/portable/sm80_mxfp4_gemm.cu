// Instances of the MXFP4 grouped GEMM (token tiles 8, 32, 64; SwiGLU or
// bias-and-route epilogue) and their launcher.
#include "cuda/portable/sm80_mxfp4_gemm.cuh"
#include "cuda/portable/sm80_mxfp4_gemm_launch.h"

namespace mxmoe::portable {

namespace {
template <int NT, bool kSwiglu>
cudaError_t launch(const GemmParams& p, int64_t max_tiles, cudaStream_t stream) {
  constexpr int rows = GemmConfig<NT>::kRowsPerBlock;
  const dim3 grid(unsigned(max_tiles), unsigned((p.n_rows + rows - 1) / rows));
  sm80_mxfp4_moe_gemm<NT, kSwiglu><<<grid, GemmConfig<NT>::kWarps * 32, 0, stream>>>(p);
  return cudaGetLastError();
}
}  // namespace

cudaError_t launch_mxfp4_moe_gemm(const GemmParams& p, int token_tile, bool swiglu,
                                  int64_t max_tiles, cudaStream_t stream) {
  switch (token_tile) {
    case 8: return swiglu ? launch<1, true>(p, max_tiles, stream) : launch<1, false>(p, max_tiles, stream);
    case 32: return swiglu ? launch<4, true>(p, max_tiles, stream) : launch<4, false>(p, max_tiles, stream);
    case 64: return swiglu ? launch<8, true>(p, max_tiles, stream) : launch<8, false>(p, max_tiles, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace mxmoe::portable
