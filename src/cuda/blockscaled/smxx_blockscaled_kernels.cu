// See smxx_blockscaled_kernels.h. One thread per MX block of 32 elements in
// the quantising steps: it reads the block's 64 bytes of bf16, writes its 32
// E4M3 codes as two 16-byte stores and its scale byte where the block-scaled
// layout puts it, so a row's blocks and rows of a tile run across a warp.
#include "cuda/blockscaled/smxx_blockscaled_kernels.h"

#include <cuda_fp8.h>
#include <fmt/format.h>

#include "cuda/blockscaled/blockscaled_types.cuh"
#include "cuda/common/smxx_moe_kernels.h"
#include "prepare/blockscaled_scales.h"

namespace mxmoe::blockscaled {
namespace {

constexpr int kThreads = 256;

// Eight bf16 of a 16-byte word.
__device__ __forceinline__ void unpack8(const uint4& w, float* out) {
  const uint32_t u[4] = {w.x, w.y, w.z, w.w};
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = __uint_as_float(u[i] << 16);
    out[2 * i + 1] = __uint_as_float(u[i] & 0xFFFF0000u);
  }
}

__device__ __forceinline__ void load32(const uint16_t* p, float* out) {
  const uint4* q = reinterpret_cast<const uint4*>(p);
  for (int i = 0; i < 4; ++i) unpack8(q[i], out + 8 * i);
}

// floor / ceil of log2(a) for finite a > 0, exactly (as the host codec).
__device__ __forceinline__ int floor_log2(float a) {
  int e;
  frexpf(a, &e);
  return e - 1;
}
__device__ __forceinline__ int ceil_log2(float a) {
  int e;
  const float m = frexpf(a, &e);
  return m == 0.5f ? e - 1 : e;
}

// One MX block of 32 values to E4M3 codes and its E8M0 scale, bit for bit
// as mxfp8_quantize_row (format/mx_block.cpp): an all-zero block gets scale
// 127; the scaled elements round to nearest even and saturate at +-448. A
// block holding NaN or Inf, which the host quantizer refuses, gets the NaN
// scale 0xFF, so every GEMM output of its row is NaN.
__device__ __forceinline__ void quantize_block(const float* v, MxScaleRule rule, uint8_t* codes, uint8_t* scale) {
  float amax = 0.f;
  bool finite = true;
  for (int i = 0; i < 32; ++i) {
    finite = finite && isfinite(v[i]);
    amax = fmaxf(amax, fabsf(v[i]));
  }
  uint8_t s = kE8M0Neutral;
  if (!finite) s = kE8M0NaN;
  else if (amax > 0.f) {
    int e = rule == MxScaleRule::kOcp ? floor_log2(amax) - 8 : ceil_log2(amax / kE4M3Max);
    e = max(-127, min(127, e));
    s = uint8_t(e + 127);
  }
  *scale = s;
  const float inv = ldexpf(1.0f, 127 - int(s));  // exact power of two
  for (int i = 0; i < 32; ++i)
    codes[i] = finite ? uint8_t(__nv_cvt_float_to_fp8(v[i] * inv, __NV_SATFINITE, __NV_E4M3)) : uint8_t(0);
}

__device__ __forceinline__ void store32(uint8_t* dst, const uint8_t* codes) {
  uint4 w[2];
  uint8_t* b = reinterpret_cast<uint8_t*>(w);
  for (int i = 0; i < 32; ++i) b[i] = codes[i];
  reinterpret_cast<uint4*>(dst)[0] = w[0];
  reinterpret_cast<uint4*>(dst)[1] = w[1];
}

__device__ __forceinline__ int64_t valid_rows(const GroupedRows& rows) { return int64_t(*rows.num_tiles) * kRowTile; }

__global__ void __launch_bounds__(kThreads)
    quantize_x_rows_kernel(const uint16_t* __restrict__ x, int64_t x_stride, int hidden, int k_padded, int topk,
                           GroupedRows rows, MxScaleRule rule, uint8_t* __restrict__ codes,
                           uint8_t* __restrict__ scales) {
  const int k_blocks = k_padded / 32;
  const int64_t item = blockIdx.x * int64_t(kThreads) + threadIdx.x;
  const int64_t r = item / k_blocks;
  const int b = int(item % k_blocks);
  if (r >= valid_rows(rows)) return;
  const int pair = rows.sorted_pair[r];
  float v[32];
  if (pair < 0 || b * 32 >= hidden) {
    for (int i = 0; i < 32; ++i) v[i] = 0.f;
  } else {
    load32(x + int64_t(pair / topk) * x_stride + b * 32, v);
  }
  uint8_t q[32];
  quantize_block(v, rule, q, scales + blockscaled_scale_offset(r, b, k_blocks));
  store32(codes + r * k_padded + b * 32, q);
}

// GPT-OSS SwiGLU, as the reference (reference_moe.cpp) writes it: the gate
// clamped above, the up input on both sides (NaN passes through).
__device__ __forceinline__ float swiglu(float gate, float up, float alpha, float limit) {
  const float g = limit < gate ? limit : gate;
  const float u = up < -limit ? -limit : (limit < up ? limit : up);
  return g / (1.f + expf(-alpha * g)) * (u + 1.f);
}

__global__ void __launch_bounds__(kThreads)
    swiglu_quantize_kernel(const uint16_t* __restrict__ d1, const uint16_t* __restrict__ b13, int ip, float alpha,
                           float limit, GroupedRows rows, MxScaleRule rule, uint8_t* __restrict__ codes,
                           uint8_t* __restrict__ scales) {
  const int k_blocks = ip / 32;
  const int64_t item = blockIdx.x * int64_t(kThreads) + threadIdx.x;
  const int64_t r = item / k_blocks;
  const int b = int(item % k_blocks);
  if (r >= valid_rows(rows)) return;
  float v[32];
  if (rows.sorted_pair[r] < 0) {
    for (int i = 0; i < 32; ++i) v[i] = 0.f;
  } else {
    const int64_t e = rows.tile_expert[r / kRowTile];
    float up[32], gate[32], bu[32], bg[32];
    load32(d1 + r * 2 * ip + b * 32, up);
    load32(d1 + r * 2 * ip + ip + b * 32, gate);
    load32(b13 + e * 2 * ip + b * 32, bu);
    load32(b13 + e * 2 * ip + ip + b * 32, bg);
    for (int i = 0; i < 32; ++i) v[i] = swiglu(gate[i] + bg[i], up[i] + bu[i], alpha, limit);
  }
  uint8_t q[32];
  quantize_block(v, rule, q, scales + blockscaled_scale_offset(r, b, k_blocks));
  store32(codes + r * ip + b * 32, q);
}

// Expert e's rows [128 first, 128 (first + count)) as problem e of `g`.
__device__ void write_problem(const GemmOperands& g, int e, int64_t first_row, int m) {
  const int n = int(g.n), k = int(g.k);
  static_cast<ProblemShape*>(g.out.problem_shapes)[e] = ProblemShape{m, n, k};
  g.out.a[e] = g.a + first_row * g.k;
  g.out.sfa[e] = g.sfa + first_row / kRowTile * blockscaled_k_atoms(g.k / 32) * kScaleAtomBytes;
  g.out.b[e] = g.b + e * (g.n * g.k / 2);
  g.out.sfb[e] = g.sfb + e * blockscaled_scale_bytes(g.n, g.k / 32);
  g.out.d[e] = g.d + first_row * g.n;
  static_cast<StrideA*>(g.out.stride_a)[e] = row_stride(g.k);
  static_cast<StrideB*>(g.out.stride_b)[e] = row_stride(g.k);
  static_cast<StrideD*>(g.out.stride_d)[e] = row_stride(g.n);
  static_cast<LayoutSF*>(g.out.layout_sfa)[e] = layout_sfa(m, n, k);
  static_cast<LayoutSF*>(g.out.layout_sfb)[e] = layout_sfb(m, n, k);
}

__global__ void __launch_bounds__(kThreads)
    grouped_problems_kernel(GroupedRows rows, int experts, GemmOperands g1, GemmOperands g2) {
  __shared__ int first[smxx::kMaxExperts], count[smxx::kMaxExperts];
  for (int e = threadIdx.x; e < experts; e += kThreads) first[e] = count[e] = 0;
  __syncthreads();
  // An expert's tiles are consecutive (the grouping's schedule).
  const int tiles = *rows.num_tiles;
  for (int i = threadIdx.x; i < tiles; i += kThreads) {
    const int e = rows.tile_expert[i];
    atomicAdd(&count[e], 1);
    if (i == 0 || rows.tile_expert[i - 1] != e) first[e] = i;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < experts; e += kThreads) {
    const int64_t first_row = int64_t(first[e]) * kRowTile;
    const int m = count[e] * kRowTile;
    write_problem(g1, e, first_row, m);
    write_problem(g2, e, first_row, m);
  }
}

__global__ void __launch_bounds__(kThreads)
    combine_rows_kernel(const uint16_t* __restrict__ d2, int64_t hp, const uint16_t* __restrict__ b2,
                        const int32_t* __restrict__ pair_row, const int32_t* __restrict__ ids,
                        const float* __restrict__ weights, int64_t tokens, int topk, int hidden, float* __restrict__ y,
                        uint16_t* __restrict__ y_bf16) {
  const int groups = hidden / 8;
  const int64_t item = blockIdx.x * int64_t(kThreads) + threadIdx.x;
  if (item >= tokens * groups) return;
  const int64_t t = item / groups;
  const int c = int(item % groups) * 8;
  float acc[8] = {};
  for (int s = 0; s < topk; ++s) {
    const int64_t p = t * topk + s;
    float d[8], b[8];
    unpack8(*reinterpret_cast<const uint4*>(d2 + int64_t(pair_row[p]) * hp + c), d);
    unpack8(*reinterpret_cast<const uint4*>(b2 + int64_t(ids[p]) * hp + c), b);
    const float w = weights[p];
    for (int j = 0; j < 8; ++j) acc[j] += w * (d[j] + b[j]);
  }
  if (y) {
    float4* out = reinterpret_cast<float4*>(y + t * hidden + c);
    out[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
    out[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
  } else {
    uint32_t u[4];
    for (int i = 0; i < 4; ++i) {
      const uint32_t lo = __bfloat16_as_ushort(__float2bfloat16_rn(acc[2 * i]));
      const uint32_t hi = __bfloat16_as_ushort(__float2bfloat16_rn(acc[2 * i + 1]));
      u[i] = lo | (hi << 16);
    }
    *reinterpret_cast<uint4*>(y_bf16 + t * hidden + c) = make_uint4(u[0], u[1], u[2], u[3]);
  }
}

unsigned grid_for(int64_t items) { return unsigned((items + kThreads - 1) / kThreads); }

Status launched(const char* who, const char* what) { return smxx::cuda_status(cudaGetLastError(), who, what); }

}  // namespace

Status launch_quantize_x_rows(const uint16_t* x, int64_t x_stride, int64_t hidden, int64_t k_padded, int64_t topk,
                              const GroupedRows& rows, MxScaleRule rule, uint8_t* codes, uint8_t* scales,
                              cudaStream_t stream, const char* who) {
  if (hidden % 32 != 0 || k_padded % 128 != 0 || hidden > k_padded || x_stride < hidden || x_stride % 8 != 0 ||
      rows.max_rows % kRowTile != 0 || topk < 1)
    return Status::InvalidArgument(fmt::format(
        "{}: MXFP8 rows need H % 32 == 0, padded K % 128 == 0 and x's row stride a multiple of 8 >= H (H = {}, "
        "K = {}, stride {})", who, hidden, k_padded, x_stride));
  if (rows.max_rows == 0) return Status::Ok();
  quantize_x_rows_kernel<<<grid_for(rows.max_rows * (k_padded / 32)), kThreads, 0, stream>>>(
      x, x_stride, int(hidden), int(k_padded), int(topk), rows, rule, codes, scales);
  return launched(who, "quantize x rows");
}

Status launch_grouped_problems(const GroupedRows& rows, int64_t experts, const GemmOperands& gemm1,
                               const GemmOperands& gemm2, cudaStream_t stream, const char* who) {
  if (experts < 1 || experts > smxx::kMaxExperts)
    return Status::Unsupported(fmt::format("{}: {} experts, at most {}", who, experts, smxx::kMaxExperts));
  for (const GemmOperands* g : {&gemm1, &gemm2})
    if (g->n % 128 != 0 || g->k % 128 != 0 || g->out.groups != experts)
      return Status::InvalidArgument(fmt::format("{}: grouped GEMM of N = {}, K = {}, {} groups: N and K must be "
                                                 "multiples of 128 and the groups the {} experts",
                                                 who, g->n, g->k, g->out.groups, experts));
  grouped_problems_kernel<<<1, kThreads, 0, stream>>>(rows, int(experts), gemm1, gemm2);
  return launched(who, "grouped GEMM problems");
}

Status launch_swiglu_quantize(const uint16_t* d1, const uint16_t* b13, int64_t ip, const SwigluParams& swiglu,
                              const GroupedRows& rows, MxScaleRule rule, uint8_t* codes, uint8_t* scales,
                              cudaStream_t stream, const char* who) {
  if (ip % 128 != 0 || rows.max_rows % kRowTile != 0)
    return Status::InvalidArgument(fmt::format("{}: SwiGLU rows need padded I % 128 == 0 (I = {})", who, ip));
  if (rows.max_rows == 0) return Status::Ok();
  swiglu_quantize_kernel<<<grid_for(rows.max_rows * (ip / 32)), kThreads, 0, stream>>>(
      d1, b13, int(ip), swiglu.alpha, swiglu.limit, rows, rule, codes, scales);
  return launched(who, "SwiGLU + MXFP8");
}

Status launch_combine_rows(const uint16_t* d2, int64_t hp, const uint16_t* b2, const int32_t* pair_row,
                           const int32_t* ids, const float* weights, int64_t tokens, int64_t topk, int64_t hidden,
                           float* y, uint16_t* y_bf16, cudaStream_t stream, const char* who) {
  if (hidden % 8 != 0 || hp % 8 != 0 || hidden > hp || (y == nullptr) == (y_bf16 == nullptr))
    return Status::InvalidArgument(
        fmt::format("{}: combine needs H % 8 == 0, H <= padded H and exactly one of y, y_bf16", who));
  if (tokens == 0) return Status::Ok();
  combine_rows_kernel<<<grid_for(tokens * (hidden / 8)), kThreads, 0, stream>>>(
      d2, hp, b2, pair_row, ids, weights, tokens, int(topk), int(hidden), y, y_bf16);
  return launched(who, "combine");
}

}  // namespace mxmoe::blockscaled
