// Expert-parallel dispatch and combine kernels (plain CUDA, any SM).
#include "cuda/parallel/smxx_ep_dispatch.h"

#include <fmt/format.h>

#include "mxmoe/parallel.h"

namespace mxmoe::parallel {
namespace {

constexpr int kPlanThreads = 1024;
constexpr int kPlanBatch = 8;  // id loads a thread keeps in flight
constexpr int kPackThreads = 128;
constexpr int kCombineThreads = 256;

// Destinations of pairs [p0, p0 + kPlanBatch), -1 from `end` on. The loads
// are independent, so a thread keeps kPlanBatch of them in flight instead of
// waiting out the memory latency once per id.
__device__ __forceinline__ void load_destinations(const int32_t* __restrict__ ids, int p0, int end,
                                                  int experts_per_rank, int (&dest)[kPlanBatch]) {
#pragma unroll
  for (int j = 0; j < kPlanBatch; ++j) dest[j] = p0 + j < end ? ids[p0 + j] / experts_per_rank : -1;
}

// One block. Thread i takes the contiguous run of pairs [i*run, (i+1)*run):
// it counts its run per destination, one warp per destination scans those
// counts over the threads, and a second walk of the run hands out positions.
// Runs are contiguous and in thread order, so a destination's rows keep pair
// order and every launch gives the same positions (no atomics).
__global__ void __launch_bounds__(kPlanThreads)
smxx_ep_plan(const int32_t* __restrict__ ids, int pairs, int experts_per_rank, int size,
             int32_t* __restrict__ send_counts, int32_t* __restrict__ pair_pos) {
  // [destination][thread]: the thread's count, then its first position.
  __shared__ int runs[kMaxParallelRanks * kPlanThreads];
  __shared__ int base[kMaxParallelRanks];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int run = (pairs + kPlanThreads - 1) / kPlanThreads;
  const int lo = min(pairs, tid * run), hi = min(pairs, lo + run);
  for (int d = 0; d < size; ++d) runs[d * kPlanThreads + tid] = 0;
  for (int p0 = lo; p0 < hi; p0 += kPlanBatch) {
    int dest[kPlanBatch];
    load_destinations(ids, p0, hi, experts_per_rank, dest);
#pragma unroll
    for (int j = 0; j < kPlanBatch; ++j)
      if (dest[j] >= 0) ++runs[dest[j] * kPlanThreads + tid];
  }
  __syncthreads();
  if (warp < size) {
    // Exclusive scan of destination `warp` over the threads, 32 at a time
    // (lane l reads thread j + l: consecutive words, no bank conflicts).
    int* row = runs + warp * kPlanThreads;
    int carry = 0;
    for (int j = 0; j < kPlanThreads; j += 32) {
      const int c = row[j + lane];
      int incl = c;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += v;
      }
      row[j + lane] = carry + incl - c;
      carry += __shfl_sync(0xffffffffu, incl, 31);
    }
    if (lane == 0) base[warp] = carry;  // rows for this destination
  }
  __syncthreads();
  if (tid == 0) {
    int off = 0;
    for (int d = 0; d < size; ++d) {
      const int c = base[d];
      send_counts[d] = c;
      base[d] = off;
      off += c;
    }
  }
  __syncthreads();
  for (int p0 = lo; p0 < hi; p0 += kPlanBatch) {
    int dest[kPlanBatch];
    load_destinations(ids, p0, hi, experts_per_rank, dest);
#pragma unroll
    for (int j = 0; j < kPlanBatch; ++j)
      if (dest[j] >= 0) pair_pos[p0 + j] = base[dest[j]] + runs[dest[j] * kPlanThreads + tid]++;
  }
}

// One block per pair: copies the token's x row (16-byte pieces; H is a
// multiple of 32, so a bf16 row is a multiple of 64 bytes) to its send row.
__global__ void __launch_bounds__(kPackThreads)
smxx_ep_pack(const uint16_t* __restrict__ x, int hidden, int topk, const int32_t* __restrict__ ids,
             const float* __restrict__ weights, const int32_t* __restrict__ pair_pos,
             int experts_per_rank, uint16_t* __restrict__ send_x, int32_t* __restrict__ send_ids,
             float* __restrict__ send_w) {
  const int p = blockIdx.x;
  const int64_t pos = pair_pos[p];
  const uint4* src = reinterpret_cast<const uint4*>(x + int64_t(p / topk) * hidden);
  uint4* dst = reinterpret_cast<uint4*>(send_x + pos * hidden);
  for (int i = threadIdx.x; i < hidden / 8; i += blockDim.x) dst[i] = src[i];
  if (threadIdx.x == 0) {
    send_ids[pos] = ids[p] % experts_per_rank;
    send_w[pos] = weights[p];
  }
}

// One block per token; the k rows are added in slot order from 0, as the
// single-GPU combine does, so equal rows give bitwise equal outputs.
__global__ void __launch_bounds__(kCombineThreads)
smxx_ep_combine(const float* __restrict__ rows, const int32_t* __restrict__ pair_pos, int topk,
                int hidden, float* __restrict__ y) {
  const int tok = blockIdx.x;
  for (int c = threadIdx.x; c < hidden / 4; c += blockDim.x) {
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int i = 0; i < topk; ++i) {
      const int64_t r = pair_pos[int64_t(tok) * topk + i];
      const float4 v = reinterpret_cast<const float4*>(rows + r * hidden)[c];
      s.x += v.x; s.y += v.y; s.z += v.z; s.w += v.w;
    }
    reinterpret_cast<float4*>(y + int64_t(tok) * hidden)[c] = s;
  }
}

