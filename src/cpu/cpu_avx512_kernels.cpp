// The avx512 path: AVX-512 F + BW without VNNI. The block's sums are
// vpmaddubsw and vpmaddwd (cpu_maddubs_dot.h). Compiled with -mavx512f -mavx512bw -mavx512vl -mfma
// (src/CMakeLists.txt).
#include "cpu/cpu_avx512_ops.h"
#include "cpu/cpu_kernels_impl.h"
#include "cpu/cpu_maddubs_dot.h"

namespace mxmoe::cpu {
namespace {

struct Avx512BwOps : Avx512Ops {
  // 8 tokens a tile, as avx512_vnni: a block costs 27.8 cycles a token at 4
  // tokens, 25.9 at 8 (L1, one thread).
  static constexpr int kTile = 8;

  static __m512i maddubs(__m512i a, __m512i b) { return _mm512_maddubs_epi16(a, b); }
  static __m512i madd(__m512i a, __m512i b) { return _mm512_madd_epi16(a, b); }
  static __m512i add16(__m512i a, __m512i b) { return _mm512_add_epi16(a, b); }
  static __m512i add32(__m512i a, __m512i b) { return _mm512_add_epi32(a, b); }
  static __m512i set1_16(int16_t v) { return _mm512_set1_epi16(v); }
  static __m512i set1_32(int32_t v) { return _mm512_set1_epi32(v); }

  static I dot(const Block& w, const int8_t* hi, const int8_t* lo, int32_t corr) {
    return maddubs_block_sum<Avx512BwOps>(w.w, hi, lo, corr);
  }
};

constexpr Kernels kKernels = Impl<Avx512BwOps>::table(CpuIsa::kAvx512);

}  // namespace

const Kernels& avx512_kernels() { return kKernels; }

}  // namespace mxmoe::cpu
