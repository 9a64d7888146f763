// Router, expert grouping and combine kernels (plain CUDA, any SM) and their
// launchers, shared by the CUDA backends (see smxx_moe_kernels.h).
#include "cuda/common/smxx_moe_kernels.h"

#include <algorithm>
#include <atomic>

#include <cuda_bf16.h>
#include <cooperative_groups.h>
#include <cub/warp/warp_scan.cuh>

#include <fmt/format.h>

#include "cuda/common/grouping_heuristics.h"
#include "cuda/common/pdl.cuh"
#include "cuda/common/router_heuristics.h"
#include "cuda/common/smxx_routing.cuh"

namespace mxmoe::smxx {
namespace {

// Devices whose properties are cached (indices past it are asked every time).
constexpr int kCachedDevices = 64;

constexpr int kRouterThreads = 256;
constexpr int kRouterTokens = 16;
constexpr int kGroupThreads = 1024;
constexpr int kCombineThreads = 256;

__device__ __forceinline__ float bf16f(uint16_t v) { return __bfloat162float(__ushort_as_bfloat16(v)); }

// Top-k of one token's E logits by one warp (lane L holds experts L + 32 m),
// then a softmax over the k: each round picks what the sequential scan
// `best = first untaken; for e: if (!taken && l[e] > l[best]) best = e` picks,
// exactly: the first untaken expert if its logit is NaN (nothing compares
// greater than NaN), otherwise the largest untaken non-NaN logit with ties to
// the lower id. One thread scanning E x k entries (with its picks in local
// memory) took ~100 us a token at E = 128.
__device__ __forceinline__ void warp_topk(const float* __restrict__ lg, int E, int k, int lane,
                                          int32_t* __restrict__ ids, float* __restrict__ weights) {
  constexpr int kPerLane = int(kMaxExperts / 32);
  constexpr int kNone = 1 << 30;  // no candidate
  float v[kPerLane];
  uint32_t untaken = 0;
#pragma unroll
  for (int m = 0; m < kPerLane; ++m) {
    const int e = lane + 32 * m;
    v[m] = e < E ? lg[e] : 0.f;
    if (e < E) untaken |= 1u << m;
  }
  // The value of expert e (same e on every lane) from its lane. (A select of
  // v[e / 32] before one shuffle was compiled, in some instances, to a
  // dynamically indexed copy of v in local memory.)
  auto value_of = [&](int e) {
    float value = 0.f;
#pragma unroll
    for (int m = 0; m < kPerLane; ++m) {
      const float vm = __shfl_sync(0xffffffffu, v[m], e % 32);
      value = m == e / 32 ? vm : value;
    }
    return value;
  };
  int sel[kMaxTopk];
  float val[kMaxTopk];
#pragma unroll
  for (int i = 0; i < kMaxTopk; ++i) {
    if (i < k) {
      int first = untaken ? lane + 32 * (__ffs(untaken) - 1) : kNone;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) first = min(first, __shfl_xor_sync(0xffffffffu, first, o));
      int best = first;
      if (!isnan(value_of(first))) {
        float bv = 0.f;
        int be = kNone;
#pragma unroll
        for (int m = 0; m < kPerLane; ++m)
          if (((untaken >> m) & 1u) && !isnan(v[m]) && (be == kNone || v[m] > bv)) {
            bv = v[m];
            be = lane + 32 * m;
          }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
          const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
          const int oe = __shfl_xor_sync(0xffffffffu, be, o);
          if (oe != kNone && (be == kNone || ov > bv || (ov == bv && oe < be))) {
            bv = ov;
            be = oe;
          }
        }
        best = be;
      }
      if (best % 32 == lane) untaken &= ~(1u << (best / 32));
      sel[i] = best;
      val[i] = value_of(best);
    }
  }
  if (lane == 0) {
    float den = 0.f;
#pragma unroll
    for (int i = 0; i < kMaxTopk; ++i)
      if (i < k) den += expf(val[i] - val[0]);
#pragma unroll
    for (int i = 0; i < kMaxTopk; ++i)
      if (i < k) {
        ids[i] = sel[i];
        weights[i] = expf(val[i] - val[0]) / den;
      }
  }
}

