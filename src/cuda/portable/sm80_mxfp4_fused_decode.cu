// The decode forward in one launch: GEMM1 (+ bias, SwiGLU), GEMM2 (+ bias,
// times the routing weight) and the sum over each token's k slots, on the
// same blocks of one cooperative grid. A chain of kernels pays each
// boundary (~1.4 us even for a kernel that does nothing, docs/PERF.md) and
// GEMM2's first weight bytes leave DRAM only once GEMM1 has drained; here
// the blocks that finish their GEMM1 rows early pull their first GEMM2 rows
// into L2 while the others finish, and one grid-wide barrier stands between
// the two GEMMs. As built it loses to the chain at every shape measured, so
// it runs only where forced (portable::fused_decode); docs/PERF.md ("The
// decode in one launch") has where its time goes.
//
// Phases of every block:
//   0. The tile schedule, built in shared memory from the routing ids by
//      every block alike (no kernel, no global state): the (token, slot)
//      pairs grouped by expert in pair order, 8 to a tile, tiles in expert
//      order. So pairs that share an expert dequantise its weights once.
//   1. GEMM1 items (tile, 32 rows of 2 Ip), grid-stride: the decode GEMM's
//      split-K body (sm80_mxfp4_gemm.cuh: 8 warps split K, reduced in a
//      fixed order), SwiGLU into the pair's row of `act`. Then each block
//      zeroes its share of the combine counts and prefetches the weights of
//      its first GEMM2 item into L2.
//   2. The grid barrier: every pair's row of act is complete and visible.
//   3. GEMM2 items (tile, 32 rows of H): route_w * (acc + bias) into the
//      pair's row of ypair; then one count per (token, 32 rows) of y: the
//      block whose add completes a token's k slots sums its k rows in slot
//      order into y. Fixed orders everywhere: results are bitwise the same
//      whatever the timing.
// The counts live in the workspace and are zeroed before the barrier in the
// same forward: nothing is carried between forwards, so forwards on other
// workspaces (other streams) may run at the same time. The barrier's state
// is the cooperative launch's own.
#include <atomic>

#include <cooperative_groups.h>

#include "cuda/common/pdl.cuh"
#include "cuda/common/smxx_moe_kernels.h"
#include "cuda/portable/heuristics.h"
#include "cuda/portable/sm80_mxfp4_fused_decode.h"
#include "cuda/portable/sm80_mxfp4_gemm.cuh"

