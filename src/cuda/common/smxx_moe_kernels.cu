// Router, expert grouping and combine kernels (plain CUDA, any SM) and their
// launchers, shared by the CUDA backends (see smxx_moe_kernels.h).
#include "cuda/common/smxx_moe_kernels.h"

#include <algorithm>

#include <cuda_bf16.h>
#include <cub/warp/warp_scan.cuh>

#include <fmt/format.h>

#include "cuda/common/pdl.cuh"

namespace mxmoe::smxx {
namespace {

constexpr int kRouterThreads = 1024;
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
  // The value of expert e (same e on every lane) from its lane.
  auto value_of = [&](int e) {
    float mine = 0.f;
#pragma unroll
    for (int m = 0; m < kPerLane; ++m)
      if (m == e / 32) mine = v[m];
    return __shfl_sync(0xffffffffu, mine, e % 32);
  };
  int sel[8];
  float val[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
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
    for (int i = 0; i < 8; ++i)
      if (i < k) den += expf(val[i] - val[0]);
#pragma unroll
    for (int i = 0; i < 8; ++i)
      if (i < k) {
        ids[i] = sel[i];
        weights[i] = expf(val[i] - val[0]) / den;
      }
  }
}

// A block per kTokens tokens: logits = x W^T + b in fp32 (the tokens' x kept
// in shared memory as fp32; a warp per expert at a time, lanes over H, each
// lane's products in the order h = 2 lane + 64 i, a fixed shuffle tree), then
// a warp per token takes the top-k and the softmax (warp_topk). Each router
// weight row read serves the block's tokens, and 32 warps split the experts.
// A token's logits do not depend on kTokens: the same products in the same order.
template <int kTokens>
__global__ void __launch_bounds__(kRouterThreads)
smxx_router_topk(const uint16_t* __restrict__ x, int T, int H, const uint16_t* __restrict__ rw,
                 int64_t rw_stride, const uint16_t* __restrict__ rb, int E, int k,
                 int32_t* __restrict__ ids, float* __restrict__ weights) {
  extern __shared__ float smem[];
  float* xs = smem;                    // [kTokens][H]
  float* logits = smem + kTokens * H;  // [kTokens][E]
  const int tok0 = blockIdx.x * kTokens, tokens = min(kTokens, T - tok0);
  wait_for_previous_kernels();
  allow_next_kernel();
  for (int i = threadIdx.x; i < tokens * H; i += kRouterThreads) xs[i] = bf16f(x[int64_t(tok0) * H + i]);
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int e = warp; e < E; e += kRouterThreads / 32) {
    const uint16_t* wr = rw + int64_t(e) * rw_stride;
    float acc[kTokens];
#pragma unroll
    for (int j = 0; j < kTokens; ++j) acc[j] = 0.f;
#pragma unroll 4
    for (int h = 2 * lane; h < H; h += 64) {
      const uint32_t w2 = __ldg(reinterpret_cast<const uint32_t*>(wr + h));
      const float w_lo = bf16f(uint16_t(w2 & 0xFFFF)), w_hi = bf16f(uint16_t(w2 >> 16));
#pragma unroll
      for (int j = 0; j < kTokens; ++j) {
        acc[j] = fmaf(w_lo, xs[j * H + h], acc[j]);
        acc[j] = fmaf(w_hi, xs[j * H + h + 1], acc[j]);
      }
    }
#pragma unroll
    for (int j = 0; j < kTokens; ++j) {
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], o);
    }
    if (lane == 0) {
      const float b = bf16f(rb[e]);
#pragma unroll
      for (int j = 0; j < kTokens; ++j) logits[j * E + e] = acc[j] + b;
    }
  }
  __syncthreads();
  if (warp < tokens) warp_topk(logits + warp * E, E, k, lane, ids + int64_t(tok0 + warp) * k, weights + int64_t(tok0 + warp) * k);
}