Status launched(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return Status::Ok();
  return Status::CudaError(fmt::format("ep: {} launch: {}", what, cudaGetErrorString(err)));
}

Status check_sizes(int64_t rows, int64_t hidden) {
  if (rows >= (int64_t(1) << 31) || hidden % 32 != 0 || hidden <= 0)
    return Status::InvalidArgument(
        fmt::format("ep: {} rows (below 2^31) of hidden {} (a positive multiple of 32)", rows, hidden));
  return Status::Ok();
}

}  // namespace

Status launch_ep_plan(const int32_t* ids, int64_t pairs, int64_t experts_per_rank, int size,
                      int32_t* send_counts, int32_t* pair_pos, cudaStream_t stream) {
  // Below 2^30 pairs, thread * run stays inside int.
  if (pairs < 0 || pairs >= (int64_t(1) << 30) || size < 1 || size > kMaxParallelRanks || experts_per_rank < 1)
    return Status::InvalidArgument(fmt::format("ep: plan of {} pairs over {} ranks", pairs, size));
  smxx_ep_plan<<<1, kPlanThreads, 0, stream>>>(ids, int(pairs), int(experts_per_rank), size, send_counts,
                                                pair_pos);
  return launched("plan");
}

Status launch_ep_pack(const uint16_t* x, int64_t hidden, int64_t topk, const int32_t* ids,
                      const float* weights, const int32_t* pair_pos, int64_t pairs,
                      int64_t experts_per_rank, uint16_t* send_x, int32_t* send_ids, float* send_w,
                      cudaStream_t stream) {
  MXMOE_RETURN_IF_ERROR(check_sizes(pairs, hidden));
  if (pairs == 0) return Status::Ok();
  smxx_ep_pack<<<unsigned(pairs), kPackThreads, 0, stream>>>(x, int(hidden), int(topk), ids, weights, pair_pos,
                                                             int(experts_per_rank), send_x, send_ids, send_w);
  return launched("pack");
}

Status launch_ep_combine(const float* rows, const int32_t* pair_pos, int64_t tokens, int64_t topk,
                         int64_t hidden, float* y, cudaStream_t stream) {
  MXMOE_RETURN_IF_ERROR(check_sizes(tokens * topk, hidden));
  if (tokens == 0) return Status::Ok();
  smxx_ep_combine<<<unsigned(tokens), kCombineThreads, 0, stream>>>(rows, pair_pos, int(topk), int(hidden), y);
  return launched("combine");
}

}  // namespace mxmoe::parallel
