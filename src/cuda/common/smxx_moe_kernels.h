// The MoE steps around the expert GEMMs, shared by the CUDA backends (plain
// CUDA, any SM): router + top-k, grouping of (token, slot) pairs by expert into
// a tile schedule, and the combine of each token's k rows. Each launcher
// enqueues one kernel on `stream`; none allocates or synchronises. `who`
// prefixes error messages with the calling backend's name.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "cuda/common/grouping_heuristics.h"
#include "cuda/common/token_tiles.h"
#include "mxmoe/status.h"

namespace mxmoe::smxx {

// Largest expert count the grouping kernel's shared-memory tables hold.
inline constexpr int64_t kMaxExperts = 256;
// Largest top-k the CUDA forwards take: the router keeps a token's picks in
// registers, and the sm90 combine a token's slot rows in flight.
inline constexpr int64_t kMaxTopk = 8;

// A failed CUDA call as a Status ("<who>: <what>: <CUDA error>").
Status cuda_status(cudaError_t err, const char* who, const char* what);

// Whether kernels on the current device may start during the previous
// kernel's tail (programmatic dependent launch, SM90+).
Status kernels_may_overlap(const char* who, bool* overlap);

// The current device's SM count (grid sizes of the persistent and decode GEMMs).
Status sm_count(const char* who, int* sms);

// Whether the current device takes cooperative launches (every SM80+ GPU
// does; a partitioned one may not).
Status cooperative_launches(const char* who, bool* yes);

// logits = x W^T + b (bf16 products on the tensor cores, fp32 sums), top-k
// with ties to the lower id, softmax over the k: ids and weights [tokens, k].
// x bf16 [tokens, hidden] with rows x_stride elements apart, 16-byte aligned
// (x_stride % 8 == 0); router_weight bf16 [experts, router_stride]; hidden %
// 32 == 0, router_stride % 8 == 0, k <= 8.
Status launch_router_topk(const uint16_t* x, int64_t tokens, int64_t hidden, int64_t x_stride,
                          const uint16_t* router_weight,
                          int64_t router_stride, const uint16_t* router_bias, int64_t experts, int64_t k,
                          int32_t* ids, float* weights, bool overlap, cudaStream_t stream, const char* who);

// Groups the `pairs` = tokens * k ids by expert: each expert's rows padded to a
// multiple of `tile`, sorted_pair[row] = pair index (-1 for padding), pair_row
// [pair] = its row, tile i = rows [i * tile, (i + 1) * tile) of expert
// tile_expert[i]; *num_tiles written on the device. Stable: pairs of one expert
// keep their order, so every row's position is deterministic. range_counts:
// group_range_count_ints(pairs, experts) ints of workspace (may be null where
// that is 0). One launch, or two past kOneBlockGroupPairs.
// The ids may be a caller's as given: one outside [0, E) is grouped as
// expert 0, and with weights_in (the caller's weights) non-null,
// weights_out[i] = weights_in[i], or NaN for such a pair (launch_check_routing's
// rule, without its launch). weights_in null: the weights need no copy (the router's).
Status launch_group_by_expert(const int32_t* ids, const float* weights_in, int64_t pairs, int64_t experts, int tile,
                              float* weights_out, int32_t* range_counts, int32_t* sorted_pair, int32_t* pair_row,
                              int32_t* tile_expert, int32_t* tile_row, int32_t* num_tiles, bool overlap,
                              cudaStream_t stream, const char* who);

// y[t] = sum over slots s = 0..k-1, in that order, of row pair_row[t * k + s]
// of ypair (fp32 [rows, hidden]), or of row t * k + s where pair_row is null;
// hidden a multiple of 4. y is fp32 or bf16 (rounded to nearest even) [tokens,
// hidden]: exactly one of y, y_bf16 is non-null.
Status launch_combine(const float* ypair, const int32_t* pair_row, int64_t tokens, int64_t k, int64_t hidden,
                      float* y, uint16_t* y_bf16, bool overlap, cudaStream_t stream, const char* who);

// A caller's routing made safe for the grouping and the GEMMs, which index
// experts by id: ids_out[i] = ids[i] and weights_out[i] = weights[i] where
// 0 <= ids[i] < experts; elsewhere ids_out[i] = 0 and weights_out[i] = NaN,
// so the token's output row is NaN (every path multiplies a pair's row by its
// weight) and no read leaves the weights. `pairs` = tokens * k entries.
Status launch_check_routing(const int32_t* ids, const float* weights, int64_t pairs, int64_t experts,
                            int32_t* ids_out, float* weights_out, bool overlap, cudaStream_t stream,
                            const char* who);

// Carves a workspace into 256-byte-aligned pieces, in the order taken.
struct WorkspaceCursor {
  size_t off = 0;
  size_t take(size_t bytes) {
    const size_t at = off;
    off += (bytes + 255) / 256 * 256;
    return at;
  }
};

// Workspace offsets of the routing and the tile schedule every CUDA forward
// keeps: ids / weights [T*k] (the router's output), num_tiles, tile_expert /
// tile_row [max_tiles], sorted_pair [rows], pair_row [T*k], and the grouping's
// per-range counts.
struct ScheduleOffsets {
  size_t ids = 0, weights = 0, num_tiles = 0, tile_expert = 0, tile_row = 0, sorted_pair = 0, pair_row = 0,
         range_counts = 0;
  int64_t max_tiles = 0, rows = 0;
};
inline ScheduleOffsets take_schedule(WorkspaceCursor& ws, int64_t tokens, int64_t topk, int64_t experts, int tile) {
  ScheduleOffsets s;
  s.max_tiles = max_token_tiles(tokens, topk, experts, tile);
  s.rows = s.max_tiles * tile;
  s.ids = ws.take(size_t(tokens * topk) * 4);
  s.weights = ws.take(size_t(tokens * topk) * 4);
  s.num_tiles = ws.take(4);
  s.tile_expert = ws.take(size_t(s.max_tiles) * 4);
  s.tile_row = ws.take(size_t(s.max_tiles) * 4);
  s.sorted_pair = ws.take(size_t(s.rows) * 4);
  s.pair_row = ws.take(size_t(tokens * topk) * 4);
  s.range_counts = ws.take(size_t(group_range_count_ints(tokens * topk, experts)) * 4);
  return s;
}

// The arrays of ScheduleOffsets in a workspace.
struct Schedule {
  int32_t* ids;
  float* weights;
  int32_t *num_tiles, *tile_expert, *tile_row, *sorted_pair, *pair_row, *range_counts;
};
inline Schedule schedule_in(void* workspace, const ScheduleOffsets& s) {
  char* const ws = static_cast<char*>(workspace);
  auto ints = [ws](size_t off) { return reinterpret_cast<int32_t*>(ws + off); };
  return {ints(s.ids),        reinterpret_cast<float*>(ws + s.weights), ints(s.num_tiles),
          ints(s.tile_expert), ints(s.tile_row),                         ints(s.sorted_pair),
          ints(s.pair_row),    ints(s.range_counts)};
}

// launch_group_by_expert into a workspace's schedule: the caller's routing
// (weights non-null; the checked weights go to s.weights) or the router's in
// s.ids and s.weights (weights null).
inline Status launch_group_by_expert(const int32_t* ids, const float* weights, int64_t pairs, int64_t experts,
                                     int tile, const Schedule& s, bool overlap, cudaStream_t stream,
                                     const char* who) {
  return launch_group_by_expert(ids, weights, pairs, experts, tile, s.weights, s.range_counts, s.sorted_pair,
                                s.pair_row, s.tile_expert, s.tile_row, s.num_tiles, overlap, stream, who);
}

}  // namespace mxmoe::smxx