// bf16 mma.m16n8k16 with fp32 accumulators (SM80+): d += a b.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// A block per 16 tokens: logits = x W^T + b on the tensor cores (bf16
// products are exact in fp32, summed in fp32), then a warp per token takes
// the top-k and the softmax (warp_topk). x is the mma A operand (16 tokens x
// k16) and W^T the B operand (k16 x 8 experts), both read from their rows as
// stored. A dot product does not change when both operands' K is permuted
// alike, so within each 32-wide K chunk thread t takes the physical elements
// [8t, 8t + 8) of its rows with one 16-byte load: words 0 / 1 are its k
// {2t, 2t + 1} / {2t + 8, 2t + 9} of the chunk's first k16 step, words 2 / 3
// of the second. (4-byte fragment loads, one per register, kept one block's
// loads at 8 L1 wavefronts per instruction: 53 µs at T = 1 on 32 experts.)
// The 8 warps split the experts' 8-wide n-tiles kSplitN ways (n-tile j to
// warp j % kSplitN, at most 8 tiles a warp) and the K chunks 8 / kSplitN
// ways; the slices' partial sums are added in slice order through shared
// memory. The split depends on E only, and an mma's output element does not
// depend on the other rows of its tile, so a token's logits do not depend on
// T or on its tile.
//
// Few tokens (SM90+): a warp walks ~11-23 chunks of K one after another, a
// round trip each, so one block took 18-32 µs at T = 1 (ncu). There a
// cluster of kCluster blocks takes the 16 tokens: block r of the cluster owns
// the warps' tile slot r (the same n-tiles, K slices and mma order as one
// block, so the same logits bit for bit), and with one tile a warp requests
// kDepth chunks before their mmas. Block 0 gathers the other blocks' logits
// from their shared memory and takes the top-k.
template <int kSplitN, int kCluster>
__global__ void __launch_bounds__(kRouterThreads)
smxx_router_topk(const uint16_t* __restrict__ x, int T, int H, int64_t x_stride, const uint16_t* __restrict__ rw,
                 int64_t rw_stride, const uint16_t* __restrict__ rb, int E, int k,
                 int32_t* __restrict__ ids, float* __restrict__ weights) {
  constexpr int kWarps = kRouterThreads / 32, kSplitK = kWarps / kSplitN, kSlots = 8;
  // A block's tile slots a warp: all 8, or in a cluster (at least as many
  // blocks as the slots E fills, router_cluster_size) one, slot `rank`.
  constexpr int kTilesPerWarp = kCluster == 1 ? kSlots : 1;
  constexpr int kDepth = kCluster == 1 ? 1 : 8;  // chunks whose loads are in flight together
  static_assert(kWarps % kSplitN == 0 && kRouterTokens == 16, "16-token blocks, warps split N x K");
  static_assert(kCluster == 1 || kCluster == 2 || kCluster == 4 || kCluster == 8, "a cluster of 1, 2, 4 or 8 blocks");
  extern __shared__ float part[];  // [kSplitK][16][E]; slice 0 becomes the logits
  const int rank = kCluster == 1 ? 0 : int(blockIdx.x % kCluster);
  const int tok0 = int(blockIdx.x / kCluster) * kRouterTokens, tokens = min(kRouterTokens, T - tok0);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int wn = warp % kSplitN, wk = warp / kSplitN, n_tiles = (E + 7) / 8, chunks = H / 32;
  // n-tile of this warp's slot i, and the cluster block that owns expert e.
  auto tile_of = [&](int i) { return wn + kSplitN * (rank + i); };
  auto owner = [&](int e) { return kCluster == 1 ? 0 : e / 8 / kSplitN; };
  wait_for_previous_kernels();
  allow_next_kernel();
  // A rows g and g + 8 (tokens past T read as 0); B columns: expert 8j + g of each n-tile.
  const uint4* xr[2];
  for (int h = 0; h < 2; ++h)
    xr[h] = g + 8 * h < tokens ? reinterpret_cast<const uint4*>(x + int64_t(tok0 + g + 8 * h) * x_stride) : nullptr;
  const uint4* wr[kTilesPerWarp];
#pragma unroll
  for (int i = 0; i < kTilesPerWarp; ++i) {
    const int j = tile_of(i), e = 8 * j + g;
    wr[i] = j < n_tiles && e < E ? reinterpret_cast<const uint4*>(rw + int64_t(e) * rw_stride) : nullptr;
  }
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  float acc[kTilesPerWarp][4] = {};
  for (int c0 = wk; c0 < chunks; c0 += kSplitK * kDepth) {
    uint4 lo[kDepth], hi[kDepth], b[kDepth][kTilesPerWarp];
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      const int v = 4 * (c0 + kSplitK * d) + t;  // the thread's 16 bytes of the chunk
      const bool in = c0 + kSplitK * d < chunks;
      lo[d] = in && xr[0] ? __ldg(xr[0] + v) : zero;
      hi[d] = in && xr[1] ? __ldg(xr[1] + v) : zero;
#pragma unroll
      for (int i = 0; i < kTilesPerWarp; ++i) b[d][i] = in && wr[i] ? __ldg(wr[i] + v) : zero;
    }
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      if (c0 + kSplitK * d >= chunks) break;  // warp-uniform
      const uint32_t a0[4] = {lo[d].x, hi[d].x, lo[d].y, hi[d].y}, a1[4] = {lo[d].z, hi[d].z, lo[d].w, hi[d].w};
#pragma unroll
      for (int i = 0; i < kTilesPerWarp; ++i) {
        if (tile_of(i) >= n_tiles) break;  // warp-uniform
        mma_bf16_16816(acc[i], a0, b[d][i].x, b[d][i].y);
        mma_bf16_16816(acc[i], a1, b[d][i].z, b[d][i].w);
      }
    }
  }
  // c0 / c1: token g, experts 8j + 2t, 8j + 2t + 1; c2 / c3: token g + 8.
