// Weight preparation: a plan per (backend, shape) and the padded, re-laid-out
// copy of the weights a backend reads; tensor- and expert-parallel shards of it.
//
// Padding invariants (checked bit-exactly by the tests):
//   - padded E2M1 positions hold code 0 (+0.0);
//   - padded E8M0 scale positions hold 127 (1.0), never 0xFF (NaN): a tile that
//     multiplies padded codes by a padded scale gets 0 * 1.0 = 0, where 0xFF
//     would give 0 * NaN = NaN;
//   - padded bias entries are 0; padded router columns are 0;
//   - every tensor is allocated up to its readable extent, so tile loops of the
//     backend never read outside the allocation, even without masks; the bytes
//     past the dense stack hold the same neutral padding.
// A padded intermediate column j has zero weights and zero bias, so h = 0,
// g = 0 and a_j = 0: it contributes nothing to w2's product. A padded hidden
// row of w2 has zero weights and zero bias, so its output is 0; backends write
// outputs only for the real H.
//
// Prepared layout (what the portable and sm90 CUDA backends read; keep stable):
//   w13 codes  [E, 2*Ip, Hp/2]   scales [E, 2*Ip, Hp/32]   b13 [E, 2*Ip]
//   w2  codes  [E, Hp,   Ip/2]   scales [E, Hp,   Ip/32]   b2  [E, Hp]
// followed, in each weight tensor, by `prefetch_rows` neutral rows (see
// TileOverreach). w13 rows are ordered per plan.w13_layout.
#pragma once

#include <cstdint>
#include <string>

#include "mxmoe/backend.h"
#include "mxmoe/moe.h"
#include "mxmoe/status.h"

namespace mxmoe {

// Per-dimension alignment a backend's tile loops need (multiples of 32). The
// plan pads H and I to these, so every K step and every N tile of the main
// loops lies inside the padded tensor: a K tile wider than the alignment would
// read the next row's bytes, so a backend declares its K tile here.
struct BackendAlignment {
  int64_t hidden = 32;
  int64_t intermediate = 32;
};
BackendAlignment backend_alignment(BackendKind kind);

// Reads a backend's loops may issue past the last row of the last expert of a
// weight tensor: a software pipeline that loads stage s+1 before testing the
// loop exit reads one tile of rows that is never used. The plan allocates them
// and fills them with neutral padding, so the read stays inside the allocation.
struct TileOverreach {
  int64_t prefetch_rows = 0;  // whole rows (of the padded width) past the end
};
TileOverreach backend_overreach(BackendKind kind);

// Kernel-specific re-orderings of the prepared code and scale bytes, applied
// when a backend places the weights on its device (swizzle_codes,
// swizzle_scales); PreparedWeights keep the dense padded layout, which the
// reference and the tests read. A swizzle permutes bytes within each group of
// 16, 32 or 128 rows, so extents do not change.
enum class WeightSwizzle {
  kNone,
  // mma.m16n8k16 fragment order (portable and sm90 backends; a warp's wgmma
  // A fragment is the same). In each group of 16 rows
  // (row i = 2g + r: lane group g holds rows 2g and 2g+1) and each 128-wide K
  // chunk c (64 bytes of a row; lane t of a group owns bytes [16t, 16t+16),
  // one MX block), the 1 KB of the group's chunk is stored as
  //   [r (2)][lane = 4g + t (32)][16 bytes]
  // so each of a warp's two 16-byte loads per chunk reads 512 contiguous bytes
  // and a warp streams its rows front to back. A 64-wide tail chunk (K % 128 ==
  // 64) is stored likewise with 8 bytes per lane: [r][lane][8 bytes].
  // Inside each 32-bit word (8 codes, elements 0..7 of a K run) the bits are
  // permuted so that the kernel gets each bf16 pair of elements (2i, 2i + 1)
  // with few integer instructions (src/prepare/pair_bits.h).
  kMmaRowGroups16,
  // kMmaRowGroups16 with the 8 groups of each 128-row tile interleaved by K
  // chunk (sm90 backend): a tile's chunk c is its 8 groups' 1 KB images in
  // group order, 8 KB at 8192c from the tile's start ([c][group][1 KB]), so
  // one bulk copy brings a whole chunk of a tile. Needs K % 128 == 0.
  kMmaRowTiles128,
  // The cpu backend's SIMD order (src/cpu/). Each group of 16 rows is stored
  // by 32-wide MX block: block b of the group is 256 bytes at 256b, and its
  // byte 64q + 4r + i holds element (row r, k = 32b + 4q + i) in its low
  // nibble and element (r, 32b + 16 + 4q + i) in its high nibble. A 64-byte
  // load at 64q then gives, from its low nibbles, 16 rows x 4 consecutive k
  // (one 32-bit lane a row, the 4 bytes a u8 x s8 dot product sums) and from
  // its high nibbles the same for k + 16. The scales of a 16-row group are
  // stored by block as well: 16 bytes at 16b, row r's at 16b + r.
  kCpuRowGroups16,
};

// Writes the `rows` x `cols` (elements; cols/2 bytes a row) dense codes into
// `out` in `swizzle` order. kMmaRowGroups16 needs rows % 16 == 0 and
// cols % 64 == 0; kMmaRowTiles128 rows % 128 == 0 and cols % 128 == 0;
// kCpuRowGroups16 rows % 16 == 0 and cols % 32 == 0.
Status swizzle_codes(WeightSwizzle swizzle, const uint8_t* dense, int64_t rows, int64_t cols,
                     uint8_t* out);

// Writes the `rows` x `cols / 32` dense E8M0 scales into `out` in the scale
// order of `swizzle`. kNone keeps them dense. Both fragment orders
// (kMmaRowGroups16, kMmaRowTiles128) keep each block of 32 rows in the bytes
// its dense rows held, and store its 128-wide K chunk c as the 128 bytes at
// 128c of the block, [g (8)][t (4)][m (2)][r (2)]: the scale of row
// 16m + 2g + r, MX block 4c + t. Lane 4g + t of an mma warp (rows 2g, 2g + 1 of
// two m16 subtiles, MX block t of the chunk) loads its four scales of a chunk
// with one 4-byte load, and the two rows of one subtile are adjacent bytes.
// A 64-wide tail chunk (cols % 128 == 64) is the 64 bytes after the full
// chunks, [g][t (2)][m][r] for MX block 4 (cols / 128) + t. Needs rows % 32
// == 0 and cols % 64 == 0. kCpuRowGroups16 transposes each group of 16 rows
// to [block][row] (rows % 16 == 0).
Status swizzle_scales(WeightSwizzle swizzle, const uint8_t* dense, int64_t rows, int64_t cols,
                      uint8_t* out);

struct PreparePlan {
  BackendKind backend = BackendKind::kCpu;
  MoeShape shape;  // original shape (of this shard, for a shard's plan)
  int64_t hidden_padded = 0;
  int64_t intermediate_padded = 0;
  W13Layout w13_layout = W13Layout::kInterleaved;
  WeightSwizzle swizzle = WeightSwizzle::kNone;
  int64_t prefetch_rows = 0;  // neutral rows after each weight tensor's dense stack
  // Readable extent of each prepared tensor in bytes (== its allocation size):
  // the dense padded stack plus `prefetch_rows` rows.
  int64_t w13_codes_bytes = 0, w13_scales_bytes = 0;
  int64_t w2_codes_bytes = 0, w2_scales_bytes = 0;

