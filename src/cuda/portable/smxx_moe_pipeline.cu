// Router, expert grouping and combine kernels (plain CUDA, any SM), and the
// launcher that enqueues the whole portable forward on one stream.
#include <algorithm>
#include <cstdlib>

#include <cuda_bf16.h>
#include <cub/warp/warp_scan.cuh>

#include <fmt/format.h>

#include "cuda/portable/heuristics.h"
#include "cuda/portable/pdl.cuh"
#include "cuda/portable/portable_launcher.h"
#include "cuda/portable/sm80_mxfp4_gemm.cuh"
#include "cuda/portable/sm80_mxfp4_gemm_launch.h"

namespace mxmoe::portable {
namespace {

constexpr int kRouterThreads = 256;
constexpr int kGroupThreads = 1024;
constexpr int kCombineThreads = 256;

__device__ __forceinline__ float bf16f(uint16_t v) { return __bfloat162float(__ushort_as_bfloat16(v)); }

// One block per token: logits = x W^T + b in fp32 (x kept in shared memory as
// fp32, one warp per expert, lanes over H, a fixed shuffle tree), then top-k
// with ties to the lower id and a softmax over the k.
__global__ void __launch_bounds__(kRouterThreads)
smxx_router_topk(const uint16_t* __restrict__ x, int H, const uint16_t* __restrict__ rw,
                 int64_t rw_stride, const uint16_t* __restrict__ rb, int E, int k,
                 int32_t* __restrict__ ids, float* __restrict__ weights) {
  extern __shared__ float smem[];
  float* xs = smem;          // [H]
  float* logits = smem + H;  // [E]
  const int tok = blockIdx.x;
  const uint16_t* xr = x + int64_t(tok) * H;
  wait_for_previous_kernels();
  allow_next_kernel();
  for (int h = threadIdx.x; h < H; h += blockDim.x) xs[h] = bf16f(xr[h]);
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  for (int e = warp; e < E; e += nw) {
    const uint16_t* wr = rw + int64_t(e) * rw_stride;
    float acc = 0.f;
    for (int h = 2 * lane; h < H; h += 64) {
      const uint32_t w2 = *reinterpret_cast<const uint32_t*>(wr + h);
      acc = fmaf(bf16f(uint16_t(w2 & 0xFFFF)), xs[h], acc);
      acc = fmaf(bf16f(uint16_t(w2 >> 16)), xs[h + 1], acc);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) logits[e] = acc + bf16f(rb[e]);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int sel[8];
    float val[8];
    for (int i = 0; i < k; ++i) {
      int best = -1;
      for (int e = 0; e < E; ++e) {
        bool taken = false;
        for (int j = 0; j < i; ++j) taken |= sel[j] == e;
        if (!taken && (best < 0 || logits[e] > logits[best])) best = e;  // strict: ties -> lower id
      }
      sel[i] = best;
      val[i] = logits[best];
    }
    float den = 0.f;
    for (int i = 0; i < k; ++i) den += expf(val[i] - val[0]);
    for (int i = 0; i < k; ++i) {
      ids[int64_t(tok) * k + i] = sel[i];
      weights[int64_t(tok) * k + i] = expf(val[i] - val[0]) / den;
    }
  }
}

// One block: per-expert counts, a padded exclusive scan (each expert's rows
// rounded up to the token tile), the tile schedule, and a stable scatter of the
// pairs in expert order (token order inside an expert). The scan is one warp's
// (up to 8 experts a lane, cub::WarpScan across lanes): a single thread walking
// 128 experts cost 11 us at T = 1 on the 120b shape. The scatter walks the
// pairs in chunks of the block size; a pair's rank is its rank among equal ids
// in its warp (match_any) plus the counts of earlier warps and earlier chunks,
// so the order, and hence every row's position, is deterministic.
__global__ void __launch_bounds__(kGroupThreads)
smxx_group_by_expert(const int32_t* __restrict__ ids, int n_pairs, int E, int tile,
                     int32_t* __restrict__ sorted_pair, int32_t* __restrict__ pair_row,
                     int32_t* __restrict__ tile_expert, int32_t* __restrict__ tile_row,
                     int32_t* __restrict__ num_tiles) {
  static_assert(kMaxExperts <= 8 * 32, "the scan gives each lane of one warp at most 8 experts");
  using WarpScan = cub::WarpScan<int>;
  __shared__ typename WarpScan::TempStorage scan_storage;
  extern __shared__ int ismem[];
  int* counts = ismem;           // [E]
  int* first_tile = ismem + E;   // [E] first tile of expert e; its first row is first_tile[e] * tile
  int* running = ismem + 2 * E;  // [E] pairs of e placed so far
  int* wc = ismem + 3 * E;       // [32 warps][E] counts in this chunk
  __shared__ int total_rows, total_tiles;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  wait_for_previous_kernels();
  allow_next_kernel();
  for (int e = tid; e < E; e += blockDim.x) { counts[e] = 0; running[e] = 0; }
  __syncthreads();
  for (int i = tid; i < n_pairs; i += blockDim.x) atomicAdd(&counts[ids[i]], 1);  // order-free sum
  __syncthreads();
  if (warp == 0) {
    const int per = (E + 31) / 32, e0 = lane * per, e1 = min(E, e0 + per);
    int mine = 0;
    for (int e = e0; e < e1; ++e) mine += (counts[e] + tile - 1) / tile;
    int before = 0, all = 0;
    WarpScan(scan_storage).ExclusiveSum(mine, before, all);
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
  const unsigned lt_mask = (1u << lane) - 1u;
  for (int chunk = 0; chunk < n_pairs; chunk += blockDim.x) {
    for (int i = tid; i < 32 * E; i += blockDim.x) wc[i] = 0;
    __syncthreads();
    const int pidx = chunk + tid;
    const int e = pidx < n_pairs ? ids[pidx] : -1;
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    if (e >= 0 && lane == __ffs(peers) - 1) wc[warp * E + e] = __popc(peers);
    __syncthreads();
    if (e >= 0) {
      int rank = __popc(peers & lt_mask);
      for (int w = 0; w < warp; ++w) rank += wc[w * E + e];
      const int pos = first_tile[e] * tile + running[e] + rank;
      sorted_pair[pos] = pidx;
      pair_row[pidx] = pos;
    }
    __syncthreads();
    for (int i = tid; i < E; i += blockDim.x) {
      int sum = 0;
      for (int w = 0; w < 32; ++w) sum += wc[w * E + i];
      running[i] += sum;
    }
    __syncthreads();
  }
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

// Workspace carve-up (every piece 256-byte aligned).
struct Layout {
  size_t ids = 0, weights = 0, num_tiles = 0, tile_expert = 0, tile_row = 0, sorted_pair = 0,
         pair_row = 0, act = 0, ypair = 0, total = 0;
  int tile = 8;
  int64_t max_tiles = 0, rows = 0;
};

size_t align256(size_t v) { return (v + 255) / 256 * 256; }

Layout make_layout(const DeviceWeights& w, int64_t T) {
  Layout l;
  const int64_t E = w.shape.experts, k = w.shape.topk, H = w.shape.hidden;
  const int64_t Ip = w.intermediate_padded;
  static const int override_tile = [] {
    const char* v = std::getenv("MXMOE_PORTABLE_TILE");
    return v ? std::atoi(v) : 0;
  }();
  l.tile = token_tile(T, k, E, override_tile);
  l.max_tiles = max_token_tiles(T, k, E, l.tile);
  l.rows = l.max_tiles * l.tile;
  size_t off = 0;
  auto take = [&](size_t bytes) { const size_t at = off; off += align256(bytes); return at; };
  l.ids = take(size_t(T * k) * 4);
  l.weights = take(size_t(T * k) * 4);
  l.num_tiles = take(4);
  l.tile_expert = take(size_t(l.max_tiles) * 4);
  l.tile_row = take(size_t(l.max_tiles) * 4);
  l.sorted_pair = take(size_t(l.rows) * 4);
  l.pair_row = take(size_t(T * k) * 4);
  l.act = take(size_t(l.rows * Ip) * 2);
  l.ypair = take(size_t(l.rows * H) * 4);
  l.total = off;
  return l;
}

Status cuda_status(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Status::CudaError(fmt::format("portable: {}: {}", what, cudaGetErrorString(err)));
}

// Whether kernels on the current device may start during the previous
// kernel's tail (programmatic dependent launch, SM90+).
Status kernels_may_overlap(bool* overlap) {
  int dev = 0, major = 0;
  MXMOE_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&dev), "cudaGetDevice"));
  MXMOE_RETURN_IF_ERROR(
      cuda_status(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), "device attribute"));
  *overlap = major >= 9;
  return Status::Ok();
}

