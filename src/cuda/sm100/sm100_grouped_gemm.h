// The SM100 (B200, GB200) block-scaled grouped GEMM: MXFP8 activations x
// MXFP4 weights, fp32 accumulation in tensor memory, bf16 out, one problem
// per expert, on CUTLASS 4.x (sm100_mxf8f4_grouped_gemm.cu; the CUTLASS types
// stay there).
#pragma once

#include "cuda/blockscaled/grouped_gemm_args.h"

namespace mxmoe::sm100 {

// MMA tile (M tokens x N features x K) and the K granularity of the operands'
// TMA copies and scale atoms.
inline constexpr int kTileM = 128, kTileN = 128, kTileK = 128;
inline constexpr int kKAlignment = 128;

// The GEMM over GroupedGemmArgs' device arrays (CUTLASS's initialize + run
// on the stream; its workspace holds the per-group TMA descriptors).
const blockscaled::GroupedGemm& grouped_gemm();

// Whether CUTLASS's own Gemm::can_implement accepts `groups` problems of
// m x n x k (host-side checks only).
bool can_implement(int groups, int m, int n, int k);

// Shared memory the kernel's SharedStorage takes (bytes; at most 232,448).
int shared_memory_bytes();

// The GEMM's kernel (for cudaFuncGetAttributes and the launcher); compiled
// into the binary, where its SASS can be checked without a GPU.
const void* kernel();

}  // namespace mxmoe::sm100
