// Host-side entry of the one-launch decode forward (sm80_mxfp4_fused_decode.cu).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace mxmoe::portable {

struct GemmParams;

// What the fused decode reads and writes beside the two GEMMs' parameters.
struct FusedDecodeArgs {
  const int32_t* ids;  // routing ids [tokens, k] (an id outside [0, E): expert 0, weight NaN)
  int64_t tokens;
  int32_t* counts;  // workspace: tokens x (H / 32) completion counts, zeroed by the kernel
};

// Enqueues the whole decode (both GEMMs and the combine) as one cooperative
// launch. g1 as GEMM1 of the per-pair decode (act_in = x, act_out = act,
// pair q's row at q), g2 as its GEMM2 (act_in = act, y_out = ypair rows [T k,
// H] fp32 in the workspace, pair_ids = the ids, route_w); exactly one of y
// (fp32) and y_bf16 [tokens, H]. tokens * k at most kFusedMaxPairs.
cudaError_t launch_mxfp4_fused_decode(const GemmParams& g1, const GemmParams& g2, const FusedDecodeArgs& f, float* y,
                                      uint16_t* y_bf16, cudaStream_t stream);

}  // namespace mxmoe::portable
