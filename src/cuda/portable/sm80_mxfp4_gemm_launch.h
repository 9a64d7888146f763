// Host-side entry of the MXFP4 grouped GEMM (kernel in sm80_mxfp4_gemm.cuh).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace mxmoe::portable {

struct GemmParams;

// Grid: (max_tiles token tiles) x (N / 32 weight-row tiles); tiles past the
// device-side tile count exit at once. token_tile must be 8, 32 or 64;
// decode_warps (token_tile 8: the warps that split K in a block) 4, 8 or 16.
// `overlap`: programmatic dependent launch (SM90+, see pdl.cuh).
cudaError_t launch_mxfp4_moe_gemm(const GemmParams& p, int token_tile, int decode_warps, bool swiglu,
                                  int64_t max_tiles, bool overlap, cudaStream_t stream);

// Warps an SM holds of the fused GEMM2 + combine at its launch bounds (3
// blocks of 8 warps or 1 of 16 at <= 85 registers, as the decode GEMM).
inline constexpr int kDownCombineWarpsPerSm = 24;

// The decode's GEMM2 with the combine in it (sm80_mxfp4_down_combine.cu):
// grid (n_valid / 32, tokens), `warps` (8 or 16) a block. p as for GEMM2 (w2,
// act_in = GEMM1's rows, pair q's at act_row[q] or at q where act_row is
// null; pair_ids and experts, the routing as given; route_w, topk, n_valid =
// H a multiple of 32); exactly one of y (fp32) and y_bf16 [tokens, H].
cudaError_t launch_mxfp4_down_combine(const GemmParams& p, int warps, int64_t tokens, float* y, uint16_t* y_bf16,
                                      bool overlap, cudaStream_t stream);

}  // namespace mxmoe::portable
