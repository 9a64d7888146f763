// The avx512 path: AVX-512 F + BW without VNNI. The block's sums are
// vpmaddubsw (pairs of u8 x s8 products to int16) and vpmaddwd (pairs of
// int16 to int32). Compiled with -mavx512f -mavx512bw -mavx512vl -mfma
// (src/CMakeLists.txt).
#include "cpu/cpu_avx512_ops.h"
#include "cpu/cpu_kernels_impl.h"

namespace mxmoe::cpu {
namespace {

struct Avx512BwOps : Avx512Ops {
  // 8 tokens a tile, as avx512_vnni: a block costs 27.8 cycles a token at 4
  // tokens, 25.9 at 8 (L1, one thread).
  static constexpr int kTile = 8;

  // Four vpmaddubsw results add up in int16 without overflow: a lane is
  // t q + t' q' with t in [0, 24] and q in [-128, 127], at most 6144 in
  // magnitude, and four of them 24576 < 32767. vpmaddwd then widens each
  // half-block sum, times 256 for the hi plane and 1 for the lo plane.
  static I dot(const Block& w, const int8_t* hi, const int8_t* lo, int32_t corr) {
    __m512i acc = _mm512_set1_epi32(corr);
#pragma GCC unroll 2
    for (const int8_t* plane : {hi, lo}) {
      const __m512i weight = _mm512_set1_epi16(plane == hi ? 256 : 1);
#pragma GCC unroll 2
      for (int j0 = 0; j0 < 8; j0 += 4) {
        __m512i s = _mm512_maddubs_epi16(w.w[j0], broadcast4(plane, j0));
#pragma GCC unroll 3
        for (int j = j0 + 1; j < j0 + 4; ++j) s = _mm512_add_epi16(s, _mm512_maddubs_epi16(w.w[j], broadcast4(plane, j)));
        acc = _mm512_add_epi32(acc, _mm512_madd_epi16(s, weight));
      }
    }
    return acc;
  }
};

constexpr Kernels kKernels = Impl<Avx512BwOps>::table(CpuIsa::kAvx512);

}  // namespace

const Kernels& avx512_kernels() { return kKernels; }

}  // namespace mxmoe::cpu
