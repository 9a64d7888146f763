// The scalar path: plain C++ for any CPU, the 16 lanes as arrays. Each
// operation is written to give x86's vector results exactly (min/max
// operand order, round-to-nearest-even conversions with INT_MIN for NaN and
// out-of-range values, one rounding in fma), so it is also the
// specification the SIMD paths are tested against bit for bit.
#include <cmath>
#include <cstring>

#include "cpu/cpu_kernels_impl.h"

namespace mxmoe::cpu {
namespace {

struct ScalarOps {
  struct F {
    float v[16];
  };
  struct I {
    int32_t v[16];
  };
  // t[j][4r + i]: row r's code of k = 4j + i, as 2 x E2M1 + 12 (kCodeBias).
  struct Block {
    uint8_t t[8][64];
  };
  // 4 tokens share each decoded block (a table lookup a code).
  static constexpr int kTile = 4;

  template <class Op>
  static F map(Op op) {
    F r;
    for (int i = 0; i < 16; ++i) r.v[i] = op(i);
    return r;
  }
  template <class Op>
  static I imap(Op op) {
    I r;
    for (int i = 0; i < 16; ++i) r.v[i] = op(i);
    return r;
  }

  static F zero() { return set1(0.0f); }
  static F set1(float x) { return map([&](int) { return x; }); }
  static F add(F a, F b) { return map([&](int i) { return a.v[i] + b.v[i]; }); }
  static F sub(F a, F b) { return map([&](int i) { return a.v[i] - b.v[i]; }); }
  static F mul(F a, F b) { return map([&](int i) { return a.v[i] * b.v[i]; }); }
  static F div(F a, F b) { return map([&](int i) { return a.v[i] / b.v[i]; }); }
  static F fma(F a, F b, F c) { return map([&](int i) { return std::fma(a.v[i], b.v[i], c.v[i]); }); }
  static F min(F a, F b) { return map([&](int i) { return a.v[i] < b.v[i] ? a.v[i] : b.v[i]; }); }
  static F max(F a, F b) { return map([&](int i) { return a.v[i] > b.v[i] ? a.v[i] : b.v[i]; }); }
  static F floor(F a) { return map([&](int i) { return std::floor(a.v[i]); }); }
  static F loadu(const float* p) { return map([&](int i) { return p[i]; }); }
  static void storeu(float* p, F v) { std::memcpy(p, v.v, sizeof v.v); }
  static float from_bits32(uint32_t b) {
    float f;
    std::memcpy(&f, &b, sizeof f);
    return f;
  }
  static uint32_t bits32(float f) {
    uint32_t b;
    std::memcpy(&b, &f, sizeof b);
    return b;
  }
  static F load_bf16(const uint16_t* p) { return map([&](int i) { return from_bits32(uint32_t(p[i]) << 16); }); }
  static void store_bf16(uint16_t* p, F v) {
    for (int i = 0; i < 16; ++i) {
      const uint32_t b = bits32(v.v[i]);
      p[i] = std::isnan(v.v[i]) ? uint16_t((b >> 16) | 0x40) : uint16_t((b + 0x7FFF + ((b >> 16) & 1)) >> 16);
    }
  }
  // cvtps2dq: nearest even; NaN and values outside int32 give INT_MIN.
  static I cvt_round(F a) {
    return imap([&](int i) {
      const float x = a.v[i];
      return x >= -2147483648.0f && x < 2147483648.0f ? int32_t(std::nearbyint(x)) : INT32_MIN;
    });
  }
  static F cvt(I a) { return map([&](int i) { return float(a.v[i]); }); }
  static F from_bits(I a) { return map([&](int i) { return from_bits32(uint32_t(a.v[i])); }); }
  static I to_bits(F a) { return imap([&](int i) { return int32_t(bits32(a.v[i])); }); }
  static I iset1(int32_t x) { return imap([&](int) { return x; }); }
  static I iadd(I a, I b) { return imap([&](int i) { return int32_t(uint32_t(a.v[i]) + uint32_t(b.v[i])); }); }
  static I isub(I a, I b) { return imap([&](int i) { return int32_t(uint32_t(a.v[i]) - uint32_t(b.v[i])); }); }
  static I iand(I a, I b) { return imap([&](int i) { return a.v[i] & b.v[i]; }); }
  static I imax(I a, I b) { return imap([&](int i) { return a.v[i] > b.v[i] ? a.v[i] : b.v[i]; }); }
  template <int n>
  static I slli(I a) { return imap([&](int i) { return int32_t(uint32_t(a.v[i]) << n); }); }
  template <int n>
  static I srai(I a) { return imap([&](int i) { return a.v[i] >> n; }); }
  static int32_t hsum(I a) {
    uint32_t s = 0;
    for (int32_t x : a.v) s += uint32_t(x);
    return int32_t(s);
  }
  static int32_t hmax(I a) {
    int32_t m = a.v[0];
    for (int32_t x : a.v) m = x > m ? x : m;
    return m;
  }
  // Lanes i + 8, then i + 4, i + 2, i + 1 (the tree every path uses).
  static float hsum(F a) {
    for (int width = 8; width >= 1; width /= 2)
      for (int i = 0; i < width; ++i) a.v[i] += a.v[i + width];
    return a.v[0];
  }
  static void store_i8(int8_t* p, I v) {
    for (int i = 0; i < 16; ++i) p[i] = int8_t(uint8_t(uint32_t(v.v[i])));
  }

  static Block decode(const uint8_t* codes) {
    static constexpr uint8_t kTable[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};
    Block b;
    for (int q = 0; q < 4; ++q)
      for (int i = 0; i < 64; ++i) {
        b.t[q][i] = kTable[codes[64 * q + i] & 0xF];
        b.t[q + 4][i] = kTable[codes[64 * q + i] >> 4];
      }
    return b;
  }
  static F row_scales(const uint8_t* s) {
    return map([&](int i) { return from_bits32(s[i] ? uint32_t(s[i]) << 23 : 0x00400000u); });
  }
  static I dot(const Block& w, const int8_t* hi, const int8_t* lo, int32_t corr) {
    return imap([&](int r) {
      int32_t sum = corr;
      for (int j = 0; j < 8; ++j)
        for (int i = 0; i < 4; ++i) sum += int32_t(w.t[j][4 * r + i]) * (256 * hi[4 * j + i] + lo[4 * j + i]);
      return sum;
    });
  }
};

constexpr Kernels kKernels = Impl<ScalarOps>::table(CpuIsa::kScalar);

}  // namespace

const Kernels& scalar_kernels() { return kKernels; }

}  // namespace mxmoe::cpu