namespace mxmoe::portable {
namespace {

constexpr int kWarps = kFusedDecodeWarps;
constexpr int kThreads = kWarps * 32;
constexpr int kColumns = 8;                       // token columns of a tile: the mma's N
constexpr int kPairWarps = int(kFusedMaxPairs) / 32;  // warps that hold one pair a lane
constexpr int kRows = 16 * kSubtiles;             // weight rows of an item
static_assert(kFusedMaxPairs % 32 == 0 && kPairWarps <= kWarps, "each pair has a thread of the schedule's warps");
static_assert(kColumns <= kWarps, "the combine takes a warp a token column");
static_assert(kSubtiles <= kWarps, "a finishing warp a subtile");

// The tile schedule, the same in every block: tile i holds expert[i]'s pairs
// pair[i][0..7] (-1: no pair), tiles in expert order, an expert's pairs in
// pair order, 8 a tile.
struct TileSchedule {
  int n_tiles;
  int16_t expert[kFusedMaxPairs];
  int16_t pair[kFusedMaxPairs][kColumns];
};

struct SharedState {
  TileSchedule tiles;
  int count[kPairWarps][smxx::kMaxExperts];  // pairs of each expert among warp w's 32
  int base[smxx::kMaxExperts];               // first tile of each expert
  float red[kWarps][kSubtiles * 4][32];      // split-K partial sums, lanes contiguous
  bool last_slot[kColumns];                  // this block completed the column's token
};

// Phase 0. Pair i = thread i (i < n <= kFusedMaxPairs): its rank among its
// expert's pairs is its rank in its warp (one match) plus the count of that
// expert in the warps before; each expert's first tile is an exclusive scan
// of its tile counts (warp 0, 32 experts a step).
__device__ __forceinline__ void build_schedule(const int32_t* __restrict__ ids, int n, int experts, SharedState& sh) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int e = tid < n ? smxx::routed_expert(ids[tid], experts) : -1;
  for (int j = tid; j < kPairWarps * smxx::kMaxExperts; j += kThreads) (&sh.count[0][0])[j] = 0;
  for (int j = tid; j < n * kColumns; j += kThreads) (&sh.tiles.pair[0][0])[j] = -1;
  __syncthreads();
  int rank = 0;
  if (warp < kPairWarps) {
    const uint32_t same = __match_any_sync(0xffffffffu, tid < n ? e : -1 - lane);  // idle lanes match nobody
    rank = __popc(same & ((1u << lane) - 1u));
    if (tid < n && rank == 0) sh.count[warp][e] = __popc(same);
  }
  __syncthreads();
  if (tid < n)
    for (int w = 0; w < warp; ++w) rank += sh.count[w][e];
  if (warp == 0) {
    int carry = 0;
    for (int e0 = 0; e0 < experts; e0 += 32) {
      const int ex = e0 + lane;
      int c = 0;
      if (ex < experts)
        for (int w = 0; w < kPairWarps; ++w) c += sh.count[w][ex];
      const int tiles = (c + kColumns - 1) / kColumns;
      int incl = tiles;
#pragma unroll
      for (int d = 1; d < 32; d *= 2) {
        const int o = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= d) incl += o;
      }
      if (ex < experts) sh.base[ex] = carry + incl - tiles;
      carry += __shfl_sync(0xffffffffu, incl, 31);
    }
    if (lane == 0) sh.tiles.n_tiles = carry;
  }
  __syncthreads();
  if (tid < n) {
    const int tile = sh.base[e] + rank / kColumns;
    sh.tiles.pair[tile][rank % kColumns] = int16_t(tid);
    if (rank % kColumns == 0) sh.tiles.expert[tile] = int16_t(e);
  }
  __syncthreads();
}

// One item: rows nb .. nb + 31 of the tile's expert against its token
// columns, the decode GEMM's split-K body (sm80_mxfp4_gemm.cuh). GEMM1
// (kGemm1) reads x rows (pair / k) and writes SwiGLU into act row `pair`;
// GEMM2 reads act rows from L2 (written before the barrier) and writes
// route_w * (acc + bias) into ypair row `pair`.
template <bool kGemm1>
__device__ __forceinline__ void run_item(const GemmParams& p, SharedState& sh, int tile, int nb) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int e = sh.tiles.expert[tile];
  const detail::DecodeRows rows = detail::decode_rows(p, e, nb, lane);
  const int nfull = p.k / 128;
  uint32_t q[2][kSubtiles][2][4], s[2];
  if (warp < nfull) rows.load(warp, q[0], s[0]);

  // The B fragment's column g is the tile's pair g.
  const int col_pair = sh.tiles.pair[tile][g];
  const int64_t act_row = kGemm1 ? col_pair / p.topk : col_pair;
  const uint16_t* const arow[1] = {col_pair < 0 ? nullptr : p.act_in + act_row * p.act_in_stride};
  // The finishing warps' epilogue inputs, requested before the main loop.
  detail::EpilogueInputs pre{0.f, 0.f, {-1, -1}, {0.f, 0.f}};
  if (warp < kSubtiles) {
    const uint16_t* bias = p.bias + e * p.bias_expert_stride + nb + 16 * warp + 2 * g;
    pre.b_lo = __bfloat162float(__ushort_as_bfloat16(bias[0]));
    pre.b_hi = __bfloat162float(__ushort_as_bfloat16(bias[1]));
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      pre.pair[h] = sh.tiles.pair[tile][2 * t + h];
      if (!kGemm1 && pre.pair[h] >= 0) pre.w[h] = detail::routed_weight(p, pre.pair[h]);
    }
  }

  float acc[kSubtiles][1][4];