#pragma unroll
  for (int i = 0; i < kTilesPerWarp; ++i) {
    const int j = tile_of(i);
    if (j >= n_tiles) break;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int tok = g + 8 * (c >> 1), e = 8 * j + 2 * t + (c & 1);
      if (e < E) part[(wk * kRouterTokens + tok) * E + e] = acc[i][c];
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kRouterTokens * E; i += kRouterThreads) {
    if (owner(i % E) != rank) continue;
    float sum = part[i];
    for (int q = 1; q < kSplitK; ++q) sum += part[q * kRouterTokens * E + i];
    part[i] = sum + bf16f(rb[i % E]);
  }
  if constexpr (kCluster > 1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    const cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // every block's logits are in its shared memory
    if (rank == 0)
      for (int i = threadIdx.x; i < tokens * E; i += kRouterThreads)
        if (const int r = owner(i % E); r != 0) part[i] = cluster.map_shared_rank(part, r)[i];
    cluster.sync();  // the others may exit: block 0 has read their shared memory
#else
    __trap();  // unreachable: the launcher runs clusters only where this kernel has SM90 code
#endif
  } else {
    __syncthreads();
  }
  if (rank == 0)
    for (int tok = warp; tok < tokens; tok += kWarps)
      warp_topk(part + tok * E, E, k, lane, ids + int64_t(tok0 + tok) * k, weights + int64_t(tok0 + tok) * k);
}

using RouterKernel = void (*)(const uint16_t*, int, int, int64_t, const uint16_t*, int64_t, const uint16_t*, int, int,
                              int32_t*, float*);

template <int kSplitN>
RouterKernel router_kernel_split(int cluster) {
  switch (cluster) {
    case 8: return smxx_router_topk<kSplitN, 8>;
    case 4: return smxx_router_topk<kSplitN, 4>;
    case 2: return smxx_router_topk<kSplitN, 2>;
    default: return smxx_router_topk<kSplitN, 1>;
  }
}

// The instance for a split (router_split_n) and a cluster size (router_cluster_size).
RouterKernel router_kernel(int split_n, int cluster) {
  if (split_n == 1) return router_kernel_split<1>(cluster);
  if (split_n == 2) return router_kernel_split<2>(cluster);
  return router_kernel_split<4>(cluster);
}

// Whether the router runs as SM90 code on device `dev` (clusters need it; an
// SM80 build JIT-compiled on a newer GPU does not have it). Every instance
// comes from the same fatbinary, so one answer per device, asked once.
Status router_has_sm90_code(int dev, const char* who, bool* yes) {
  static std::atomic<int> known[kCachedDevices] = {};  // 0 unknown, 1 yes, 2 no
  if (dev < kCachedDevices && known[dev].load(std::memory_order_relaxed) != 0) {
    *yes = known[dev].load(std::memory_order_relaxed) == 1;
    return Status::Ok();
  }
  cudaFuncAttributes fa{};
  MXMOE_RETURN_IF_ERROR(cuda_status(cudaFuncGetAttributes(&fa, router_kernel(1, 8)), who, "router attributes"));
  *yes = fa.binaryVersion >= 90;
  if (dev < kCachedDevices) known[dev].store(*yes ? 1 : 2, std::memory_order_relaxed);
  return Status::Ok();
}