  MoeShape padded_shape() const {
    return {shape.experts, hidden_padded, intermediate_padded, shape.topk};
  }
  // Bytes the prepared weights hold: the four weight tensors at their extents
  // plus the bf16 biases (router excluded: it is not per-expert).
  int64_t prepared_bytes() const;
};

// The plan `backend` uses for `shape`: padded H and I, its w13 layout, extents.
PreparePlan make_plan(BackendKind backend, const MoeShape& shape);
// Recomputes the extents of `plan` after a caller changed its padding, layout or
// prefetch rows (e.g. to prepare a stacked layout for a test or another kernel).
void update_extents(PreparePlan* plan);

// Bytes of the original (dense, unpadded) expert weights and biases.
int64_t original_bytes(const MoeShape& shape);

struct PreparedWeights {
  PreparePlan plan;
  MoeWeights weights;  // dense at plan.padded_shape(), laid out per plan.w13_layout
  MoeWeightsView view() const { return weights.view(); }
};

// `original` may be in any W13Layout (the checkpoint's is interleaved).
Status prepare_weights(const PreparePlan& plan, const MoeWeightsView& original,
                       PreparedWeights* out);

// ---- Sharding ----------------------------------------------------------------
//
// Tensor parallel: rank r of `size` holds intermediate columns
// [r * Ir, (r + 1) * Ir) of I padded to round_up(I, size * lcm(32, a)), where a
// is the backend's intermediate alignment, so every rank's slice is whole
// 32-blocks and already aligned (Ir = padded I / size). gate_j and up_j stay on
// the same rank (SwiGLU pairs them); w2's K columns follow the same slice. b2 is
// added by rank 0 only; the others hold b2 = 0. The sum over ranks of the
// per-rank outputs is the unsharded output.
//
// Expert parallel: rank r holds the contiguous experts
// [r * E / size, (r + 1) * E / size), whole. Routing to other experts
// contributes zero on this rank (see localize_routing).
struct WeightShard {
  int rank = 0, size = 1;
  int64_t expert_offset = 0;       // global id of local expert 0
  int64_t global_experts = 0;      // E of the unsharded layer
  int64_t intermediate_offset = 0;  // first (padded) intermediate column held
  PreparedWeights prepared;        // plan.shape is this shard's shape
};

// Padded I the tensor-parallel split of `backend` uses, before slicing.
int64_t tensor_parallel_intermediate(BackendKind backend, int64_t intermediate, int size);

Status shard_tensor_parallel(BackendKind backend, const MoeWeightsView& original, int rank,
                             int size, WeightShard* out);
Status shard_expert_parallel(BackendKind backend, const MoeWeightsView& original, int rank,
                             int size, WeightShard* out);

// Routing for an expert-parallel shard, from routing with global expert ids:
// each token keeps its slots on the shard's experts (ids made local, in slot
// order); the remaining slots get local id 0 with weight 0, which adds an exact
// zero. topk becomes min(topk, local experts); a token with more slots on the
// shard than that (repeated ids) is an error.
Status localize_routing(const RoutingView& global, const WeightShard& shard, Routing* out);

}  // namespace mxmoe
