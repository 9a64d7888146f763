// The SM120 (RTX 50, RTX PRO 6000) block-scaled grouped GEMM: MXFP8
// activations (E4M3, E8M0 per 32) x MXFP4 weights (E2M1, E8M0 per 32), fp32
// accumulation, bf16 out, one problem per expert, on CUTLASS 4.x
// (sm120_mxf8f4_grouped_gemm.cu). The CUTLASS types stay in that file: this
// header is what the rest of the code sees.
#pragma once

#include "cuda/blockscaled/grouped_gemm_args.h"

#include <cstdint>

namespace mxmoe::sm120 {

// The tile every problem is cut into (M tokens x N features x K), and the
// K granularity the operands' TMA copies and scale atoms need.
inline constexpr int kTileM = 128, kTileN = 128, kTileK = 128;
inline constexpr int kKAlignment = 128;

// The GEMM over GroupedGemmArgs' device arrays (CUTLASS's initialize + run
// on the stream; its workspace holds the per-group TMA descriptors).
const blockscaled::GroupedGemm& grouped_gemm();

// Whether CUTLASS's own Gemm::can_implement accepts a group of problems of
// these sizes (M x N x K each, A row-major [M, K], B column-major [N, K]):
// host-side checks only (alignment of every operand for its TMA copies).
bool can_implement(int groups, int m, int n, int k);

// Shared memory the kernel's SharedStorage takes (bytes); at most the
// 101,376 an SM120 block can have (a static_assert in the .cu says so).
int shared_memory_bytes();

// The GEMM's kernel (for cudaFuncGetAttributes and the launcher); compiled
// into the binary, where its SASS can be checked without a GPU.
const void* kernel();

}  // namespace mxmoe::sm120
