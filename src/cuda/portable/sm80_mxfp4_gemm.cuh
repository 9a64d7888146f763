// Grouped MoE GEMM with MXFP4 weights on the mma.sync path (SM80+, also run on
// SM90): out[row, n] = sum_k act[row, k] * W_e[n, k] for the token rows of one
// expert tile. Weights are dequantised in registers (no dequantised tensor in
// memory) and sit on the M side of mma.m16n8k16 (we compute y^T = W x^T): at
// decode a tile holds 1..8 tokens, so 16 weight rows x 8 tokens wastes nothing
// on the weight side, which is the side that moves the bytes.
//
// Block: kWarps warps split K (intra-block split-K, reduced through shared
// memory in a fixed order, so results are bitwise reproducible); every warp
// covers the same 32 weight rows (2 m16 subtiles) x 8*NT tokens.
//
// Register layout (lane = 4*g + t, g = groupID 0..7, t = thread-in-group 0..3):
//   * K is walked in chunks of 128 (a 64 tail when K % 128 == 64). In a chunk,
//     lane t owns elements [32t, 32t+32): one 16-byte code load per weight row,
//     exactly one MX block, so one E8M0 scale per row per chunk: the lane's
//     four rows' scales of a chunk are one 4-byte word (the fragment scale
//     order of swizzle_scales). The prepared
//     codes are stored in that order (WeightSwizzle::kMmaRowGroups16, or
//     kMmaRowTiles128 on the sm90 backend's weights), so the 16-byte loads of
//     a warp cover 512 contiguous bytes.
//   * mma row g of subtile m is weight row nb + 16m + 2g, row g+8 is the next
//     row: for w13 that puts gate_j and up_j in the same thread's accumulator
//     (c0/c1 gate, c2/c3 up), so SwiGLU needs no shuffle.
//   * The dot product is invariant under a permutation of K applied to both
//     operands. Lane t's logical k slots of step s are mapped onto its own 32
//     physical elements, so A (weights) and B (activations) fragments come
//     straight from global memory with 16-byte loads, no shared memory and no
//     ldmatrix. A code word's bf16 pair i is its elements (2i, 2i + 1)
//     (src/prepare/pair_bits.h), the same two elements as activation word i
//     of the run, so the activation words are B fragments as loaded.
#pragma once

#include <cuda_bf16.h>
#include <cstdint>

#include "cuda/common/pdl.cuh"
#include "cuda/common/smxx_mxfp4_dequant.cuh"
#include "cuda/common/smxx_routing.cuh"
#include "mxmoe/moe.h"