// The grouping of (token, slot) pairs by expert: per-expert counts, a padded
// exclusive scan (each expert's rows rounded up to the token tile), the tile
// schedule, and a stable scatter of the pairs in expert order (pair order
// inside an expert), so every row's position is deterministic. A block walks
// one contiguous range of pairs: each warp owns a contiguous span of it and
// walks it twice, 32 pairs a step (a lane's rank among equal ids of the step
// is a match_any popcount): first counting its span per expert in a
// warp-private row of shared memory, then, once those rows are exclusive
// prefixes over the warps, placing each pair at its expert's first row for
// the range + the earlier warps' count + its rank so far. Few barriers
// whatever the pair count (one barrier-separated chunk of 1024 pairs at a
// time cost 172 us at 65536 pairs). Up to kOneBlockGroupPairs one block takes
// every pair (smxx_group_by_expert); past it one block a range counts
// (smxx_count_ranges) and one block a range places (smxx_place_ranges), each
// placing block summing the earlier ranges' counts.

// Shared-memory tables of a grouping block, E ints each, then a row per warp.
struct GroupTables {
  int* totals;      // [E] pairs of expert e (the range's, then all ranges')
  int* base;        // [E] row of the range's first pair of expert e
  int* first_tile;  // [E] first tile of expert e
  int* rows;        // [warps][E] the warp's count, then its running position, per expert
  __device__ GroupTables(int* smem, int E)
      : totals(smem), base(smem + E), first_tile(smem + 2 * E), rows(smem + 3 * E) {}
};

__host__ __device__ constexpr size_t group_smem_bytes(int E, int threads) {
  return size_t(3 + threads / 32) * size_t(E) * sizeof(int);
}

// The routing weights of pairs [begin, end) as the GEMMs read them, where
// the caller's are given (weights_in non-null): NaN for a pair whose id is
// outside [0, E). The router's need no copy.
__device__ __forceinline__ void check_weights(const int32_t* __restrict__ ids, const float* __restrict__ weights_in,
                                              int begin, int end, int E, float* __restrict__ weights_out) {
  if (weights_in == nullptr) return;
  for (int i = begin + threadIdx.x; i < end; i += blockDim.x)
    weights_out[i] = routed_weight(ids[i], weights_in[i], E);
}

// Walks this warp's span of pairs [begin, end): visit(e, peers, pair) on every
// lane (e = -1 past the end), then the step's pairs of e counted into mine[e].
template <typename Visit>
__device__ __forceinline__ void walk_span(const int32_t* __restrict__ ids, int begin, int end, int E, int* mine,
                                          Visit&& visit) {
  constexpr int kBatch = 4;  // steps whose id loads are in flight together
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  const int span = ((end - begin + warps - 1) / warps + 31) / 32 * 32;
  const int w0 = min(end, begin + warp * span), w1 = min(end, w0 + span);
  for (int p0 = w0; p0 < w1; p0 += 32 * kBatch) {
    int e[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int p = p0 + 32 * b + lane;
      e[b] = p < w1 ? routed_expert(ids[p], E) : -1;
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const unsigned peers = __match_any_sync(0xffffffffu, e[b]);
      visit(e[b], peers, p0 + 32 * b + lane);
      __syncwarp();
      if (e[b] >= 0 && lane == __ffs(peers) - 1) mine[e[b]] += __popc(peers);
      __syncwarp();
    }
  }
}

// Counts pairs [begin, end) per expert: each warp's row becomes its exclusive
// prefix over the earlier warps, totals[e] the range's count. Ends on a barrier.
__device__ __forceinline__ void count_range(const int32_t* __restrict__ ids, int begin, int end, int E,
                                            const GroupTables& t) {
  const int warps = blockDim.x >> 5;
  for (int i = threadIdx.x; i < warps * E; i += blockDim.x) t.rows[i] = 0;
  __syncthreads();
  walk_span(ids, begin, end, E, t.rows + (threadIdx.x >> 5) * E, [](int, unsigned, int) {});
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int sum = 0;
    for (int w = 0; w < warps; ++w) {
      const int c = t.rows[w * E + e];
      t.rows[w * E + e] = sum;
      sum += c;
    }
    t.totals[e] = sum;
  }
  __syncthreads();
}