// Step 1 of moe_forward (and all of route_topk): ids and weights [T, k].
Status launch_router(const DeviceWeights& w, const uint16_t* x, int64_t T, int32_t* ids, float* weights,
                     bool overlap, cudaStream_t stream) {
  const int64_t E = w.shape.experts, k = w.shape.topk, H = w.shape.hidden;
  if (!w.router_weight || !w.router_bias)
    return Status::InvalidArgument("portable: no routing given and the weights have no router");
  const size_t smem = size_t(H + E) * sizeof(float);
  if (smem > 48 * 1024) return Status::Unsupported(fmt::format("portable: router needs {} B of shared memory", smem));
  return cuda_status(launch_kernel(smxx_router_topk, dim3(unsigned(T)), dim3(kRouterThreads), smem, stream, overlap,
                                   x, int(H), w.router_weight, int64_t(w.hidden_padded), w.router_bias, int(E),
                                   int(k), ids, weights),
                     "router launch");
}

}  // namespace

Status route_topk(const DeviceWeights& w, const uint16_t* x, int64_t tokens, int32_t* ids,
                  float* weights, cudaStream_t stream) {
  const int64_t E = w.shape.experts, k = w.shape.topk;
  if (tokens <= 0 || !x || !ids || !weights)
    return Status::InvalidArgument("portable: routing needs tokens > 0 and non-null x, ids, weights");
  if (E > kMaxExperts || k < 1 || k > 8 || k > E)
    return Status::Unsupported(
        fmt::format("portable: router for {} experts, top-{}: at most {} experts, top-8", E, k, kMaxExperts));
  bool overlap = false;
  MXMOE_RETURN_IF_ERROR(kernels_may_overlap(&overlap));
  return launch_router(w, x, tokens, ids, weights, overlap, stream);
}

