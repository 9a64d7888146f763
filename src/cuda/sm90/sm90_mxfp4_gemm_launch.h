// Host-side entry of the sm90 grouped MXFP4 GEMM (kernel in sm90_mxfp4_gemm.cuh).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace mxmoe::sm90 {

struct GemmParams {
  // Weights [E, n_rows, k] in the sm90 prepared layout: codes in
  // WeightSwizzle::kMmaRowTiles128 order (a 128-row tile of all E * n_rows
  // rows has its chunk c at 8192c from the tile's first row, k/2 bytes a row,
  // and a 64-wide tail chunk's 4 KB after the full chunks), E8M0 scales in
  // the fragment scale order of swizzle_scales (a 32-row block's k/32 bytes
  // a row where its dense rows were, so a tile's scales are one contiguous
  // run), bf16 bias [E, n_rows].
  const uint8_t* codes;
  const uint8_t* scales;
  const uint16_t* bias;
  int n_rows;         // multiple of 64; E * n_rows a multiple of 128 (the layout's tiles)
  int k;              // padded K, multiple of 64 (a stage per 128, the last one 64 wide when K % 128 == 64)
  bool large_scales;  // some scale byte >= 128: the two-multiply dequantisation
  int stages;         // shared-memory ring depth (pipeline_stages)
  bool stream_codes;  // codes read under an L2 evict-first policy (streams_codes in heuristics.h)
  // Activations in, packed per sm90_layout.h ([token tile][chunk][stage]).
  const uint8_t* act_in;
  // Schedule of the grouping kernel (token tiles of the kernel's token tile).
  const int32_t* tile_expert;
  const int32_t* num_tiles;
  // Items past each block's first (item blockIdx.x) are claimed in order:
  // item gridDim.x + atomicAdd(item_counter, 1). 0 when the kernel starts
  // (the pack kernel zeroes it in every forward).
  int32_t* item_counter;
  // Per sorted row, copied with each item (16-byte aligned): the pair index
  // t*k + slot (-1 = padding) of the grouping kernel.
  const int32_t* col_pair;
  // GEMM1 epilogue: SwiGLU of the (gate, up) row pairs (kInterleavedChunkOrder:
  // pair q is GEMM2's operand k = q % 128 of chunk q / 128) into packed
  // activations with K = n_rows / 2 (GEMM2's input); padding rows get 0. With
  // staged_output an item's outputs go through shared memory and leave as one
  // bulk copy (the layout then holds the output half: smem_layout).
  uint8_t* act_out;
  bool staged_output;
  float alpha, limit;
  // GEMM2 epilogue: acc + bias -> y_out bf16 [T * k, n_valid], the row of
  // each column's pair (padding columns are not stored); the combine kernel
  // applies the routing weights.
  uint16_t* y_out;
  int n_valid;
};

// Persistent grid of `grid` blocks (at most blocks_per_sm(token_tile) per SM) walking the
// (token tile, 128-row tile) items; token_tile is one of is_token_tile. `overlap`:
// programmatic dependent launch (see pdl.cuh).
cudaError_t launch_sm90_mxfp4_gemm(const GemmParams& p, int token_tile, bool swiglu, int grid, bool overlap,
                                   cudaStream_t stream);

// Raises the dynamic shared-memory limit of every instance to the SM90
// maximum; once per process, outside stream capture.
cudaError_t init_sm90_mxfp4_gemm();

}  // namespace mxmoe::sm90