// From totals[e] (all pairs): first_tile[e] by one warp's scan (up to 8
// experts a lane, cub::WarpScan across lanes; a single thread walking 128
// experts cost 11 us at T = 1 on the 120b shape); block 0 writes the tile
// count. Returns the tile count; ends on a barrier.
__device__ __forceinline__ int scan_tiles(const GroupTables& t, int E, int tile, int32_t* __restrict__ num_tiles) {
  static_assert(kMaxExperts <= 8 * 32, "the scan gives each lane of one warp at most 8 experts");
  using WarpScan = cub::WarpScan<int>;
  __shared__ typename WarpScan::TempStorage scan_storage;
  __shared__ int total_tiles;
  const int lane = threadIdx.x & 31;
  if (threadIdx.x < 32) {
    const int per = (E + 31) / 32, e0 = lane * per, e1 = min(E, e0 + per);
    int tiles = 0;
    for (int e = e0; e < e1; ++e) tiles += (t.totals[e] + tile - 1) / tile;
    int before = 0, all = 0;
    WarpScan(scan_storage).ExclusiveSum(tiles, before, all);
    for (int e = e0; e < e1; ++e) {
      t.first_tile[e] = before;
      before += (t.totals[e] + tile - 1) / tile;
    }
    if (lane == 0) {
      if (blockIdx.x == 0) *num_tiles = all;
      total_tiles = all;
    }
  }
  __syncthreads();
  return total_tiles;
}

// The tile schedule, spread over the grid (block b: tiles b * blockDim.x +
// thread, then a grid's threads on). Tile i belongs to the last expert whose
// first tile is <= i (binary search; experts with no tiles share their
// successor's first tile and are skipped).
__device__ __forceinline__ void write_tiles(const GroupTables& t, int E, int tile, int tiles,
                                            int32_t* __restrict__ tile_expert, int32_t* __restrict__ tile_row) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < tiles; i += gridDim.x * blockDim.x) {
    int lo = 0, hi = E - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (t.first_tile[mid] <= i) lo = mid; else hi = mid - 1;
    }
    tile_expert[i] = lo;
    tile_row[i] = i * tile;
  }
}

// Places pairs [begin, end) at base[e] + the earlier warps' count + the rank.
__device__ __forceinline__ void place_range(const int32_t* __restrict__ ids, int begin, int end, int E,
                                            const GroupTables& t, int32_t* __restrict__ sorted_pair,
                                            int32_t* __restrict__ pair_row) {
  int* const mine = t.rows + (threadIdx.x >> 5) * E;
  const unsigned lt_mask = (1u << (threadIdx.x & 31)) - 1u;
  walk_span(ids, begin, end, E, mine, [&](int e, unsigned peers, int pair) {
    if (e < 0) return;
    const int pos = t.base[e] + mine[e] + __popc(peers & lt_mask);
    sorted_pair[pos] = pair;
    pair_row[pair] = pos;
  });
}

// Up to kOneBlockGroupPairs: one block groups every pair.
__global__ void __launch_bounds__(kGroupThreads)
smxx_group_by_expert(const int32_t* __restrict__ ids, const float* __restrict__ weights_in, int n_pairs, int E,
                     int tile, float* __restrict__ weights_out, int32_t* __restrict__ sorted_pair,
                     int32_t* __restrict__ pair_row, int32_t* __restrict__ tile_expert,
                     int32_t* __restrict__ tile_row, int32_t* __restrict__ num_tiles) {
  extern __shared__ int ismem[];
  const GroupTables t(ismem, E);
  wait_for_previous_kernels();
  allow_next_kernel();
  check_weights(ids, weights_in, 0, n_pairs, E, weights_out);
  count_range(ids, 0, n_pairs, E, t);
  const int tiles = scan_tiles(t, E, tile, num_tiles);
  write_tiles(t, E, tile, tiles, tile_expert, tile_row);
  for (int r = threadIdx.x; r < tiles * tile; r += blockDim.x) sorted_pair[r] = -1;  // the pairs overwrite theirs
  for (int e = threadIdx.x; e < E; e += blockDim.x) t.base[e] = t.first_tile[e] * tile;
  __syncthreads();  // the -1 fill before the pairs' stores
  place_range(ids, 0, n_pairs, E, t, sorted_pair, pair_row);
}

// Past kOneBlockGroupPairs, first: block r counts range r (pairs [r *
// range_pairs, ...)) per expert into range_counts[r][E].
__global__ void __launch_bounds__(kGroupThreads)
smxx_count_ranges(const int32_t* __restrict__ ids, const float* __restrict__ weights_in, int n_pairs,
                  int range_pairs, int E, float* __restrict__ weights_out, int32_t* __restrict__ range_counts) {
  extern __shared__ int ismem[];
  const GroupTables t(ismem, E);
  const int begin = blockIdx.x * range_pairs, end = min(n_pairs, begin + range_pairs);
  wait_for_previous_kernels();  // the ids may come from the router, the kernel before
  allow_next_kernel();
  check_weights(ids, weights_in, begin, end, E, weights_out);
  count_range(ids, begin, end, E, t);
  for (int e = threadIdx.x; e < E; e += blockDim.x) range_counts[blockIdx.x * E + e] = t.totals[e];
}

