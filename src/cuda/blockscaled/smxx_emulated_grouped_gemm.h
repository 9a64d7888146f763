// A block-scaled grouped GEMM in plain CUDA (any SM) that reads exactly the
// arrays a CUTLASS ptr-array block-scaled GEMM reads (GroupedGemmArgs, in
// CUTLASS's own types, the scales through the layouts CUTLASS evaluates):
// it stands in for the SM100 / SM120 GEMMs on GPUs without their MMAs, so the
// rest of the Blackwell pipeline runs end to end anywhere. fp32 sums per MX
// block, scaled by both blocks' scales; D rounded to bf16. A simple tiled
// kernel, for tests; no performance claims.
#pragma once

#include "cuda/blockscaled/grouped_gemm_args.h"

namespace mxmoe::blockscaled {

// name "emulated", no workspace.
const GroupedGemm& emulated_grouped_gemm();

}  // namespace mxmoe::blockscaled