namespace mxmoe::portable {

struct GemmParams {
  // Weights [E, N, K] MXFP4 (padded dense), strides in bytes.
  const uint8_t* codes;
  const uint8_t* scales;
  // Codes in fragment order (code_strides.h): group g of 16 rows, counted
  // over all E * N rows, at (g / 8) * code_tile_stride + (g % 8) *
  // code_group_stride, its chunk c at code_chunk_stride * c; a 64-wide tail
  // chunk at (g / 8) * code_tile_stride + code_chunk_stride * (K / 128) +
  // (g % 8) * code_tail_group_stride. (Counting over all rows lets an expert
  // start half-way into a 128-row tile.)
  int64_t code_tile_stride, code_group_stride, code_chunk_stride, code_tail_group_stride;
  // Scales in the fragment scale order (swizzle_scales): the 32-row block
  // from row r (a multiple of 32) holds the bytes its dense rows did, from
  // r * K/32 on.
  int64_t scale_row_stride, scale_expert_stride;  // K/32, N * K/32
  const uint16_t* bias;  // bf16 [E, N]
  int64_t bias_expert_stride;
  int n_rows;   // N (multiple of 32)
  int k;        // padded K (multiple of 64)
  int k_valid;  // activation columns that hold data; [k_valid, k) reads as 0
  // Activations in: GEMM1 gathers x[pair / topk], GEMM2 reads row `r` of act.
  const uint16_t* act_in;
  int64_t act_in_stride;  // elements
  int topk;
  // Schedule from the grouping kernel.
  const int32_t* sorted_pair;  // [rows]: pair index t*k+slot, -1 = padding
  const int32_t* tile_expert;
  const int32_t* tile_row;
  const int32_t* num_tiles;
  // Per-pair decode (no grouping; 8-token tiles only, at most
  // kPerPairBallotPairs pairs, heuristics.h): non-null, the routing ids
  // [T*k]. Tile i belongs to pair i: if i is the 8c-th pair of its expert (in
  // pair order) the tile takes it and the next (up to 7) pairs of that expert
  // as its token columns, otherwise an earlier tile has taken it and the tile
  // is empty.
  // Pair q's rows are row q of act_out / act_in (GEMM2) / y_out. The schedule
  // above is not read. The ids may be a caller's as given (smxx_routing.cuh:
  // an id outside [0, experts) is expert 0 with weight NaN).
  const int32_t* pair_ids;
  int experts;
  // Decode (8-token tiles; decode_tile_waits): non-null, a count per token
  // tile of GEMM1's finished row blocks, zero when GEMM1 starts. GEMM1 adds
  // each finished block; GEMM2 waits for its tile's count to reach
  // gemm1_row_blocks instead of for the whole of GEMM1, so the tiles GEMM1
  // has finished run during its last blocks.
  int32_t* tile_done;
  int gemm1_row_blocks;
  // GEMM1 epilogue: SwiGLU -> act_out bf16 [rows, act_out_stride]; the
  // output of row pair q is column q, or with act_out_chunk_order (w13 in
  // W13Layout::kInterleavedChunkOrder) column chunk_order_pair_column(I, q).
  uint16_t* act_out;
  int64_t act_out_stride;
  bool act_out_chunk_order;
  float alpha, limit;
  // GEMM2 + combine (sm80_mxfp4_down_combine.cu) on expert-grouped tiles:
  // the act row of pair q, pair_row from the grouping (null: row q, per-pair).
  const int32_t* act_row;
  // GEMM2 epilogue: route_w[pair] * (acc + bias) -> y_out fp32 [rows, n_valid]
  float* y_out;
  int n_valid;
  const float* route_w;
};


// m16 subtiles (16 weight rows each) per warp. Lane group g holds weight rows
// 16m + 2g and 16m + 2g + 1 of subtile m, so a gate/up pair never crosses lanes.
inline constexpr int kSubtiles = 2;

namespace detail {

__device__ __forceinline__ uint4 ld_stream16(const void* p) {
  // Weights are read once per tile: keep them out of L1 (L2 still serves the
  // other token tiles of the same expert).
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ uint2 ld_stream8(const void* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t ld_stream4(const void* p) {
  uint32_t v;
  asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ uint4 ld_act16(const void* p) {
  // Activations are shared by the block's warps and the neighbouring blocks: L1.
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ uint4 ld_act16_l2(const void* p) {
  // Activations another block wrote earlier in the same kernel (the fused
  // decode's GEMM2): the non-coherent path may not serve them, L2 does.
  uint4 v;
  asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

using smxx::bf16x2_mul;
using smxx::scale_factor_any;
using smxx::scale_factor_small;
using smxx::ScaleFactor;

__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// One K chunk: NW code words (8 elements each) per weight row per lane;
// NW = 4 for a 128-wide chunk, 2 for the 64-wide tail. kTwoStep: some scale of
// the warp's chunk is above 128 (two multiplies per pair). kActFromL2: the
// activations were written earlier in this kernel (ld_act16_l2).
template <int NT, int NW, bool kTwoStep, bool kActFromL2 = false>
__device__ __forceinline__ void chunk_mma_scaled(const uint32_t (&q)[kSubtiles][2][4], const ScaleFactor (&f)[kSubtiles][2],
                                                 const uint16_t* const (&arow)[NT], int act_col,
                                                 bool act_ok, float (&acc)[kSubtiles][NT][4]) {
  // Pair idx = 4w + i of row (m, r): bf16 pair i (elements 2i, 2i + 1) of code word w.
  auto deq = [&](int m, int r, int idx) {
    uint32_t v = bf16x2_mul(pair_bits::e2m1_pair_bits<pair_bits::ShiftPipe::kFma>(q[m][r][idx >> 2], idx & 3), f[m][r].f1);
    if constexpr (kTwoStep) v = bf16x2_mul(v, f[m][r].f2);
    return v;
  };
  // With several token subtiles every A pair is reused NT times: dequantise the
  // chunk once. With one subtile (decode) each pair is used once: dequantise it
  // right before its mma, which keeps 64 registers free for loads in flight.
  constexpr bool kHoist = NT > 1;
  uint32_t A[kSubtiles][2][kHoist ? 4 * NW : 1];
  if constexpr (kHoist) {
#pragma unroll
    for (int m = 0; m < kSubtiles; ++m)
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int idx = 0; idx < 4 * NW; ++idx) A[m][r][idx] = deq(m, r, idx);
  }
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    uint32_t X[4 * NW];
    if (act_ok && arow[j] != nullptr) {
#pragma unroll
      for (int v = 0; v < NW; ++v) {
        const uint4 t = kActFromL2 ? ld_act16_l2(arow[j] + act_col + 8 * v) : ld_act16(arow[j] + act_col + 8 * v);
        X[4 * v + 0] = t.x; X[4 * v + 1] = t.y; X[4 * v + 2] = t.z; X[4 * v + 3] = t.w;
      }
    } else {
#pragma unroll
      for (int v = 0; v < 4 * NW; ++v) X[v] = 0;
    }
#pragma unroll
    for (int st = 0; st < 2 * NW; ++st) {
      // Pairs p and p + 1 (elements 2p .. 2p + 3 of the lane's run) meet
      // activation words p and p + 1, which hold the same elements.
      const int p = 2 * st;
      const uint32_t b0 = X[p], b1 = X[p + 1];
#pragma unroll
      for (int m = 0; m < kSubtiles; ++m) {
        if constexpr (kHoist)
          mma_bf16(acc[m][j], A[m][0][p], A[m][1][p], A[m][0][p + 1], A[m][1][p + 1], b0, b1);
        else
          mma_bf16(acc[m][j], deq(m, 0, p), deq(m, 1, p), deq(m, 0, p + 1), deq(m, 1, p + 1), b0, b1);
      }
    }
  }
}

// Scale byte of row (m, r) in the lane's word of a chunk (byte 2m + r). A
// shift and a mask, not a byte permute: the 64-token instances, which hold
// 255 registers, spill less with them (ptxas: 60 bytes each against 128 and
// 172).
__device__ __forceinline__ uint32_t scale_byte(uint32_t word, int m, int r) {
  return (word >> (16 * m + 8 * r)) & 0xFFu;
}

// The warp-uniform choice of the one-multiply path (every scale of the warp's
// chunk below 128: no bit 7 in the lane's four bytes) or the two-multiply
// path, so the dequantisation has no per-pair branch to stall on. `s`: the
// lane's scale word of the chunk.
template <int NT, int NW, bool kActFromL2 = false>
__device__ __forceinline__ void chunk_mma(const uint32_t (&q)[kSubtiles][2][4], uint32_t s,
                                          const uint16_t* const (&arow)[NT], int act_col,
                                          bool act_ok, float (&acc)[kSubtiles][NT][4]) {
  static_assert(kSubtiles == 2, "a lane's scale word holds 2 subtiles x 2 rows");
  ScaleFactor f[kSubtiles][2];
  if (__any_sync(0xffffffffu, (s & 0x80808080u) != 0)) {
#pragma unroll
    for (int m = 0; m < kSubtiles; ++m)
#pragma unroll
      for (int r = 0; r < 2; ++r) f[m][r] = scale_factor_any(scale_byte(s, m, r));
    chunk_mma_scaled<NT, NW, true, kActFromL2>(q, f, arow, act_col, act_ok, acc);
  } else {
#pragma unroll
    for (int m = 0; m < kSubtiles; ++m)
#pragma unroll
      for (int r = 0; r < 2; ++r) f[m][r] = {scale_factor_small(scale_byte(s, m, r)), 0u};
    chunk_mma_scaled<NT, NW, false, kActFromL2>(q, f, arow, act_col, act_ok, acc);
  }
}

// Writes the outputs of one accumulator column: `lo` and `hi` (bias added) are
// weight rows `row` and `row + 1` for token row `r` of the tile. w13 rows come
// as (gate_j, up_j) pairs, so GEMM1 applies SwiGLU to the two and writes
// activation j = row / 2; GEMM2 scales both by the pair's routing weight `rw`.
template <bool kSwiglu>
__device__ __forceinline__ void store_columns(const GemmParams& p, int row, int r, float lo, float hi, float rw) {
  if constexpr (kSwiglu) {
    // GPT-OSS SwiGLU; comparisons written so a NaN input stays NaN (as
    // std::min/std::clamp in the reference), which fminf would drop.
    const float gg = p.limit < lo ? p.limit : lo;
    const float uu = hi < -p.limit ? -p.limit : (p.limit < hi ? p.limit : hi);
    const float a = gg / (1.f + expf(-p.alpha * gg)) * (uu + 1.f);
    const int q = row / 2;
    const int j = p.act_out_chunk_order ? int(chunk_order_pair_column(p.n_rows / 2, q)) : q;
    p.act_out[int64_t(r) * p.act_out_stride + j] = __bfloat16_as_ushort(__float2bfloat16_rn(a));
  } else if (row < p.n_valid) {  // n_valid is a multiple of 32: row + 1 is in range too
    *reinterpret_cast<float2*>(p.y_out + int64_t(r) * p.n_valid + row) = make_float2(rw * lo, rw * hi);
  }
}

// A decode block's epilogue inputs, requested before its main loop: the bias
// of the finishing warp's two weight rows and its token columns' pairs.
struct EpilogueInputs {
  float b_lo, b_hi;
  int pair[2];    // -1 = padding
  float w[2];     // GEMM2: the pairs' routing weights
};

using smxx::routed_expert;

// The routing weight of `pair` (GEMM2's epilogue): where the ids are read as
// given (pair_ids), a pair whose id is outside [0, E) weighs NaN; the
// grouping kernel has made the expert-grouped paths' weights so already.
__device__ __forceinline__ float routed_weight(const GemmParams& p, int pair) {
  return p.pair_ids != nullptr ? smxx::routed_weight(p.pair_ids[pair], p.route_w[pair], p.experts) : p.route_w[pair];
}

// Per-pair decode: the tile of pair `ti` among n <= 32 pairs (its expert, and
// whether it leads a tile: pair ti is the 8c-th pair of its expert) and its
// token columns (the pairs of that expert from ti on, one bit each). One load
// of the ids per lane, with no branch before it: the block's code loads wait
// for this round trip and no other (the expert comes from lane ti's load).
struct PairTile {
  int expert = 0;
  uint32_t columns = 0;
  bool leads = false;
};
__device__ __forceinline__ PairTile pair_tile(const int32_t* ids, int n, int experts, int ti) {
  const int lane = threadIdx.x & 31;
  const int id = routed_expert(ids[lane < n ? lane : n - 1], experts);
  const int e = __shfl_sync(0xffffffffu, id, ti);
  const uint32_t same = __ballot_sync(0xffffffffu, lane < n && id == e);
  const uint32_t before = same & ((1u << ti) - 1u);
  return {e, same & ~before, __popc(before) % 8 == 0};
}

// One more finished block of a tile: after every thread's stores (the
// barrier), one GPU-scope release add, so a reader that acquires the count
// sees the stores.
__device__ __forceinline__ void count_block_done(int32_t* count) {
  __syncthreads();
  if (threadIdx.x == 0) asm volatile("red.release.gpu.global.add.s32 [%0], 1;" ::"l"(count) : "memory");
}

// Waits until `*count` reaches `target` (acquire: GEMM1's stores counted in it
// are visible to the whole block after the barrier). GEMM2 is scheduled only
// once every GEMM1 block has started (allow_next_kernel), so the blocks it
// waits for are running or done.
__device__ __forceinline__ void wait_for_count(const int32_t* count, int target) {
  if (threadIdx.x == 0) {
    int v;
    do {
      asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(count) : "memory");
    } while (v < target);
  }
  __syncthreads();
}

// Codes of a decode warp (split K over one 32-row block, NT == 1): the lane's
// part of rows nb .. nb + 31 of expert e. nb is a multiple of 32, so the
// warp's first row group is even and its second the next one of the same
// layout tile, code_group_stride on; a chunk's offset is one 32-bit multiply
// (code_chunk_stride * K / 128 is at most 64 x K bytes, and moe_forward
// bounds K by 2^24) added to the lane's base. (The loop head held ~40
// instructions of 64-bit address arithmetic a chunk before.)
struct DecodeRows {
  const uint8_t* codes;   // the lane's 16 bytes of chunk 0 of the block's first row group
  const uint8_t* scales;  // the lane's scale word of chunk 0
  uint32_t chunk_stride;
  int64_t group_stride;

  // Chunk c: 64 code bytes per row per lane group (16 per lane) of the four
  // rows (m, r), and the lane's E8M0 scale word of that chunk (one MX block
  // per row).
  __device__ __forceinline__ void load(int c, uint32_t (&q)[kSubtiles][2][4], uint32_t& s) const {
    const uint8_t* chunk = codes + uint32_t(c) * chunk_stride;
#pragma unroll
    for (int m = 0; m < kSubtiles; ++m)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint4 v = ld_stream16(chunk + m * group_stride + 512 * r);
        q[m][r][0] = v.x; q[m][r][1] = v.y; q[m][r][2] = v.z; q[m][r][3] = v.w;
      }
    s = ld_stream4(scales + 128 * c);
  }
};

// Row group (16 weight rows, counted over all E * N rows of the layout) of row
// `row` of expert e. The count is non-negative and below 2^32 (E * N rows of
// K / 2 bytes each fit in memory), so it divides by shifts, and so do the
// group's tile (g / 8) and place in it (g % 8).
__device__ __forceinline__ uint32_t row_group(int e, int n_rows, int row) {
  return (uint32_t(e) * uint32_t(n_rows) + uint32_t(row)) >> 4;
}

// Start of row group gi's chunk 0 in the fragment-order codes.
__device__ __forceinline__ const uint8_t* group_codes(const GemmParams& p, uint32_t gi) {
  return p.codes + int64_t(gi >> 3) * p.code_tile_stride + int64_t(gi & 7) * p.code_group_stride;
}

// First scale byte of the 32-row block from row nb of expert e.
__device__ __forceinline__ const uint8_t* block_scales(const GemmParams& p, int e, int nb) {
  return p.scales + e * p.scale_expert_stride + int64_t(nb) * p.scale_row_stride;
}

__device__ __forceinline__ DecodeRows decode_rows(const GemmParams& p, int e, int nb, int lane) {
  return {group_codes(p, row_group(e, p.n_rows, nb)) + 16 * lane, block_scales(p, e, nb) + 4 * lane,
          uint32_t(p.code_chunk_stride), p.code_group_stride};
}

// Decode: chunks c0, c0 + step, ... below nfull, two a turn, the register
// sets in turn: the chunk in one set is dequantised (run(c, q, s)) while the
// next one's codes load into the other, with no register copies between
// chunks (19 moves a chunk, ~5% of its instructions). q[0], s[0] hold chunk
// c0 already (its loads go out as soon as the expert is known).
template <typename Run>
__device__ __forceinline__ void decode_chunks(const DecodeRows& rows, int c0, int step, int nfull,
                                              uint32_t (&q)[2][kSubtiles][2][4], uint32_t (&s)[2], Run&& run) {
  for (int c = c0; c < nfull; c += 2 * step) {
    if (c + step < nfull) rows.load(c + step, q[1], s[1]);
    run(c, q[0], s[0]);
    if (c + step >= nfull) break;
    if (c + 2 * step < nfull) rows.load(c + 2 * step, q[0], s[0]);
    run(c + step, q[1], s[1]);
  }
}

// The 64-wide tail chunk (K % 128 == 64) of rows nb .. nb + 31 of expert e:
// lane t owns 16 elements, half an MX block; lane (g, t) reads block t / 2's
// scale word of the tail's 64 scale bytes.
__device__ __forceinline__ void load_tail(const GemmParams& p, int e, int nb, uint32_t (&q)[kSubtiles][2][4],
                                          uint32_t& s) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, nfull = p.k / 128;
#pragma unroll
  for (int m = 0; m < kSubtiles; ++m)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint32_t gi = row_group(e, p.n_rows, nb + 16 * m);
      const uint8_t* tail = p.codes + int64_t(gi >> 3) * p.code_tile_stride + p.code_chunk_stride * nfull +
                            int64_t(gi & 7) * p.code_tail_group_stride;
      const uint2 v = ld_stream8(tail + 256 * r + 8 * lane);
      q[m][r][0] = v.x; q[m][r][1] = v.y; q[m][r][2] = 0; q[m][r][3] = 0;
    }
  s = ld_stream4(block_scales(p, e, nb) + 128 * nfull + 4 * (2 * g + t / 2));
}

// Index of the n-th set bit of `mask` (n from 0 to 7), or -1; no branches.
__device__ __forceinline__ int nth_set_bit(uint32_t mask, int n) {
#pragma unroll
  for (int i = 0; i < 7; ++i)
    if (i < n) mask &= mask - 1;
  return __ffs(int(mask)) - 1;
}

}  // namespace detail

