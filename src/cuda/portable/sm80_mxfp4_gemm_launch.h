// Host-side entry of the MXFP4 grouped GEMM (kernel in sm80_mxfp4_gemm.cuh).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace mxmoe::portable {

struct GemmParams;

// Grid: (max_tiles token tiles) x (N / 32 weight-row tiles); tiles past the
// device-side tile count exit at once. token_tile must be 8, 32 or 64;
// decode_warps (token_tile 8: the warps that split K in a block) 4 or 8.
// `overlap`: programmatic dependent launch (SM90+, see pdl.cuh).
cudaError_t launch_mxfp4_moe_gemm(const GemmParams& p, int token_tile, int decode_warps, bool swiglu,
                                  int64_t max_tiles, bool overlap, cudaStream_t stream);

}  // namespace mxmoe::portable
