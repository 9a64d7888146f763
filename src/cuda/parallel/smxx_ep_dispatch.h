// Expert-parallel kernels of one rank (plain CUDA, any SM): the dispatch plan,
// packing rows by destination, and the slot-order combine of the results.
// Layouts are those of src/parallel/expert_dispatch.h.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "mxmoe/status.h"

namespace mxmoe::parallel {

// send_counts [size] and pair_pos [pairs] of plan_dispatch, for the global
// expert ids [pairs] (each rank holds experts_per_rank experts). One block;
// pairs may be 0 (all counts 0). size <= kMaxParallelRanks.
Status launch_ep_plan(const int32_t* ids, int64_t pairs, int64_t experts_per_rank, int size,
                      int32_t* send_counts, int32_t* pair_pos, cudaStream_t stream);

// For each pair p = t * topk + s: row pair_pos[p] of send_x (bf16 [rows,
// hidden]) = row t of x, send_ids = the local id of its expert on the owning
// rank, send_w = its routing weight.
Status launch_ep_pack(const uint16_t* x, int64_t hidden, int64_t topk, const int32_t* ids,
                      const float* weights, const int32_t* pair_pos, int64_t pairs,
                      int64_t experts_per_rank, uint16_t* send_x, int32_t* send_ids, float* send_w,
                      cudaStream_t stream);

// y[t] = sum over s = 0 .. topk-1, in that order, of rows[pair_pos[t * topk + s]]
// (fp32 [., hidden]).
Status launch_ep_combine(const float* rows, const int32_t* pair_pos, int64_t tokens, int64_t topk,
                         int64_t hidden, float* y, cudaStream_t stream);

}  // namespace mxmoe::parallel
