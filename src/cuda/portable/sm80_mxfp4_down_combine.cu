// GEMM2 of the per-pair decode with the combine in it: block (b, t) writes
// y[t, 32b .. 32b + 31] = sum over the slots j = 0..k-1, in that order, of
// w_j (W2_{e_j}[rows] . act[t k + j] + b2_{e_j}[rows]), the sum the combine
// kernel forms from GEMM2's pair rows. A forward of a few tokens then needs
// neither the pair rows nor a kernel after GEMM2, whose launch and drain were
// a fixed cost of every decode step.
//
// The block's warps split the token's k slots (kWarps / k warps a slot, the
// rest idle) and each slot's K chunks, as the decode GEMM's warps split one
// tile's K (sm80_mxfp4_gemm.cuh: the same register layout, code loads and
// dequantisation); the partial sums meet in shared memory and one warp adds
// them in a fixed order, so results are bitwise reproducible.
#include "cuda/common/pdl.cuh"
#include "cuda/common/smxx_moe_kernels.h"
#include "cuda/portable/sm80_mxfp4_gemm.cuh"
#include "cuda/portable/sm80_mxfp4_gemm_launch.h"

namespace mxmoe::portable {
namespace {

__device__ __forceinline__ void store1(float* dst, float v) { *dst = v; }
__device__ __forceinline__ void store1(uint16_t* dst, float v) {
  *dst = __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

template <int kWarps, typename Out>
__global__ void __launch_bounds__(kWarps * 32, kDownCombineWarpsPerSm / kWarps)
sm80_mxfp4_down_combine(const GemmParams p, Out* __restrict__ y) {
  static_assert(kWarps >= smxx::kMaxTopk, "every slot has a warp");
  // part_sums[w][r]: warp w's sum over its chunks for row nb + r (token
  // column 0 of its mma tiles; the other seven columns are zero).
  __shared__ float part_sums[kWarps][32];
  __shared__ float slot_bias[smxx::kMaxTopk][32];
  __shared__ float slot_weight[smxx::kMaxTopk];
  const int tok = blockIdx.y, nb = blockIdx.x * 32;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int k = p.topk, per_slot = kWarps / k, slot = warp / per_slot, part = warp - slot * per_slot;
  const bool active = slot < k;
  // The routing, the weights and act_row are from before GEMM1's wait (the
  // caller's, or the router's or the grouping's two launches back or more):
  // read before this kernel's wait.
  const int pair = tok * k + (active ? slot : 0);
  const int e = detail::routed_expert(p.pair_ids[pair], p.experts);
  const detail::DecodeRows rows = detail::decode_rows(p, e, nb, lane);
  const int nfull = p.k / 128;
  uint32_t q[2][kSubtiles][2][4], s[2];
  if (active && part < nfull) rows.load(part, q[0], s[0]);
  if (active && part == 0) {
    slot_bias[slot][lane] = __bfloat162float(__ushort_as_bfloat16(p.bias[e * p.bias_expert_stride + nb + lane]));
    if (lane == 0) slot_weight[slot] = detail::routed_weight(p, pair);
  }
  // Token column 0 is the pair's activation row (lanes of group 0 load the B
  // fragment's column 0); the other columns read as zeros.
  const int64_t act_row = p.act_row != nullptr ? p.act_row[pair] : pair;
  const uint16_t* const arow[1] = {active && g == 0 ? p.act_in + act_row * p.act_in_stride : nullptr};
  float acc[kSubtiles][1][4];
#pragma unroll
  for (int m = 0; m < kSubtiles; ++m)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[m][0][c] = 0.f;

  smxx::wait_for_previous_kernels();  // the activations are GEMM1's
  smxx::allow_next_kernel();
  if (active) {
    detail::decode_chunks(rows, part, per_slot, nfull, q, s,
                          [&](int c, const uint32_t (&qc)[kSubtiles][2][4], uint32_t sc) {
                            const int col = c * 128 + t * 32;
                            detail::chunk_mma<1, 4>(qc, sc, arow, col, col < p.k_valid, acc);
                          });
    if ((p.k & 127) != 0 && part == nfull % per_slot) {
      detail::load_tail(p, e, nb, q[0], s[0]);
      const int col = nfull * 128 + t * 16;
      detail::chunk_mma<1, 2>(q[0], s[0], arow, col, col < p.k_valid, acc);
    }
  }
  // Column 0 is at the lanes of t = 0: c0 is row 16m + 2g, c2 the next row.
  if (t == 0) {
#pragma unroll
    for (int m = 0; m < kSubtiles; ++m) {
      part_sums[warp][16 * m + 2 * g] = acc[m][0][0];
      part_sums[warp][16 * m + 2 * g + 1] = acc[m][0][2];
    }
  }
  __syncthreads();
  if (warp == 0 && nb + lane < p.n_valid) {
    float sum = 0.f;
    for (int j = 0; j < k; ++j) {
      float v = part_sums[j * per_slot][lane];
      for (int w = 1; w < per_slot; ++w) v += part_sums[j * per_slot + w][lane];
      sum += slot_weight[j] * (v + slot_bias[j][lane]);
    }
    store1(y + int64_t(tok) * p.n_valid + nb + lane, sum);
  }
}

template <int kWarps, typename Out>
cudaError_t launch(const GemmParams& p, int64_t tokens, Out* y, bool overlap, cudaStream_t stream) {
  const dim3 grid(unsigned(p.n_valid / 32), unsigned(tokens));
  return smxx::launch_kernel(sm80_mxfp4_down_combine<kWarps, Out>, grid, dim3(kWarps * 32), 0, stream, overlap, p,
                             y);
}

}  // namespace

cudaError_t launch_mxfp4_down_combine(const GemmParams& p, int warps, int64_t tokens, float* y, uint16_t* y_bf16,
                                      bool overlap, cudaStream_t stream) {
  if ((y == nullptr) == (y_bf16 == nullptr) || p.n_valid % 32 != 0 || p.topk > smxx::kMaxTopk)
    return cudaErrorInvalidValue;
  switch (warps) {
    case 8: return y ? launch<8>(p, tokens, y, overlap, stream) : launch<8>(p, tokens, y_bf16, overlap, stream);
    case 16: return y ? launch<16>(p, tokens, y, overlap, stream) : launch<16>(p, tokens, y_bf16, overlap, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace mxmoe::portable