// Then: block r places range r's pairs after the earlier ranges' pairs of
// each expert; the grid writes the schedule. It counts its own range before
// waiting for the counting kernel: the ids were complete before that kernel
// could let this one start (it allows after its own wait).
__global__ void __launch_bounds__(kGroupThreads)
smxx_place_ranges(const int32_t* __restrict__ ids, int n_pairs, int range_pairs, int E, int tile,
                  const int32_t* __restrict__ range_counts, int32_t* __restrict__ sorted_pair,
                  int32_t* __restrict__ pair_row, int32_t* __restrict__ tile_expert,
                  int32_t* __restrict__ tile_row, int32_t* __restrict__ num_tiles) {
  extern __shared__ int ismem[];
  const GroupTables t(ismem, E);
  const int begin = blockIdx.x * range_pairs, end = min(n_pairs, begin + range_pairs);
  const int ranges = gridDim.x, me = blockIdx.x, tid = threadIdx.x;
  count_range(ids, begin, end, E, t);  // the warps' rows; totals[] is rewritten below
  for (int e = tid; e < E; e += blockDim.x) {
    t.totals[e] = 0;
    t.base[e] = 0;
  }
  __syncthreads();
  wait_for_previous_kernels();
  allow_next_kernel();
  // All ranges' counts and the earlier ranges', per expert: thread (q, e)
  // sums ranges q, q + groups, ... so a thread's loads go out together.
  const int groups = blockDim.x / E;
  if (tid < groups * E) {
    const int e = tid % E;
    int all = 0, before = 0;
    for (int r = tid / E; r < ranges; r += groups) {
      const int c = range_counts[r * E + e];
      all += c;
      before += r < me ? c : 0;
    }
    atomicAdd(&t.totals[e], all);
    atomicAdd(&t.base[e], before);
  }
  __syncthreads();
  const int tiles = scan_tiles(t, E, tile, num_tiles);
  write_tiles(t, E, tile, tiles, tile_expert, tile_row);
  // -1 in each expert's padding rows, the rows no range's pairs take (a warp
  // an expert: warp w of block b takes expert b * warps + w, then a grid's warps on).
  const int warp = tid >> 5, lane = tid & 31, warps = blockDim.x >> 5;
  for (int e = me * warps + warp; e < E; e += ranges * warps) {
    const int used = t.first_tile[e] * tile + t.totals[e];
    const int rows_end = (t.first_tile[e] + (t.totals[e] + tile - 1) / tile) * tile;
    for (int r = used + lane; r < rows_end; r += 32) sorted_pair[r] = -1;
  }
  for (int e = tid; e < E; e += blockDim.x) t.base[e] += t.first_tile[e] * tile;
  __syncthreads();
  place_range(ids, begin, end, E, t, sorted_pair, pair_row);
}

// Four consecutive outputs: fp32 in one 16-byte store, bf16 (rounded to
// nearest even) in one 8-byte store.
__device__ __forceinline__ void store4(float* dst, float4 v) { *reinterpret_cast<float4*>(dst) = v; }
__device__ __forceinline__ void store4(uint16_t* dst, float4 v) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
  *reinterpret_cast<uint2*>(dst) =
      make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
}

// y[t] = sum over slots s = 0..k-1, in that order, of the GEMM2 row of (t, s):
// row pair_row[t k + s], or row t k + s where pair_row is null (per-pair
// decode stores each pair at its own index). Block (t, b) takes 4-float
// groups [b, b + 1) * kCombineThreads of token t, one per thread. A thread
// issues all k row indices together, then all k rows, then sums: two round
// trips to L2 on grouped rows, one per pair. (A runtime-k loop let ptxas
// interleave each row's index load with the previous rows' sums: four round
// trips at k = 4.)
template <typename Out>
__global__ void __launch_bounds__(kCombineThreads)
smxx_combine(const float* __restrict__ ypair, const int32_t* __restrict__ pair_row, int k, int H,
             Out* __restrict__ y) {
  const int tok = blockIdx.x;
  const int c = blockIdx.y * kCombineThreads + threadIdx.x;
  wait_for_previous_kernels();
  allow_next_kernel();
  if (c >= H / 4) return;
  int64_t row[kMaxTopk];
#pragma unroll
  for (int i = 0; i < kMaxTopk; ++i)
    if (i < k) {
      const int64_t pair = int64_t(tok) * k + i;
      row[i] = pair_row ? pair_row[pair] : pair;
    }
  float4 v[kMaxTopk];
#pragma unroll
  for (int i = 0; i < kMaxTopk; ++i)
    if (i < k) v[i] = reinterpret_cast<const float4*>(ypair + row[i] * H)[c];
  float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
  for (int i = 0; i < kMaxTopk; ++i) {
    if (i >= k) break;
    s.x += v[i].x; s.y += v[i].y; s.z += v[i].z; s.w += v[i].w;
  }
  store4(y + int64_t(tok) * H + 4 * c, s);
}