size_t workspace_bytes(const DeviceWeights& w, int64_t tokens) {
  return make_layout(w, tokens).total;
}

Status moe_forward(const DeviceWeights& w, const ForwardArgs& a, void* workspace,
                   size_t workspace_size, cudaStream_t stream) {
  const MoeShape& s = w.shape;
  const int64_t T = a.tokens, E = s.experts, k = s.topk, H = s.hidden;
  const int64_t Hp = w.hidden_padded, Ip = w.intermediate_padded;
  if (T <= 0) return Status::InvalidArgument(fmt::format("portable: tokens = {} must be positive", T));
  if (E > kMaxExperts)
    return Status::Unsupported(fmt::format("portable: {} experts, at most {} supported", E, kMaxExperts));
  if (k < 1 || k > 8 || k > E)
    return Status::Unsupported(fmt::format("portable: topk = {} outside [1, min(8, experts)]", k));
  if (H % 32 != 0 || Hp % 64 != 0 || Ip % 64 != 0 || Hp < H || Ip < s.intermediate)
    return Status::InvalidArgument(fmt::format(
        "portable: H = {} must be a multiple of 32 and Hp = {}, Ip = {} multiples of 64", H, Hp, Ip));
  if (T * k >= (int64_t(1) << 31) / 2)
    return Status::Unsupported(fmt::format("portable: tokens * topk = {} too large", T * k));
  if (!a.x || !a.y || !workspace) return Status::InvalidArgument("portable: null x, y or workspace");
  if ((a.topk_ids == nullptr) != (a.topk_weights == nullptr))
    return Status::InvalidArgument("portable: pass both topk ids and weights, or neither");
  const Layout l = make_layout(w, T);
  if (workspace_size < l.total)
    return Status::InvalidArgument(
        fmt::format("portable: workspace of {} bytes, {} needed", workspace_size, l.total));
  if (reinterpret_cast<uintptr_t>(workspace) % 256 != 0)
    return Status::InvalidArgument("portable: workspace must be 256-byte aligned");
  // Overlap each kernel's launch with the previous one's tail on SM90+.
  bool overlap = false;
  MXMOE_RETURN_IF_ERROR(kernels_may_overlap(&overlap));
  char* ws = static_cast<char*>(workspace);
  auto at = [&](size_t off) { return static_cast<void*>(ws + off); };

  const int32_t* ids = a.topk_ids;
  const float* rweights = a.topk_weights;
  if (!ids) {
    int32_t* ids_out = static_cast<int32_t*>(at(l.ids));
    float* w_out = static_cast<float*>(at(l.weights));
    MXMOE_RETURN_IF_ERROR(launch_router(w, a.x, T, ids_out, w_out, overlap, stream));
    ids = ids_out;
    rweights = w_out;
  }

  int32_t* sorted_pair = static_cast<int32_t*>(at(l.sorted_pair));
  int32_t* pair_row = static_cast<int32_t*>(at(l.pair_row));
  int32_t* tile_expert = static_cast<int32_t*>(at(l.tile_expert));
  int32_t* tile_row = static_cast<int32_t*>(at(l.tile_row));
  int32_t* num_tiles = static_cast<int32_t*>(at(l.num_tiles));
  {
    const size_t smem = size_t(35 * E) * sizeof(int);
    // Fewer threads for few pairs: the kernel is a chain of block barriers.
    const int threads = int(std::min<int64_t>(kGroupThreads, std::max<int64_t>(128, (T * k + 31) / 32 * 32)));
    MXMOE_RETURN_IF_ERROR(cuda_status(
        launch_kernel(smxx_group_by_expert, dim3(1), dim3(unsigned(threads)), smem, stream, overlap, ids,
                      int(T * k), int(E), l.tile, sorted_pair, pair_row, tile_expert, tile_row, num_tiles),
        "grouping launch"));
  }

  uint16_t* act = static_cast<uint16_t*>(at(l.act));
  float* ypair = static_cast<float*>(at(l.ypair));
  GemmParams g1{};
  g1.codes = w.w13_codes;
  g1.scales = w.w13_scales;
  g1.code_row_stride = Hp / 2;
  g1.code_expert_stride = 2 * Ip * Hp / 2;
  g1.scale_row_stride = Hp / 32;
  g1.scale_expert_stride = 2 * Ip * Hp / 32;
  g1.bias = w.b13;
  g1.bias_expert_stride = 2 * Ip;
  g1.n_rows = int(2 * Ip);
  g1.k = int(Hp);
  g1.k_valid = int(H);
  g1.act_in = a.x;
  g1.act_in_stride = H;
  g1.topk = int(k);
  g1.sorted_pair = sorted_pair;
  g1.tile_expert = tile_expert;
  g1.tile_row = tile_row;
  g1.num_tiles = num_tiles;
  g1.act_out = act;
  g1.act_out_stride = Ip;
  g1.alpha = w.swiglu.alpha;
  g1.limit = w.swiglu.limit;
  MXMOE_RETURN_IF_ERROR(cuda_status(launch_mxfp4_moe_gemm(g1, l.tile, true, l.max_tiles, overlap, stream), "GEMM1 launch"));

  GemmParams g2 = g1;
  g2.codes = w.w2_codes;
  g2.scales = w.w2_scales;
  g2.code_row_stride = Ip / 2;
  g2.code_expert_stride = Hp * Ip / 2;
  g2.scale_row_stride = Ip / 32;
  g2.scale_expert_stride = Hp * Ip / 32;
  g2.bias = w.b2;
  g2.bias_expert_stride = Hp;
  g2.n_rows = int(Hp);
  g2.k = int(Ip);
  g2.k_valid = int(Ip);
  g2.act_in = act;
  g2.act_in_stride = Ip;
  g2.act_out = nullptr;
  g2.y_out = ypair;
  g2.n_valid = int(H);
  g2.route_w = rweights;
  MXMOE_RETURN_IF_ERROR(cuda_status(launch_mxfp4_moe_gemm(g2, l.tile, false, l.max_tiles, overlap, stream), "GEMM2 launch"));

  return cuda_status(launch_kernel(smxx_combine, dim3(unsigned(T)), dim3(kCombineThreads), 0, stream, overlap,
                                   static_cast<const float*>(ypair), static_cast<const int32_t*>(pair_row),
                                   int(k), int(H), a.y),
                     "combine launch");
}

}  // namespace mxmoe::portable
