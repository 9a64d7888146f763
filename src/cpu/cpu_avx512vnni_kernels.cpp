// The avx512_vnni path: AVX-512 with VNNI's vpdpbusd, which sums four u8 x
// s8 products into each 32-bit lane in one instruction. Compiled with
// -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mfma (src/CMakeLists.txt).
#include "cpu/cpu_avx512_ops.h"
#include "cpu/cpu_kernels_impl.h"

namespace mxmoe::cpu {
namespace {

struct Avx512VnniOps : Avx512Ops {
  // 8 tokens a tile: 8 decoded weight registers, 8 totals and the two
  // accumulators fit the 32 zmm registers.
  static constexpr int kTile = 8;

  // sum_k t_k q_k + corr, q = 256 hi + lo: the hi and lo planes in two
  // accumulators, so that neither chain waits on the other.
  static I dot(const Block& w, const int8_t* hi, const int8_t* lo, int32_t corr) {
    __m512i acc_hi = _mm512_setzero_si512(), acc_lo = _mm512_set1_epi32(corr);
    for (int j = 0; j < 8; ++j) {
      acc_hi = _mm512_dpbusd_epi32(acc_hi, w.w[j], broadcast4(hi, j));
      acc_lo = _mm512_dpbusd_epi32(acc_lo, w.w[j], broadcast4(lo, j));
    }
    return _mm512_add_epi32(_mm512_slli_epi32(acc_hi, 8), acc_lo);
  }
};

constexpr Kernels kKernels = Impl<Avx512VnniOps>::table(CpuIsa::kAvx512Vnni);

}  // namespace

const Kernels& avx512_vnni_kernels() { return kKernels; }

}  // namespace mxmoe::cpu
