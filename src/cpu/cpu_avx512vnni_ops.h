// The avx512_vnni path's operations: AVX-512 with VNNI's vpdpbusd, which
// sums four u8 x s8 products into each 32-bit lane in one instruction.
// Included only by the files compiled with VNNI (cpu_avx512vnni_kernels.cpp,
// cpu_amx_kernels.cpp; internal linkage: see cpu_kernels_impl.h).
#pragma once

#include "cpu/cpu_avx512_ops.h"

namespace mxmoe::cpu {
namespace {

struct Avx512VnniOps : Avx512Ops {
  // 8 tokens a tile: 8 decoded weight registers, 8 totals and the four
  // accumulators fit the 32 zmm registers. A block costs 19.3 cycles a token
  // at 4 tokens and 19.2 at 8 (L1, one thread): the decode is paid off.
  static constexpr int kTile = 8;

  // sum_k t_k q_k + corr, q = 256 hi + lo. Four accumulators (hi and lo
  // planes, even and odd k steps) of four vpdpbusd each: at one token a
  // block's sums are otherwise two chains of eight, whose latency (4-5
  // cycles each) the scheduler cannot hide behind the next block's.
  static I dot(const Block& w, const int8_t* hi, const int8_t* lo, int32_t corr) {
    __m512i h0 = _mm512_setzero_si512(), h1 = h0, l0 = _mm512_set1_epi32(corr), l1 = h0;
#pragma GCC unroll 4
    for (int j = 0; j < 8; j += 2) {
      h0 = _mm512_dpbusd_epi32(h0, w.w[j], broadcast4(hi, j));
      h1 = _mm512_dpbusd_epi32(h1, w.w[j + 1], broadcast4(hi, j + 1));
      l0 = _mm512_dpbusd_epi32(l0, w.w[j], broadcast4(lo, j));
      l1 = _mm512_dpbusd_epi32(l1, w.w[j + 1], broadcast4(lo, j + 1));
    }
    return _mm512_add_epi32(_mm512_slli_epi32(_mm512_add_epi32(h0, h1), 8), _mm512_add_epi32(l0, l1));
  }
};

}  // namespace
}  // namespace mxmoe::cpu
