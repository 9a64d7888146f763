// Host-side entry of the MXFP4 grouped GEMM (kernel in sm80_mxfp4_gemm.cuh).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace mxmoe::portable {

struct GemmParams;

// The decode instance stages 8 activation rows of the padded K in shared
// memory (beside 8 KB of split-K partial sums): K (H and I padded) up to
// about 14,000 where a block may take 227 KB (SM90), less on smaller parts.
inline constexpr int kMaxActStageBytes = 227 * 1024 - 8 * 1024;
inline constexpr int64_t kMaxGemmK = kMaxActStageBytes / 16 - 8;

// Grid: (max_tiles token tiles) x (N / 32 weight-row tiles); tiles past the
// device-side tile count exit at once. token_tile must be 8, 32 or 64.
// `overlap`: programmatic dependent launch (SM90+, see pdl.cuh).
cudaError_t launch_mxfp4_moe_gemm(const GemmParams& p, int token_tile, bool swiglu,
                                  int64_t max_tiles, bool overlap, cudaStream_t stream);

}  // namespace mxmoe::portable