// One block: per-expert counts, a padded exclusive scan (each expert's rows
// rounded up to the token tile), the tile schedule, and a stable scatter of the
// pairs in expert order (token order inside an expert). Each warp owns one
// contiguous range of pairs and walks it twice, 32 pairs a step (a lane's rank
// among equal ids of the step is a match_any popcount): first counting its
// range per expert in a warp-private row of shared memory, then, once those
// rows are turned into exclusive prefixes over the warps, placing each pair at
// its expert's first row + the earlier warps' count + its rank so far. Only
// four block barriers whatever the pair count (one barrier-separated chunk of
// 1024 pairs at a time cost 172 us at 65536 pairs), and every row's position
// is deterministic. The scan is one warp's (up to 8 experts a lane,
// cub::WarpScan across lanes): a single thread walking 128 experts cost 11 us
// at T = 1 on the 120b shape.
__global__ void __launch_bounds__(kGroupThreads)
smxx_group_by_expert(const int32_t* __restrict__ ids, int n_pairs, int E, int tile,
                     int32_t* __restrict__ sorted_pair, int32_t* __restrict__ pair_row,
                     int32_t* __restrict__ tile_expert, int32_t* __restrict__ tile_row,
                     int32_t* __restrict__ num_tiles) {
  static_assert(kMaxExperts <= 8 * 32, "the scan gives each lane of one warp at most 8 experts");
  constexpr int kBatch = 4;  // steps whose id loads are in flight together
  using WarpScan = cub::WarpScan<int>;
  __shared__ typename WarpScan::TempStorage scan_storage;
  extern __shared__ int ismem[];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, warps = blockDim.x >> 5;
  int* counts = ismem;                // [E]
  int* first_tile = ismem + E;        // [E] first tile of expert e; its first row is first_tile[e] * tile
  int* mine = ismem + (2 + warp) * E;  // [E] this warp's count, then its running position, per expert
  __shared__ int total_rows, total_tiles;
  const int span = ((n_pairs + warps - 1) / warps + 31) / 32 * 32;
  const int begin = min(n_pairs, warp * span), end = min(n_pairs, begin + span);
  const unsigned lt_mask = (1u << lane) - 1u;
  // Walks this warp's range; visit(e, peers, pair) for every lane (e = -1 past the end).
  auto walk = [&](auto&& visit) {
    for (int p0 = begin; p0 < end; p0 += 32 * kBatch) {
      int e[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int p = p0 + 32 * b + lane;
        e[b] = p < end ? ids[p] : -1;
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
  };
  wait_for_previous_kernels();
  allow_next_kernel();
  for (int i = tid; i < warps * E; i += blockDim.x) ismem[2 * E + i] = 0;
  __syncthreads();
  walk([](int, unsigned, int) {});
  __syncthreads();
  for (int e = tid; e < E; e += blockDim.x) {
    int sum = 0;
    for (int w = 0; w < warps; ++w) {
      const int c = ismem[(2 + w) * E + e];
      ismem[(2 + w) * E + e] = sum;
      sum += c;
    }
    counts[e] = sum;
  }
  __syncthreads();
  if (warp == 0) {
    const int per = (E + 31) / 32, e0 = lane * per, e1 = min(E, e0 + per);
    int tiles = 0;
    for (int e = e0; e < e1; ++e) tiles += (counts[e] + tile - 1) / tile;
    int before = 0, all = 0;
    WarpScan(scan_storage).ExclusiveSum(tiles, before, all);
    for (int e = e0; e < e1; ++e) {
      first_tile[e] = before;
      before += (counts[e] + tile - 1) / tile;
    }
    if (lane == 0) {
      *num_tiles = all;
      total_tiles = all;
      total_rows = all * tile;
    }
  }
  __syncthreads();
  // Tile i belongs to the last expert whose first tile is <= i (binary search;
  // experts with no tiles share their successor's first tile and are skipped).
  for (int i = tid; i < total_tiles; i += blockDim.x) {
    int lo = 0, hi = E - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (first_tile[mid] <= i) lo = mid; else hi = mid - 1;
    }
    tile_expert[i] = lo;
    tile_row[i] = i * tile;
  }
  for (int r = tid; r < total_rows; r += blockDim.x) sorted_pair[r] = -1;  // tile padding
  __syncthreads();  // the padding fill before the scatter overwrites its rows
  walk([&](int e, unsigned peers, int pair) {
    if (e < 0) return;
    const int pos = first_tile[e] * tile + mine[e] + __popc(peers & lt_mask);
    sorted_pair[pos] = pair;
    pair_row[pair] = pos;
  });
}

// y[t] = sum over slots s = 0..k-1, in that order, of the GEMM2 row of (t, s).
__global__ void __launch_bounds__(kCombineThreads)
smxx_combine(const float* __restrict__ ypair, const int32_t* __restrict__ pair_row, int k, int H,
             float* __restrict__ y) {
  const int tok = blockIdx.x;
  wait_for_previous_kernels();
  allow_next_kernel();
  for (int c = threadIdx.x; c < H / 4; c += blockDim.x) {
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int i = 0; i < k; ++i) {
      const int r = pair_row[int64_t(tok) * k + i];
      const float4 v = reinterpret_cast<const float4*>(ypair + int64_t(r) * H)[c];
      s.x += v.x; s.y += v.y; s.z += v.z; s.w += v.w;
    }
    reinterpret_cast<float4*>(y + int64_t(tok) * H)[c] = s;
  }
}

}  // namespace

