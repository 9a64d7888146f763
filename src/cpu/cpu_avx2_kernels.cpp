// The avx2 path: AVX2 + FMA, the 16 rows of a weight group as two 256-bit
// halves (rows 0-7, 8-15); the block sums as on avx512 (cpu_maddubs_dot.h). Compiled with -mavx2 -mfma (src/CMakeLists.txt).
#include <immintrin.h>

#include "cpu/cpu_kernels_impl.h"
#include "cpu/cpu_maddubs_dot.h"

namespace mxmoe::cpu {
namespace {

struct Avx2Ops {
  struct F {
    __m256 lo, hi;
  };
  struct I {
    __m256i lo, hi;
  };
  // 4 tokens a tile: a block costs 52 cycles at one token, 50 a token at 2
  // and 44 at 4 (L1, one thread); a decoded half (8 of the 16 registers)
  // leaves too few for the sums of more.
  static constexpr int kTile = 4;

  static F zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static F set1(float v) { return {_mm256_set1_ps(v), _mm256_set1_ps(v)}; }
  static F add(F a, F b) { return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
  static F sub(F a, F b) { return {_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi)}; }
  static F mul(F a, F b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
  static F div(F a, F b) { return {_mm256_div_ps(a.lo, b.lo), _mm256_div_ps(a.hi, b.hi)}; }
  static F fma(F a, F b, F c) { return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)}; }
  static F min(F a, F b) { return {_mm256_min_ps(a.lo, b.lo), _mm256_min_ps(a.hi, b.hi)}; }
  static F max(F a, F b) { return {_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)}; }
  static F floor(F a) { return {_mm256_floor_ps(a.lo), _mm256_floor_ps(a.hi)}; }
  static F loadu(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  static void storeu(float* p, F v) {
    _mm256_storeu_ps(p, v.lo);
    _mm256_storeu_ps(p + 8, v.hi);
  }
  static __m256 load_bf16x8(const uint16_t* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static F load_bf16(const uint16_t* p) { return {load_bf16x8(p), load_bf16x8(p + 8)}; }
  // Round to nearest even; NaN keeps its sign and becomes quiet (float_to_bf16).
  static __m256i bf16_bits(__m256 v) {
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
    return _mm256_blendv_epi8(rounded, quiet, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
  }
  static void store_bf16(uint16_t* p, F v) {
    // packus interleaves the 128-bit lanes: [lo 0-3, hi 0-3, lo 4-7, hi 4-7].
    const __m256i packed = _mm256_packus_epi32(bf16_bits(v.lo), bf16_bits(v.hi));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_permute4x64_epi64(packed, 0xD8));
  }
  static I cvt_round(F a) { return {_mm256_cvtps_epi32(a.lo), _mm256_cvtps_epi32(a.hi)}; }
  static F cvt(I a) { return {_mm256_cvtepi32_ps(a.lo), _mm256_cvtepi32_ps(a.hi)}; }
  static F from_bits(I a) { return {_mm256_castsi256_ps(a.lo), _mm256_castsi256_ps(a.hi)}; }
  static I to_bits(F a) { return {_mm256_castps_si256(a.lo), _mm256_castps_si256(a.hi)}; }
  static I iset1(int32_t v) { return {_mm256_set1_epi32(v), _mm256_set1_epi32(v)}; }
  static I iadd(I a, I b) { return {_mm256_add_epi32(a.lo, b.lo), _mm256_add_epi32(a.hi, b.hi)}; }
  static I isub(I a, I b) { return {_mm256_sub_epi32(a.lo, b.lo), _mm256_sub_epi32(a.hi, b.hi)}; }
  static I iand(I a, I b) { return {_mm256_and_si256(a.lo, b.lo), _mm256_and_si256(a.hi, b.hi)}; }
  static I imax(I a, I b) { return {_mm256_max_epi32(a.lo, b.lo), _mm256_max_epi32(a.hi, b.hi)}; }
  template <int n>
  static I slli(I a) { return {_mm256_slli_epi32(a.lo, n), _mm256_slli_epi32(a.hi, n)}; }
  template <int n>
  static I srai(I a) { return {_mm256_srai_epi32(a.lo, n), _mm256_srai_epi32(a.hi, n)}; }
  static int32_t hsum(I a) {
    const __m256i s8 = _mm256_add_epi32(a.lo, a.hi);
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1)));
  }
  static int32_t hmax(I a) {
    const __m256i m8 = _mm256_max_epi32(a.lo, a.hi);
    __m128i m = _mm_max_epi32(_mm256_castsi256_si128(m8), _mm256_extracti128_si256(m8, 1));
    m = _mm_max_epi32(m, _mm_shuffle_epi32(m, 0x4E));
    return _mm_cvtsi128_si32(_mm_max_epi32(m, _mm_shuffle_epi32(m, 0xB1)));
  }
  // Lanes i + 8, then i + 4, i + 2, i + 1 (the tree every path uses).
  static float hsum(F a) {
    const __m256 s8 = _mm256_add_ps(a.lo, a.hi);
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
  }
  // 16 lanes in [-128, 127] to bytes: packs run per 128-bit lane, so the
  // dwords come out as [lo 0-3, hi 0-3, ., ., lo 4-7, hi 4-7, ., .].
  static void store_i8(int8_t* p, I v) {
    const __m256i w16 = _mm256_packs_epi32(v.lo, v.hi);
    const __m256i w8 = _mm256_packs_epi16(w16, w16);
    const __m256i ordered = _mm256_permutevar8x32_epi32(w8, _mm256_setr_epi32(0, 4, 1, 5, 0, 0, 0, 0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(ordered));
  }

  // The 8 k steps of rows 8h .. 8h + 7 of a block, decoded as in Avx512Ops:
  // each 64-byte piece of kCpuRowGroups16 holds rows 0-7 in its first 32
  // bytes and rows 8-15 in its second.
  static void decode_half(const uint8_t* codes, int h, __m256i* w) {
    const __m256i table = _mm256_broadcastsi128_si256(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    const __m256i nibble = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 64 * q + 32 * h));
      w[q] = _mm256_shuffle_epi8(table, _mm256_and_si256(v, nibble));
      w[q + 4] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble));
    }
  }

  // A block's sums for N rows, one half at a time: a whole decoded block
  // (16 registers) does not fit beside the sums, a half does.
  template <int N>
  static void block_sums(const uint8_t* codes, const RowPtr* rows, int64_t b, I* sums) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256i w[8];
      decode_half(codes, h, w);
