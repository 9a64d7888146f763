// Instances of the MXFP4 grouped GEMM (token tiles 8, 32, 64; SwiGLU or
// bias-and-route epilogue) and their launcher.
#include "cuda/portable/sm80_mxfp4_gemm.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/portable/sm80_mxfp4_gemm_launch.h"

namespace mxmoe::portable {

namespace {
template <int NT, bool kSwiglu, int kDecodeWarps = 8>
cudaError_t launch(const GemmParams& p, int64_t max_tiles, bool overlap, cudaStream_t stream) {
  using Cfg = GemmConfig<NT, kDecodeWarps>;
  constexpr int rows = Cfg::kRowsPerBlock;
  const unsigned row_blocks = unsigned((p.n_rows + rows - 1) / rows);
  // Decode: a tile's row blocks along x, run one after the other (the kernel).
  const dim3 grid = Cfg::kSplitK ? dim3(row_blocks, unsigned(max_tiles)) : dim3(unsigned(max_tiles), row_blocks);
  return smxx::launch_kernel(sm80_mxfp4_moe_gemm<NT, kSwiglu, kDecodeWarps>, grid, dim3(Cfg::kWarps * 32), 0,
                             stream, overlap, p);
}
}  // namespace

cudaError_t launch_mxfp4_moe_gemm(const GemmParams& p, int token_tile, int decode_warps, bool swiglu,
                                  int64_t max_tiles, bool overlap, cudaStream_t stream) {
  const auto a = [&](auto f) { return f(p, max_tiles, overlap, stream); };
  switch (token_tile) {
    case 8:
      if (decode_warps == 4) return swiglu ? a(launch<1, true, 4>) : a(launch<1, false, 4>);
      if (decode_warps == 8) return swiglu ? a(launch<1, true, 8>) : a(launch<1, false, 8>);
      if (decode_warps == 16) return swiglu ? a(launch<1, true, 16>) : a(launch<1, false, 16>);
      return cudaErrorInvalidValue;
    case 32: return swiglu ? a(launch<4, true>) : a(launch<4, false>);
    case 64: return swiglu ? a(launch<8, true>) : a(launch<8, false>);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace mxmoe::portable