#pragma unroll
  for (int m = 0; m < kSubtiles; ++m)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[m][0][c] = 0.f;
  detail::decode_chunks(rows, warp, kWarps, nfull, q, s, [&](int c, const uint32_t (&qc)[kSubtiles][2][4], uint32_t sc) {
    const int col = c * 128 + t * 32;
    detail::chunk_mma<1, 4, !kGemm1>(qc, sc, arow, col, col < p.k_valid, acc);
  });
  if ((p.k & 127) != 0 && warp == nfull % kWarps) {  // the 64-wide tail
    detail::load_tail(p, e, nb, q[0], s[0]);
    const int col = nfull * 128 + t * 16;
    detail::chunk_mma<1, 2, !kGemm1>(q[0], s[0], arow, col, col < p.k_valid, acc);
  }

#pragma unroll
  for (int m = 0; m < kSubtiles; ++m)
#pragma unroll
    for (int c = 0; c < 4; ++c) sh.red[warp][m * 4 + c][lane] = acc[m][0][c];
  __syncthreads();
  if (warp < kSubtiles) {
    float v[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      float sum = sh.red[0][warp * 4 + c][lane];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) sum += sh.red[w][warp * 4 + c][lane];
      v[c] = sum;
    }
    const int row = nb + 16 * warp + 2 * g;
#pragma unroll
    for (int h = 0; h < 2; ++h)
      if (pre.pair[h] >= 0)
        detail::store_columns<kGemm1>(p, row, pre.pair[h], v[h] + pre.b_lo, v[2 + h] + pre.b_hi, pre.w[h]);
    if (!kGemm1) __threadfence();  // release: the rows before the count that publishes them
  }
  __syncthreads();  // red is free again; GEMM2's rows are stored
}

__device__ __forceinline__ void store1(float* dst, float v) { *dst = v; }
__device__ __forceinline__ void store1(uint16_t* dst, float v) { *dst = __bfloat16_as_ushort(__float2bfloat16_rn(v)); }

// After a GEMM2 item: one count per token column on (token, row block rb);
// the block whose add makes it k sums that token's k rows of ypair (slot
// order) into y. Rows come from L2: other blocks stored them in this kernel.
template <typename Out>
__device__ __forceinline__ void combine_completed(const GemmParams& p, const FusedDecodeArgs& f, SharedState& sh,
                                                  int tile, int rb, Out* __restrict__ y) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, k = p.topk;
  const int rbs = p.n_valid / kRows;
  if (threadIdx.x < kColumns) {
    const int pair = sh.tiles.pair[tile][threadIdx.x];
    bool last = false;
    if (pair >= 0) {
      last = atomicAdd(f.counts + (pair / k) * rbs + rb, 1) == k - 1;
      if (last) __threadfence();  // acquire: the other slots' rows after their counts
    }
    sh.last_slot[threadIdx.x] = last;
  }
  __syncthreads();
  if (warp < kColumns && sh.last_slot[warp]) {
    const int64_t tok = sh.tiles.pair[tile][warp] / k, row = int64_t(rb) * kRows + lane;
    float sum = 0.f;
    for (int j = 0; j < k; ++j) sum += __ldcg(p.y_out + (tok * k + j) * p.n_valid + row);
    store1(y + tok * p.n_valid + row, sum);
  }
}

__device__ __forceinline__ void prefetch_l2(const void* ptr) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(ptr));
}

// Requests GEMM2 item (e, nb)'s codes and scales into L2 (128-byte lines): a
// chunk is 1 KB per 16-row group (DecodeRows::load), the 32-row block's
// scales 128 bytes a chunk and half that for the tail.
__device__ __forceinline__ void prefetch_item(const GemmParams& p, int e, int nb) {
  const uint8_t* codes = detail::group_codes(p, detail::row_group(e, p.n_rows, nb));
  const int nfull = p.k / 128;
  for (int l = threadIdx.x; l < nfull * 16; l += kThreads)
    prefetch_l2(codes + int64_t(l >> 4) * p.code_chunk_stride + ((l >> 3) & 1) * p.code_group_stride +
                128 * (l & 7));
  const uint8_t* scales = detail::block_scales(p, e, nb);
  for (int l = threadIdx.x; l < nfull + ((p.k & 127) != 0); l += kThreads) prefetch_l2(scales + 128 * l);
}