// Decode (NT == 1): the 4 or 8 warps of a block (decode_block_warps in
// heuristics.h) split K over the same 32 weight rows (a GEMV has too few rows
// per SM otherwise to keep enough bytes in flight), reduced through shared
// memory in a fixed order; codes are loaded one chunk ahead. Prefill (NT > 1):
// the warps split N (4 x 32 = 128 weight rows) over the same tokens, so the
// block's activation loads hit L1 for three warps out of four, and each warp
// runs the whole K.
// Measured alternatives (docs/PERF.md): two chunks ahead (v2) was slower; so
// were 16-row blocks with every code load of a warp issued up front (v7b: the
// per-warp prologue and reduction then cost more than the exposed load
// latency they hid), and on SM90 a per-warp ring in shared memory filled by
// bulk copies (v16a: its refills take more instructions than the loads, and
// the decode chunk is bound by instructions).
template <int NT, int kDecodeWarps = 8>
struct GemmConfig {
  static_assert(kDecodeWarps == 4 || kDecodeWarps == 8 || kDecodeWarps == 16,
                "decode blocks of 4, 8 or 16 warps (heuristics.h)");
  static constexpr bool kSplitK = NT == 1;
  static constexpr int kWarps = kSplitK ? kDecodeWarps : 4;
  static constexpr int kRowsPerBlock = kSplitK ? 16 * kSubtiles : 16 * kSubtiles * kWarps;
  static constexpr int kDepth = 1;  // chunks of codes loaded ahead
  // Decode: 24 warps per SM (<= 85 registers, no spills): ncu at 16 warps per
  // SM showed 4 warps per scheduler issuing every 6.5 cycles with HBM at 31%,
  // so more warps overlap more.
  static constexpr int kMinBlocks = kSplitK ? 24 / kDecodeWarps : 1;
};