Status cuda_status(cudaError_t err, const char* who, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Status::CudaError(fmt::format("{}: {}: {}", who, what, cudaGetErrorString(err)));
}

Status kernels_may_overlap(const char* who, bool* overlap) {
  int dev = 0, major = 0;
  MXMOE_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&dev), who, "cudaGetDevice"));
  MXMOE_RETURN_IF_ERROR(
      cuda_status(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), who, "device attribute"));
  *overlap = major >= 9;
  return Status::Ok();
}

Status launch_router_topk(const uint16_t* x, int64_t T, int64_t H, const uint16_t* router_weight,
                          int64_t router_stride, const uint16_t* router_bias, int64_t E, int64_t k, int32_t* ids,
                          float* weights, bool overlap, cudaStream_t stream, const char* who) {
  constexpr size_t kSmem = 48 * 1024;  // without opting in to more
  const size_t per_token = size_t(H + E) * sizeof(float);
  if (per_token > kSmem)
    return Status::Unsupported(fmt::format("{}: router needs {} B of shared memory", who, per_token));
  // Four tokens a block where they fit and the blocks still cover the SMs
  // more than once; one otherwise (decode: many blocks, each short).
  constexpr int64_t kFourTokenMinTokens = 1024;
  auto launch = [&](auto kernel, int tokens_per_block) {
    const int64_t blocks = (T + tokens_per_block - 1) / tokens_per_block;
    return cuda_status(launch_kernel(kernel, dim3(unsigned(blocks)), dim3(kRouterThreads), per_token * tokens_per_block,
                                     stream, overlap, x, int(T), int(H), router_weight, router_stride, router_bias,
                                     int(E), int(k), ids, weights),
                       who, "router launch");
  };
  if (T >= kFourTokenMinTokens && 4 * per_token <= kSmem) return launch(smxx_router_topk<4>, 4);
  return launch(smxx_router_topk<1>, 1);
}

Status launch_group_by_expert(const int32_t* ids, int64_t pairs, int64_t E, int tile, int32_t* sorted_pair,
                              int32_t* pair_row, int32_t* tile_expert, int32_t* tile_row, int32_t* num_tiles,
                              bool overlap, cudaStream_t stream, const char* who) {
  // Fewer threads for few pairs: at most one 32-pair step a warp, so the
  // short walk is not paid for with 32 warps' rows of counts.
  const int threads = int(std::min<int64_t>(kGroupThreads, std::max<int64_t>(128, (pairs + 31) / 32 * 32)));
  const size_t smem = size_t((2 + threads / 32) * E) * sizeof(int);
  return cuda_status(launch_kernel(smxx_group_by_expert, dim3(1), dim3(unsigned(threads)), smem, stream, overlap, ids,
                                   int(pairs), int(E), tile, sorted_pair, pair_row, tile_expert, tile_row, num_tiles),
                     who, "grouping launch");
}

Status launch_combine(const float* ypair, const int32_t* pair_row, int64_t T, int64_t k, int64_t H, float* y,
                      bool overlap, cudaStream_t stream, const char* who) {
  return cuda_status(launch_kernel(smxx_combine, dim3(unsigned(T)), dim3(kCombineThreads), 0, stream, overlap, ypair,
                                   pair_row, int(k), int(H), y),
                     who, "combine launch");
}

}  // namespace mxmoe::smxx
