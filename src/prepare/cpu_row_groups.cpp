// kCpuRowGroups16 with SSE2, which every x86-64 CPU has (the library targets
// x86-64: the cpu kernels are AVX-512 / AVX2 / scalar paths of it), so this
// file needs no flag of its own. Loading is bound by memory, not by these
// few operations a 16 bytes.
#include "prepare/cpu_row_groups.h"

#include <emmintrin.h>

namespace mxmoe {
namespace {

// One row's 16 bytes of an MX block (element k in byte k / 2, low nibble for
// even k) -> its 16 bytes of the group's block, byte j = element j | element
// j + 16 << 4. With A the first 8 bytes (elements 0-15) and B the last 8
// (16-31): byte 2m = low(A[m]) | low(B[m]) << 4, byte 2m + 1 = high(A[m]) |
// high(B[m]) << 4, i.e. the bytes of two masked combinations, interleaved.
inline __m128i pair_with_sixteen_further(__m128i v) {
  const __m128i low = _mm_set1_epi8(0x0F);
  const __m128i b = _mm_srli_si128(v, 8);
  const __m128i even = _mm_or_si128(_mm_and_si128(v, low), _mm_slli_epi16(_mm_and_si128(b, low), 4));
  const __m128i odd = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(v, 4), low), _mm_andnot_si128(low, b));
  return _mm_unpacklo_epi8(even, odd);
}

// 16 x 16 bytes, x[r] byte c -> x[c] byte r: four rounds of one perfect
// shuffle (vector i with vector i + 8, bytes interleaved), each rotating the
// 8 bits (row, column) of an element's position left by one.
inline void transpose16x16(__m128i x[16]) {
  for (int round = 0; round < 4; ++round) {
    __m128i y[16];
    for (int i = 0; i < 8; ++i) {
      y[2 * i] = _mm_unpacklo_epi8(x[i], x[i + 8]);
      y[2 * i + 1] = _mm_unpackhi_epi8(x[i], x[i + 8]);
    }
    for (int i = 0; i < 16; ++i) x[i] = y[i];
  }
}

}  // namespace

void cpu16_group_codes(const uint8_t* const rows[16], int64_t cols, uint8_t* out) {
  for (int64_t b = 0; b < cols / 32; ++b) {
    uint8_t* block = out + 256 * b;
    // Row r's 4-byte piece q goes to 64q + 4r: four rows at a time, a 4 x 4
    // transpose of 32-bit words gives each quarter's 16 contiguous bytes.
    for (int r = 0; r < 16; r += 4) {
      __m128i x[4];
      for (int i = 0; i < 4; ++i)
        x[i] = pair_with_sixteen_further(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[r + i] + 16 * b)));
      const __m128i t0 = _mm_unpacklo_epi32(x[0], x[1]), t1 = _mm_unpacklo_epi32(x[2], x[3]);
      const __m128i t2 = _mm_unpackhi_epi32(x[0], x[1]), t3 = _mm_unpackhi_epi32(x[2], x[3]);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(block + 0 + 4 * r), _mm_unpacklo_epi64(t0, t1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(block + 64 + 4 * r), _mm_unpackhi_epi64(t0, t1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(block + 128 + 4 * r), _mm_unpacklo_epi64(t2, t3));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(block + 192 + 4 * r), _mm_unpackhi_epi64(t2, t3));
    }
  }
}

bool cpu16_group_scales(const uint8_t* const rows[16], int64_t blocks, uint8_t* out) {
  const __m128i nan = _mm_set1_epi8(char(0xFF));
  __m128i seen = _mm_setzero_si128();
  int64_t b = 0;
  for (; b + 16 <= blocks; b += 16) {
    __m128i x[16];
    for (int r = 0; r < 16; ++r) {
      x[r] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[r] + b));
      seen = _mm_or_si128(seen, _mm_cmpeq_epi8(x[r], nan));
    }
    transpose16x16(x);
    for (int i = 0; i < 16; ++i) _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16 * (b + i)), x[i]);
  }
  uint8_t tail_seen = 0;
  for (; b < blocks; ++b)
    for (int r = 0; r < 16; ++r) {
      out[16 * b + r] = rows[r][b];
      tail_seen |= uint8_t(rows[r][b] == 0xFF);
    }
  return _mm_movemask_epi8(seen) != 0 || tail_seen != 0;
}

}  // namespace mxmoe