template <int NT, bool kSwiglu, int kDecodeWarps = 8>
__global__ void __launch_bounds__(GemmConfig<NT, kDecodeWarps>::kWarps * 32, GemmConfig<NT, kDecodeWarps>::kMinBlocks)
sm80_mxfp4_moe_gemm(const GemmParams p) {
  static_assert(NT == 1 || NT == 2 || NT == 4 || NT == 8, "token tile is 8*NT with NT in {1,2,4,8}");
  using Cfg = GemmConfig<NT, kDecodeWarps>;
  using detail::EpilogueInputs;
  constexpr int kW = Cfg::kWarps;
  // Split-K partial sums: [warp][(m*NT + j)*4 + c][lane], lanes contiguous so
  // the reduction reads are free of bank conflicts.
  __shared__ float red[Cfg::kSplitK ? kW : 1][kSubtiles * NT * 4][32];

  // Decode grids run a tile's row blocks one after the other (x), the tiles
  // in order (y), so the first tiles' GEMM1 outputs are complete while GEMM1
  // still runs the last ones; prefill grids run each row block over the tiles.
  const int ti = Cfg::kSplitK ? blockIdx.y : blockIdx.x;
  const int row_block = Cfg::kSplitK ? blockIdx.x : blockIdx.y;
  const int grid_tiles = Cfg::kSplitK ? gridDim.y : gridDim.x;
  // GEMM1 reads what the kernel just before it wrote (the tile schedule or
  // the router's ids): it waits first. GEMM2 needs GEMM1's output only for
  // its activations; its schedule, ids, weights and bias are from two or more
  // launches back, complete before this grid could start (allow_next_kernel
  // follows the wait in every kernel), so it requests them and its first
  // chunk of codes during GEMM1's tail and waits just before the main loop:
  // for the whole of GEMM1, or with tile counts for its own tile's blocks.
  if constexpr (kSwiglu) {
    smxx::wait_for_previous_kernels();
    smxx::allow_next_kernel();
  }
  const bool per_pair = NT == 1 && p.pair_ids != nullptr;
  // Three independent loads in flight at once (the schedule arrays hold
  // gridDim.x entries); entries past the tile count are not used.
  const int n_tiles = per_pair ? grid_tiles : *p.num_tiles;
  const detail::PairTile pt = per_pair ? detail::pair_tile(p.pair_ids, n_tiles, p.experts, ti) : detail::PairTile{};
  const int e = per_pair ? pt.expert : p.tile_expert[ti];
  const int row0 = per_pair ? ti : p.tile_row[ti];
  if (ti >= n_tiles) return;  // the grid is sized from an upper bound
  if (per_pair && !pt.leads) return;  // pair ti is a column of an earlier pair's tile
  // Row of the activations and outputs of token column `col`, pair `pair`.
  auto row_at = [&](int col, int pair) { return per_pair ? pair : row0 + col; };
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int nb = row_block * Cfg::kRowsPerBlock + (Cfg::kSplitK ? 0 : 16 * kSubtiles * warp);
  if (!Cfg::kSplitK && nb >= p.n_rows) return;  // N = Hp is a multiple of 64, not of 128

  // Row (m, r) of this lane is nb + 16m + 2g + r. Codes are in fragment order
  // (WeightSwizzle::kMmaRowGroups16 or kMmaRowTiles128): rows nb + 16m .. +15
  // are one group whose chunk c is a 1 KB image [r][lane][16 bytes]. Scales:
  // the 32-row block's chunk c is 128 bytes, the lane's word at 4 * lane.
  // Decode addresses a chunk from the lane's base (detail::DecodeRows);
  // prefill keeps a pointer per row group, with which its 64-token instances
  // spill less.
  const uint8_t* group[kSubtiles];
#pragma unroll
  for (int m = 0; m < kSubtiles; ++m) group[m] = detail::group_codes(p, detail::row_group(e, p.n_rows, nb + 16 * m));
  const uint8_t* sblock = detail::block_scales(p, e, nb);
  const detail::DecodeRows rows{group[0] + 16 * lane, sblock + 4 * lane, uint32_t(p.code_chunk_stride),
                                p.code_group_stride};
  const int nfull = p.k / 128;
  const int step = Cfg::kSplitK ? kW : 1;
  // Codes of chunk c (64 bytes per row per lane group, 16 per lane) and the
  // lane's E8M0 scales of that chunk: one MX block per row, four rows.
  auto load_full = [&](int c, uint32_t (&qq)[kSubtiles][2][4], uint32_t& ss) {
    if constexpr (Cfg::kSplitK) {
      rows.load(c, qq, ss);
    } else {
#pragma unroll
      for (int m = 0; m < kSubtiles; ++m)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const uint4 v = detail::ld_stream16(group[m] + p.code_chunk_stride * c + 512 * r + 16 * lane);
          qq[m][r][0] = v.x; qq[m][r][1] = v.y; qq[m][r][2] = v.z; qq[m][r][3] = v.w;
        }
      ss = detail::ld_stream4(sblock + 128 * c + 4 * lane);
    }
  };
  auto copy = [](uint32_t (&dq)[kSubtiles][2][4], uint32_t& ds, const uint32_t (&sq)[kSubtiles][2][4],
                 uint32_t sss) {
    ds = sss;
#pragma unroll
    for (int m = 0; m < kSubtiles; ++m)
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int w = 0; w < 4; ++w) dq[m][r][w] = sq[m][r][w];
  };
  // The first chunk's codes are requested as soon as the expert is known,
  // before the token columns' pointers and the epilogue inputs: at decode a
  // block runs ~3 chunks, so its start is on the critical path.
  uint32_t q[Cfg::kDepth + 1][kSubtiles][2][4], s[Cfg::kDepth + 1];
  const int c0 = Cfg::kSplitK ? warp : 0;
