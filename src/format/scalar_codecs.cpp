// Scalar conversions: bf16, E8M0, E2M1, E4M3. See include/mxmoe/format.h.
#include <cmath>
#include <cstring>
#include <limits>

#include "mxmoe/format.h"

namespace mxmoe {

uint16_t float_to_bf16(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  if (std::isnan(v)) return uint16_t((bits >> 16) | 0x0040);  // keep sign, force quiet
  const uint32_t lsb = (bits >> 16) & 1u;
  return uint16_t((bits + 0x7FFFu + lsb) >> 16);  // round to nearest, ties to even
}

float bf16_to_float(uint16_t b) {
  const uint32_t bits = uint32_t(b) << 16;
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

float e8m0_to_float(uint8_t s) {
  if (s == kE8M0NaN) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, int(s) - 127);
}

float e2m1_to_float(uint8_t code) {
  static constexpr float kMagnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = kMagnitude[code & 7];
  return (code & 8) ? -m : m;
}

uint8_t float_to_e2m1(float v) {
  if (std::isnan(v)) return 0x7;
  const float a = std::fabs(v);
  // Decision points are the midpoints between grid values; at a midpoint the
  // even code (mantissa bit 0) wins: 0.25->0, 0.75->1.0, 1.25->1.0, 1.75->2,
  // 2.5->2, 3.5->4, 5->4.
  uint8_t code;
  if (a <= 0.25f) code = 0;
  else if (a < 0.75f) code = 1;
  else if (a <= 1.25f) code = 2;
  else if (a < 1.75f) code = 3;
  else if (a <= 2.5f) code = 4;
  else if (a < 3.5f) code = 5;
  else if (a <= 5.0f) code = 6;
  else code = 7;  // saturate at 6
  return std::signbit(v) ? uint8_t(code | 8) : code;
}

float e4m3_to_float(uint8_t code) {
  const int exp = (code >> 3) & 0xF;
  const int man = code & 7;
  float m;
  if (exp == 0xF && man == 7) {
    m = std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    m = std::ldexp(float(man), -9);  // subnormal: man/8 * 2^-6
  } else {
    m = std::ldexp(1.0f + float(man) / 8.0f, exp - 7);
  }
  return (code & 0x80) ? -m : m;
}

uint8_t float_to_e4m3(float v) {
  if (std::isnan(v)) return 0x7F;
  const uint8_t sign = std::signbit(v) ? 0x80 : 0x00;
  const float a = std::fabs(v);
  if (a >= kE4M3Max) return sign | 0x7E;  // saturate at 448 (Inf included)
  if (a < std::ldexp(1.0f, -6)) {
    // Subnormal range, quantum 2^-9; nearbyint rounds ties to even. A result of
    // 8 is the smallest normal, whose code is also 8.
    return sign | uint8_t(std::nearbyint(std::ldexp(a, 9)));
  }
  int e;
  const float frac = std::frexp(a, &e);  // a = frac * 2^e, frac in [0.5, 1)
  int exp = e - 1;                        // a = (2 * frac) * 2^exp
  int man = int(std::nearbyint((2.0f * frac - 1.0f) * 8.0f));
  if (man == 8) {
    man = 0;
    ++exp;
  }
  const int biased = exp + 7;
  if (biased > 15 || (biased == 15 && man == 7)) return sign | 0x7E;
  return sign | uint8_t((biased << 3) | man);
}

}  // namespace mxmoe
