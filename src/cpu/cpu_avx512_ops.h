// The 16-lane operations of cpu_kernels_impl.h on AVX-512 (F + BW): one zmm
// register is the 16 rows of a weight group. The block dot product is the
// path's own (cpu_avx512_kernels.cpp: vpmaddubsw, cpu_avx512vnni_kernels.cpp:
// vpdpbusd); included only by those two files (internal linkage: see
// cpu_kernels_impl.h).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace mxmoe::cpu {
namespace {

struct Avx512Ops {
  using F = __m512;
  using I = __m512i;
  // A 16-row group's 32-wide block, decoded: w[j] holds, per row (32-bit
  // lane), the 4 codes of k = 4j .. 4j + 3 as t = 2 x E2M1 + 12 (kCodeBias).
  struct Block {
    __m512i w[8];
  };

  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float v) { return _mm512_set1_ps(v); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F min(F a, F b) { return _mm512_min_ps(a, b); }  // a < b ? a : b
  static F max(F a, F b) { return _mm512_max_ps(a, b); }  // a > b ? a : b
  static F floor(F a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
  static F loadu(const float* p) { return _mm512_loadu_ps(p); }
  static void storeu(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F load_bf16(const uint16_t* p) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  // Round to nearest even; NaN keeps its sign and becomes quiet (float_to_bf16).
  static void store_bf16(uint16_t* p, F v) {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
    const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40));
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet)));
  }
  static I cvt_round(F a) { return _mm512_cvtps_epi32(a); }  // nearest even (MXCSR); NaN -> INT_MIN
  static F cvt(I a) { return _mm512_cvtepi32_ps(a); }
  static F from_bits(I a) { return _mm512_castsi512_ps(a); }
  static I to_bits(F a) { return _mm512_castps_si512(a); }
  static I iset1(int32_t v) { return _mm512_set1_epi32(v); }
  static I iadd(I a, I b) { return _mm512_add_epi32(a, b); }
  static I isub(I a, I b) { return _mm512_sub_epi32(a, b); }
  static I iand(I a, I b) { return _mm512_and_si512(a, b); }
  static I imax(I a, I b) { return _mm512_max_epi32(a, b); }
  template <int n>
  static I slli(I a) { return _mm512_slli_epi32(a, n); }
  template <int n>
  static I srai(I a) { return _mm512_srai_epi32(a, n); }
  static int32_t hsum(I a) { return _mm512_reduce_add_epi32(a); }
  static int32_t hmax(I a) { return _mm512_reduce_max_epi32(a); }
  // Lanes i + 8, then i + 4, i + 2, i + 1 (the tree every path uses).
  static float hsum(F a) {
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
  }
  static void store_i8(int8_t* p, I v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(v)); }

  // The 256 code bytes of a block: per 64-byte piece q, the low nibbles are
  // k = 4q .. 4q + 3 and the high nibbles k + 16 (kCpuRowGroups16), each
  // looked up in a 16-entry byte table (vpshufb, per 128-bit lane).
  static Block decode(const uint8_t* codes) {
    const __m512i table = _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    const __m512i nibble = _mm512_set1_epi8(0x0F);
    Block b;
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      const __m512i v = _mm512_loadu_si512(codes + 64 * q);
      b.w[q] = _mm512_shuffle_epi8(table, _mm512_and_si512(v, nibble));
      b.w[q + 4] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble));
    }
    return b;
  }

  // 2^(s - 127) per row: the exponent field s, except s = 0, 2^-127, a
  // subnormal (0x00400000).
  static F row_scales(const uint8_t* s) {
    const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
    const __mmask16 zero = _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512());
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(zero, _mm512_slli_epi32(e, 23), _mm512_set1_epi32(0x00400000)));
  }

  // The 4 activation bytes of k = 4j .. 4j + 3 in every lane.
  static __m512i broadcast4(const int8_t* p, int j) {
    int32_t v;
    __builtin_memcpy(&v, p + 4 * j, 4);
    return _mm512_set1_epi32(v);
  }
};

}  // namespace
}  // namespace mxmoe::cpu
