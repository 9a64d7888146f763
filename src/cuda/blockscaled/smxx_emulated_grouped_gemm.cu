// See smxx_emulated_grouped_gemm.h. Block (column tile, row tile): rows
// [32 j, 32 j + 32) of the groups' rows taken one after another (M_g is a
// multiple of 128, so a tile never straddles two groups) and columns
// [32 i, 32 i + 32); each K block of 32 is decoded into shared memory, then
// thread (ty, tx) sums rows 4 ty .. 4 ty + 3 of column tx.
#include "cuda/blockscaled/smxx_emulated_grouped_gemm.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <fmt/format.h>

#include "cuda/blockscaled/blockscaled_types.cuh"
#include "cuda/common/smxx_moe_kernels.h"

namespace mxmoe::blockscaled {
namespace {

constexpr int kTile = 32;
constexpr int kThreads = 256;

__device__ __forceinline__ float e4m3(uint8_t code) {
  __nv_fp8_e4m3 v;
  v.__x = code;
  return float(v);
}

__device__ __forceinline__ float e2m1(uint8_t code) {
  const float mag[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  const float m = mag[code & 7];
  return (code & 8) ? -m : m;
}

// 2^(s - 127) as an exponent; 0xFF (NaN) stays apart.
__device__ __forceinline__ int scale_exponent(uint8_t s) { return int(s) - 127; }

__global__ void __launch_bounds__(kThreads) emulated_gemm_kernel(GroupedGemmArgs args) {
  const auto* shapes = static_cast<const ProblemShape*>(args.problem_shapes);
  // The group holding this block's rows.
  const int64_t row = int64_t(blockIdx.y) * kTile;
  int g = 0;
  int64_t first = 0;
  for (; g < args.groups; ++g) {
    const int m = cute::get<0>(shapes[g]);
    if (row < first + m) break;
    first += m;
  }
  if (g == args.groups) return;
  const int m0 = int(row - first), n0 = int(blockIdx.x) * kTile;
  const int n = cute::get<1>(shapes[g]), k = cute::get<2>(shapes[g]);
  if (n0 >= n) return;
  const auto* a = static_cast<const uint8_t*>(args.a[g]);
  const auto* b = static_cast<const uint8_t*>(args.b[g]);
  const auto* sfa = static_cast<const uint8_t*>(args.sfa[g]);
  const auto* sfb = static_cast<const uint8_t*>(args.sfb[g]);
  auto* d = static_cast<__nv_bfloat16*>(args.d[g]);
  const int64_t lda = cute::get<0>(static_cast<const StrideA*>(args.stride_a)[g]);
  const int64_t ldb = cute::get<0>(static_cast<const StrideB*>(args.stride_b)[g]);
  const int64_t ldd = cute::get<0>(static_cast<const StrideD*>(args.stride_d)[g]);
  const LayoutSF lsfa = static_cast<const LayoutSF*>(args.layout_sfa)[g];
  const LayoutSF lsfb = static_cast<const LayoutSF*>(args.layout_sfb)[g];

  __shared__ float as[kTile][kTile + 1], bs[kTile][kTile + 1];
  __shared__ uint8_t sa[kTile], sb[kTile];
  const int tx = threadIdx.x % kTile, ty = threadIdx.x / kTile;
  float acc[4] = {};
  for (int k0 = 0; k0 < k; k0 += 32) {
    for (int i = threadIdx.x; i < kTile * 32; i += kThreads) {
      const int r = i / 32, c = i % 32;
      as[r][c] = e4m3(a[(m0 + r) * lda + k0 + c]);
      const int64_t bi = (n0 + r) * ldb + k0 + c;  // element index; two a byte, low nibble first
      bs[r][c] = e2m1(uint8_t(b[bi / 2] >> (4 * (bi % 2))));
    }
    if (threadIdx.x < kTile) sa[threadIdx.x] = sfa[lsfa(m0 + threadIdx.x, k0, 0)];
    else if (threadIdx.x < 2 * kTile) sb[threadIdx.x - kTile] = sfb[lsfb(n0 + threadIdx.x - kTile, k0, 0)];
    __syncthreads();
    for (int j = 0; j < 4; ++j) {
      const int r = 4 * ty + j;
      float part = 0.f;
      for (int c = 0; c < 32; ++c) part += as[r][c] * bs[tx][c];
      acc[j] += sa[r] == 0xFF || sb[tx] == 0xFF
                    ? __int_as_float(0x7FC00000)
                    : ldexpf(part, scale_exponent(sa[r]) + scale_exponent(sb[tx]));
    }
    __syncthreads();
  }
  for (int j = 0; j < 4; ++j) d[(m0 + 4 * ty + j) * ldd + n0 + tx] = __float2bfloat16_rn(acc[j]);
}

size_t no_workspace(int, int) { return 0; }

Status run_emulated(const GroupedGemmArgs& args, void*, size_t, int, cudaStream_t stream) {
  if (args.n % kTile != 0 || args.k % 32 != 0 || args.max_rows % kTile != 0)
    return Status::InvalidArgument(
        fmt::format("emulated grouped GEMM: N = {} and rows {} must be multiples of 32, K of 32", args.n, args.max_rows,
                    args.k));
  if (args.max_rows == 0 || args.groups == 0) return Status::Ok();
  const dim3 grid(unsigned(args.n / kTile), unsigned(args.max_rows / kTile));
  emulated_gemm_kernel<<<grid, kThreads, 0, stream>>>(args);
  return smxx::cuda_status(cudaGetLastError(), "emulated grouped GEMM", "launch");
}

}  // namespace

const GroupedGemm& emulated_grouped_gemm() {
  static const GroupedGemm gemm{"emulated", no_workspace, run_emulated};
  return gemm;
}

}  // namespace mxmoe::blockscaled