template <typename Out>
__global__ void __launch_bounds__(kThreads, kFusedDecodeBlocksPerSm)
sm80_mxfp4_fused_decode(const GemmParams g1, const GemmParams g2, const FusedDecodeArgs f, Out* __restrict__ y) {
  __shared__ SharedState sh;
  smxx::wait_for_previous_kernels();  // the router's ids, where it ran
  build_schedule(f.ids, int(f.tokens) * g1.topk, g1.experts, sh);
  const int n_tiles = sh.tiles.n_tiles;
  const int rb1 = g1.n_rows / kRows, rb2 = g2.n_valid / kRows;
  const int n1 = n_tiles * rb1, n2 = n_tiles * rb2;
  for (int v = blockIdx.x; v < n1; v += gridDim.x) run_item<true>(g1, sh, v / rb1, (v % rb1) * kRows);
  for (int i = blockIdx.x * kThreads + threadIdx.x; i < int(f.tokens) * rb2; i += gridDim.x * kThreads) f.counts[i] = 0;
  if (int(blockIdx.x) < n2) prefetch_item(g2, sh.tiles.expert[blockIdx.x / rb2], (blockIdx.x % rb2) * kRows);
  cooperative_groups::this_grid().sync();
  for (int v = blockIdx.x; v < n2; v += gridDim.x) {
    const int tile = v / rb2, rb = v % rb2;
    run_item<false>(g2, sh, tile, rb * kRows);
    combine_completed(g2, f, sh, tile, rb, y);
    __syncthreads();  // last_slot is free again
  }
}

// Blocks of the kernel the current device holds at once (a cooperative grid
// may not exceed it); 0 when a query fails. The blocks an SM holds are asked
// once per device (the SM count is cached by sm_count).
template <typename Out>
int coresident_blocks() {
  static std::atomic<int> per_sm_of[64] = {};
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64 || !smxx::sm_count("portable", &sms).ok()) return 0;
  if (per_sm_of[dev].load() == 0) {
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, sm80_mxfp4_fused_decode<Out>, kThreads, 0) !=
        cudaSuccess)
      return 0;
    per_sm_of[dev] = per_sm;
  }
  return per_sm_of[dev].load() * sms;
}

template <typename Out>
cudaError_t launch(const GemmParams& g1, const GemmParams& g2, const FusedDecodeArgs& f, Out* y,
                   cudaStream_t stream) {
  const int most = coresident_blocks<Out>();
  if (most == 0) return cudaErrorInvalidConfiguration;
  const int blocks = fused_decode_blocks(f.tokens, g1.topk, g1.n_rows / kRows, g2.n_valid / kRows, most);
  return smxx::launch_kernel_in_mode(sm80_mxfp4_fused_decode<Out>, dim3(unsigned(blocks)), dim3(kThreads), 0, stream,
                                     smxx::LaunchMode{false, 1, true}, g1, g2, f, y);
}

}  // namespace

cudaError_t launch_mxfp4_fused_decode(const GemmParams& g1, const GemmParams& g2, const FusedDecodeArgs& f, float* y,
                                      uint16_t* y_bf16, cudaStream_t stream) {
  if ((y == nullptr) == (y_bf16 == nullptr) || f.tokens <= 0 || f.tokens * g1.topk > kFusedMaxPairs ||
      g1.experts > smxx::kMaxExperts || g2.n_valid % kRows != 0 || g1.n_rows % kRows != 0)
    return cudaErrorInvalidValue;
  return y ? launch(g1, g2, f, y, stream) : launch(g1, g2, f, y_bf16, stream);
}

}  // namespace mxmoe::portable