// One entry a thread (see launch_check_routing).
__global__ void smxx_check_routing(const int32_t* __restrict__ ids, const float* __restrict__ weights, int pairs,
                                   int E, int32_t* __restrict__ ids_out, float* __restrict__ weights_out) {
  wait_for_previous_kernels();  // the previous forward's kernels may still read ids_out
  allow_next_kernel();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= pairs) return;
  ids_out[i] = routed_expert(ids[i], E);
  weights_out[i] = routed_weight(ids[i], weights[i], E);
}

}  // namespace

Status cuda_status(cudaError_t err, const char* who, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Status::CudaError(fmt::format("{}: {}: {}", who, what, cudaGetErrorString(err)));
}

namespace {

// A device attribute, read once per device: a forward asks for it on every
// call, and the attributes of a device do not change while the process runs.
Status cached_attribute(cudaDeviceAttr attr, std::atomic<int> (&cache)[kCachedDevices], const char* who,
                        int* value) {
  int dev = 0;
  MXMOE_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&dev), who, "cudaGetDevice"));
  if (dev < kCachedDevices)
    if (const int v = cache[dev].load(std::memory_order_relaxed); v > 0) {
      *value = v - 1;
      return Status::Ok();
    }
  MXMOE_RETURN_IF_ERROR(cuda_status(cudaDeviceGetAttribute(value, attr, dev), who, "device attribute"));
  if (dev < kCachedDevices) cache[dev].store(*value + 1, std::memory_order_relaxed);
  return Status::Ok();
}

}  // namespace

Status kernels_may_overlap(const char* who, bool* overlap) {
  static std::atomic<int> major[kCachedDevices] = {};  // 0 unknown, else the value + 1
  int value = 0;
  MXMOE_RETURN_IF_ERROR(cached_attribute(cudaDevAttrComputeCapabilityMajor, major, who, &value));
  *overlap = value >= 9;
  return Status::Ok();
}

Status sm_count(const char* who, int* sms) {
  static std::atomic<int> count[kCachedDevices] = {};
  return cached_attribute(cudaDevAttrMultiProcessorCount, count, who, sms);
}

Status cooperative_launches(const char* who, bool* yes) {
  static std::atomic<int> known[kCachedDevices] = {};
  int v = 0;
  MXMOE_RETURN_IF_ERROR(cached_attribute(cudaDevAttrCooperativeLaunch, known, who, &v));
  *yes = v != 0;
  return Status::Ok();
}

Status launch_router_topk(const uint16_t* x, int64_t T, int64_t H, int64_t x_stride, const uint16_t* router_weight,
                          int64_t router_stride, const uint16_t* router_bias, int64_t E, int64_t k, int32_t* ids,
                          float* weights, bool overlap, cudaStream_t stream, const char* who) {
  if (H % 32 != 0 || router_stride % 8 != 0 || x_stride < H || x_stride % 8 != 0 || E > kMaxExperts)
    return Status::Unsupported(fmt::format("{}: router needs H % 32 == 0, x and router row strides % 8 == 0 (x's "
                                           "at least H) and at most {} experts", who, kMaxExperts));
  const int split_n = router_split_n(E);
  const int64_t token_blocks = (T + kRouterTokens - 1) / kRouterTokens;
  int cluster = 1;
  if (overlap) {  // SM90+
    int dev = 0, sms = 0;
    MXMOE_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&dev), who, "cudaGetDevice"));
    MXMOE_RETURN_IF_ERROR(sm_count(who, &sms));
    cluster = router_cluster_size(E, token_blocks, sms);
    bool sm90_code = false;
    if (cluster > 1) MXMOE_RETURN_IF_ERROR(router_has_sm90_code(dev, who, &sm90_code));
    if (!sm90_code) cluster = 1;
  }
  const RouterKernel kernel = router_kernel(split_n, cluster);
  const size_t smem = size_t(kRouterTokens * E) * sizeof(float) * size_t(kRouterThreads / 32 / split_n);
  return cuda_status(launch_kernel_in_clusters(kernel, dim3(unsigned(token_blocks * cluster)), dim3(kRouterThreads),
                                               smem, stream, overlap, unsigned(cluster), x, int(T), int(H),
                                               x_stride, router_weight, router_stride, router_bias, int(E), int(k), ids, weights),
                     who, "router launch");
}