#pragma unroll
  for (int d = 0; d < Cfg::kDepth; ++d)
    if (c0 + d * step < nfull) load_full(c0 + d * step, q[d], s[d]);

  // Pair of token column `col` of the tile (-1: padding). Per-pair tiles:
  // lane l finds the pair of column l % 8 (one bit search a lane, after the
  // first loads are out), the other lanes take it by a shuffle.
  const int lane_pair = per_pair ? detail::nth_set_bit(pt.columns, lane & 7) : -1;
  auto pair_at = [&](int col) {
    return per_pair ? __shfl_sync(0xffffffffu, lane_pair, col) : p.sorted_pair[row0 + col];
  };
  const uint16_t* arow[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int pair = pair_at(8 * j + g);
    if (pair < 0) arow[j] = nullptr;
    else if (kSwiglu) arow[j] = p.act_in + int64_t(uint32_t(pair) / uint32_t(p.topk)) * p.act_in_stride;
    else arow[j] = p.act_in + int64_t(row_at(8 * j + g, pair)) * p.act_in_stride;
  }

  // Decode: a block is mostly latency, so the finishing warps request their
  // epilogue inputs now rather than after the reduction (a DRAM round trip
  // for the bias off the block's critical path). Warp w finishes fragment
  // (m, j) = (w / NT, w % NT).
  EpilogueInputs pre{0.f, 0.f, {-1, -1}, {0.f, 0.f}};
  if constexpr (Cfg::kSplitK) {
    static_assert(kSubtiles * NT <= Cfg::kWarps, "a finishing warp holds one fragment's inputs");
    if (warp < kSubtiles * NT) {
      const int m = warp / NT, j = warp % NT;
      const uint16_t* bias = p.bias + e * p.bias_expert_stride + nb + 16 * m + 2 * g;
      pre.b_lo = __bfloat162float(__ushort_as_bfloat16(bias[0]));
      pre.b_hi = __bfloat162float(__ushort_as_bfloat16(bias[1]));
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        pre.pair[h] = pair_at(8 * j + 2 * t + h);
        if (!kSwiglu && pre.pair[h] >= 0) pre.w[h] = detail::routed_weight(p, pre.pair[h]);
      }
    }
  }

  float acc[kSubtiles][NT][4];
