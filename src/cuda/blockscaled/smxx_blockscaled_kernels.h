// The steps of the Blackwell pipeline around its two grouped GEMMs, in the
// GEMMs' data formats (plain CUDA, any SM): MXFP8 quantisation of the
// (token, slot) rows of x into the block-scaled layout, the GEMMs' problem
// descriptors, bias + SwiGLU + MXFP8 requantisation of GEMM1's output, and
// the combine of GEMM2's rows. Rows follow the expert grouping of the shared
// kernels (launch_group_by_expert with a 128-row tile): expert e owns whole
// 128-row tiles, so its first row is a multiple of 128 and its scales start
// at a scale atom of the layout (prepare/blockscaled_scales.h). Each launcher
// enqueues one kernel on `stream`; none allocates or synchronises.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "cuda/blockscaled/grouped_gemm_args.h"
#include "mxmoe/format.h"
#include "mxmoe/moe.h"
#include "mxmoe/status.h"

namespace mxmoe::blockscaled {

// Rows of the grouped GEMMs a tile of the expert grouping holds: the M tile of
// both Blackwell GEMMs, and the rows of one scale atom.
inline constexpr int kRowTile = 128;

// The rows of a grouped schedule (smxx::Schedule with tile kRowTile): row r
// < *num_tiles * 128 holds pair sorted_pair[r] (-1 for padding) of expert
// tile_expert[r / 128].
struct GroupedRows {
  const int32_t* sorted_pair = nullptr;
  const int32_t* tile_expert = nullptr;
  const int32_t* num_tiles = nullptr;
  int64_t max_rows = 0;  // the workspace's rows: an upper bound of *num_tiles * 128
};

// Stage 2. Row r of `codes` (E4M3 [max_rows, k_padded]) and of `scales` (the
// block-scaled layout of max_rows x k_padded / 32) = MXFP8 of x row
// sorted_pair[r] / topk (bf16, `hidden` real columns, rows x_stride elements
// apart, 16-byte aligned), with `rule`'s scales (as mxfp8_quantize_row);
// columns [hidden, k_padded) and padding rows are code 0 with scale 127. Rows
// past *num_tiles * 128 are not written (no GEMM reads them).
Status launch_quantize_x_rows(const uint16_t* x, int64_t x_stride, int64_t hidden, int64_t k_padded, int64_t topk,
                              const GroupedRows& rows, MxScaleRule rule, uint8_t* codes, uint8_t* scales,
                              cudaStream_t stream, const char* who);

// One grouped GEMM's operands for launch_grouped_problems: A and D of the
// whole schedule (row r of every expert at row r), B and its scales one
// expert after another.
struct GemmOperands {
  int64_t n = 0, k = 0;
  const uint8_t* a = nullptr;       // E4M3 [max_rows, k]
  const uint8_t* sfa = nullptr;     // block-scaled layout of max_rows x k / 32
  const uint8_t* b = nullptr;       // E2M1 [E][n, k / 2 bytes]
  const uint8_t* sfb = nullptr;     // [E][block-scaled layout of n x k / 32]
  uint16_t* d = nullptr;            // bf16 [max_rows, n]
  GroupedGemmArgs out;              // arrays to fill, `groups` = E entries each
};

// Stage 3: the problem descriptors of both GEMMs from the schedule: expert e
// with c_e tiles gets M = 128 c_e (0: an empty problem) and pointers to its
// rows. One block; E <= smxx::kMaxExperts.
Status launch_grouped_problems(const GroupedRows& rows, int64_t experts, const GemmOperands& gemm1,
                               const GemmOperands& gemm2, cudaStream_t stream, const char* who);

// Stage 5. For row r of the schedule holding a pair of expert e: h_j =
// SwiGLU(gate_j, up_j) of d1 row r (bf16 [max_rows, 2 ip] = [up | gate])
// plus b13[e] (bf16 [E, 2 ip], same order), then MXFP8 with `rule` into row
// r of `codes` (E4M3 [max_rows, ip]) and `scales` (block-scaled, max_rows x
// ip / 32). Padding rows are code 0, scale 127.
Status launch_swiglu_quantize(const uint16_t* d1, const uint16_t* b13, int64_t ip, const SwigluParams& swiglu,
                              const GroupedRows& rows, MxScaleRule rule, uint8_t* codes, uint8_t* scales,
                              cudaStream_t stream, const char* who);

// Stage 7: y[t] = sum over slots s = 0..k-1, in that order, of weights[t k +
// s] * (d2 row pair_row[t k + s] + b2[ids[t k + s]]) over the first `hidden`
// columns (d2 bf16 [rows, hp], b2 bf16 [E, hp]; fp32 sums). y is fp32 or bf16
// [tokens, hidden]: exactly one of y, y_bf16 is non-null. hidden % 8 == 0.
Status launch_combine_rows(const uint16_t* d2, int64_t hp, const uint16_t* b2, const int32_t* pair_row,
                           const int32_t* ids, const float* weights, int64_t tokens, int64_t topk, int64_t hidden,
                           float* y, uint16_t* y_bf16, cudaStream_t stream, const char* who);

}  // namespace mxmoe::blockscaled