Status launch_group_by_expert(const int32_t* ids, const float* weights_in, int64_t pairs, int64_t E, int tile,
                              float* weights_out, int32_t* range_counts, int32_t* sorted_pair, int32_t* pair_row,
                              int32_t* tile_expert, int32_t* tile_row, int32_t* num_tiles, bool overlap,
                              cudaStream_t stream, const char* who) {
  if (weights_in != nullptr && weights_out == nullptr)
    return Status::InvalidArgument(fmt::format("{}: grouping a caller's routing needs the weights' output", who));
  const int64_t ranges = group_ranges(pairs);
  if (ranges == 1) {
    // Fewer threads for few pairs: at most one 32-pair step a warp, so the
    // short walk is not paid for with 32 warps' rows of counts.
    const int threads = int(std::min<int64_t>(kGroupThreads, std::max<int64_t>(128, (pairs + 31) / 32 * 32)));
    return cuda_status(launch_kernel(smxx_group_by_expert, dim3(1), dim3(unsigned(threads)),
                                     group_smem_bytes(int(E), threads), stream, overlap, ids, weights_in, int(pairs),
                                     int(E), tile, weights_out, sorted_pair, pair_row, tile_expert, tile_row,
                                     num_tiles),
                       who, "grouping launch");
  }
  if (range_counts == nullptr)
    return Status::InvalidArgument(fmt::format("{}: grouping {} pairs needs the per-range counts' workspace", who,
                                               pairs));
  const int range_pairs = int(group_range_pairs(pairs));
  const size_t smem = group_smem_bytes(int(E), kGroupThreads);
  MXMOE_RETURN_IF_ERROR(cuda_status(launch_kernel(smxx_count_ranges, dim3(unsigned(ranges)), dim3(kGroupThreads),
                                                  smem, stream, overlap, ids, weights_in, int(pairs), range_pairs,
                                                  int(E), weights_out, range_counts),
                                    who, "grouping count launch"));
  return cuda_status(launch_kernel(smxx_place_ranges, dim3(unsigned(ranges)), dim3(kGroupThreads), smem, stream,
                                   overlap, ids, int(pairs), range_pairs, int(E), tile,
                                   static_cast<const int32_t*>(range_counts), sorted_pair, pair_row, tile_expert,
                                   tile_row, num_tiles),
                     who, "grouping place launch");
}

Status launch_combine(const float* ypair, const int32_t* pair_row, int64_t T, int64_t k, int64_t H, float* y,
                      uint16_t* y_bf16, bool overlap, cudaStream_t stream, const char* who) {
  if ((y == nullptr) == (y_bf16 == nullptr))
    return Status::InvalidArgument(fmt::format("{}: combine needs exactly one of an fp32 and a bf16 y", who));
  const dim3 grid(unsigned(T), unsigned((H / 4 + kCombineThreads - 1) / kCombineThreads));
  const cudaError_t err =
      y ? launch_kernel(smxx_combine<float>, grid, dim3(kCombineThreads), 0, stream, overlap, ypair, pair_row,
                        int(k), int(H), y)
        : launch_kernel(smxx_combine<uint16_t>, grid, dim3(kCombineThreads), 0, stream, overlap, ypair, pair_row,
                        int(k), int(H), y_bf16);
  return cuda_status(err, who, "combine launch");
}

Status launch_check_routing(const int32_t* ids, const float* weights, int64_t pairs, int64_t E, int32_t* ids_out,
                            float* weights_out, bool overlap, cudaStream_t stream, const char* who) {
  constexpr int kThreads = 256;
  return cuda_status(launch_kernel(smxx_check_routing, dim3(unsigned((pairs + kThreads - 1) / kThreads)),
                                   dim3(kThreads), 0, stream, overlap, ids, weights, int(pairs), int(E), ids_out,
                                   weights_out),
                     who, "routing check launch");
}

}  // namespace mxmoe::smxx