#pragma unroll
  for (int m = 0; m < kSubtiles; ++m)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[m][j][c] = 0.f;

  if constexpr (!kSwiglu) {
    if (Cfg::kSplitK && p.tile_done != nullptr) {
      detail::wait_for_count(p.tile_done + ti, p.gemm1_row_blocks);
    } else {
      smxx::wait_for_previous_kernels();  // the activations are GEMM1's
    }
    smxx::allow_next_kernel();
  }
  auto run_chunk = [&](int c, const uint32_t (&qc)[kSubtiles][2][4], uint32_t sc) {
    const int col = c * 128 + t * 32;
    detail::chunk_mma<NT, 4>(qc, sc, arow, col, col < p.k_valid, acc);
  };
  if constexpr (Cfg::kSplitK) {
    static_assert(Cfg::kDepth == 1, "two register sets: one chunk loaded ahead");
    detail::decode_chunks(rows, c0, step, nfull, q, s, run_chunk);
  } else {
    // Prefill keeps register copies between chunks: its two-set loop spills
    // more (64-token tiles).
    for (int c = c0; c < nfull; c += step) {
      const int ahead = c + Cfg::kDepth * step;
      if (ahead < nfull) load_full(ahead, q[Cfg::kDepth], s[Cfg::kDepth]);
      run_chunk(c, q[0], s[0]);
#pragma unroll
      for (int d = 0; d < Cfg::kDepth; ++d) copy(q[d], s[d], q[d + 1], s[d + 1]);
    }
  }
  // 64-wide tail (K % 128 == 64): lane t owns 16 elements, half an MX block.
  if ((p.k & 127) != 0 && (!Cfg::kSplitK || warp == nfull % kW)) {
    detail::load_tail(p, e, nb, q[0], s[0]);
    const int col = nfull * 128 + t * 16;
    detail::chunk_mma<NT, 2>(q[0], s[0], arow, col, col < p.k_valid, acc);
  }

  // Epilogue of fragment (m, j): c0/c1 are weight row nb+16m+2g, c2/c3 the next
  // row, at token columns 2t and 2t+1 of subtile j.
  auto finish = [&](int m, int j, const float (&v)[4]) {
    const int row = nb + 16 * m + 2 * g;
    const uint16_t* bias = p.bias + e * p.bias_expert_stride;
    const float b_lo = __bfloat162float(__ushort_as_bfloat16(bias[row]));
    const float b_hi = __bfloat162float(__ushort_as_bfloat16(bias[row + 1]));
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int pair = pair_at(8 * j + 2 * t + h);
      if (pair < 0) continue;
      detail::store_columns<kSwiglu>(p, row, row_at(8 * j + 2 * t + h, pair), v[h] + b_lo, v[2 + h] + b_hi,
                                     kSwiglu ? 0.f : detail::routed_weight(p, pair));
    }
  };

  if constexpr (Cfg::kSplitK) {
    // Fixed-order reduction of the kW partial sums; warp w finishes the (m, j)
    // fragments with (m*NT + j) % kW == w.
#pragma unroll
    for (int m = 0; m < kSubtiles; ++m)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int cc = 0; cc < 4; ++cc) red[warp][(m * NT + j) * 4 + cc][lane] = acc[m][j][cc];
    __syncthreads();
    for (int mj = warp; mj < kSubtiles * NT; mj += kW) {
      float v[4];
#pragma unroll
      for (int cc = 0; cc < 4; ++cc) {
        float sum = red[0][mj * 4 + cc][lane];
#pragma unroll
        for (int w = 1; w < kW; ++w) sum += red[w][mj * 4 + cc][lane];
        v[cc] = sum;
      }
      const int m = mj / NT, j = mj % NT, row = nb + 16 * m + 2 * g;
#pragma unroll
      for (int h = 0; h < 2; ++h)
        if (pre.pair[h] >= 0)
          detail::store_columns<kSwiglu>(p, row, row_at(8 * j + 2 * t + h, pre.pair[h]), v[h] + pre.b_lo,
                                         v[2 + h] + pre.b_hi,
                                         pre.w[h]);
    }
    if (p.tile_done != nullptr) {
      if constexpr (kSwiglu) {
        detail::count_block_done(p.tile_done + ti);
      } else {
        // The kernels after this one find GEMM1 complete, as without the counts.
        smxx::wait_for_previous_kernels();
      }
    }
  } else {
#pragma unroll
    for (int m = 0; m < kSubtiles; ++m)
#pragma unroll
      for (int j = 0; j < NT; ++j) finish(m, j, acc[m][j]);
  }
}

}  // namespace mxmoe::portable