#pragma GCC unroll 16
      for (int n = 0; n < N; ++n)
        (h == 0 ? sums[n].lo : sums[n].hi) = dot8(w, rows[n].hi + 32 * b, rows[n].lo + 32 * b, rows[n].corr[b]);
    }
  }

  // 2^(s - 127) per row; s = 0 is 2^-127, a subnormal (0x00400000).
  static __m256 scales8(const uint8_t* s) {
    const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s)));
    const __m256i zero = _mm256_cmpeq_epi32(e, _mm256_setzero_si256());
    return _mm256_castsi256_ps(_mm256_blendv_epi8(_mm256_slli_epi32(e, 23), _mm256_set1_epi32(0x00400000), zero));
  }
  static F row_scales(const uint8_t* s) { return {scales8(s), scales8(s + 8)}; }

  static __m256i maddubs(__m256i a, __m256i b) { return _mm256_maddubs_epi16(a, b); }
  static __m256i madd(__m256i a, __m256i b) { return _mm256_madd_epi16(a, b); }
  static __m256i add16(__m256i a, __m256i b) { return _mm256_add_epi16(a, b); }
  static __m256i add32(__m256i a, __m256i b) { return _mm256_add_epi32(a, b); }
  static __m256i set1_16(int16_t v) { return _mm256_set1_epi16(v); }
  static __m256i set1_32(int32_t v) { return _mm256_set1_epi32(v); }
  static __m256i dot8(const __m256i* w, const int8_t* hi, const int8_t* lo, int32_t corr) {
    return maddubs_block_sum<Avx2Ops>(w, hi, lo, corr);
  }
  static __m256i broadcast4(const int8_t* p, int j) {
    int32_t v;
    __builtin_memcpy(&v, p + 4 * j, 4);
    return _mm256_set1_epi32(v);
  }
};

constexpr Kernels kKernels = Impl<Avx2Ops>::table(CpuIsa::kAvx2);

}  // namespace

const Kernels& avx2_kernels() { return kKernels; }

}  // namespace mxmoe::cpu
