// MX block quantization (one E8M0 scale per 32 elements along K).
#include <algorithm>
#include <cmath>

#include "mxmoe/format.h"

namespace mxmoe {
namespace {

// floor(log2(a)) for finite a > 0, exactly (frexp, no log rounding).
int floor_log2(float a) {
  int e;
  const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  (void)m;
  return e - 1;
}

// ceil(log2(a)) for finite a > 0, exactly.
int ceil_log2(float a) {
  int e;
  const float m = std::frexp(a, &e);
  return m == 0.5f ? e - 1 : e;
}

// The E8M0 byte for a block whose largest magnitude is `amax` (> 0), for
// elements whose largest binade exponent is `elem_emax` and max is `elem_max`.
uint8_t block_scale(float amax, MxScaleRule rule, int elem_emax, float elem_max) {
  int exp = rule == MxScaleRule::kOcp ? floor_log2(amax) - elem_emax : ceil_log2(amax / elem_max);
  exp = std::clamp(exp, -127, 127);
  return uint8_t(exp + 127);
}

bool all_finite(const float* x, int64_t k) {
  for (int64_t i = 0; i < k; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
}

float block_amax(const float* x) {
  float amax = 0.0f;
  for (int i = 0; i < kMxBlock; ++i) amax = std::max(amax, std::fabs(x[i]));
  return amax;
}

// Scales each 32-block of x by its shared scale and hands the scaled values to
// `store(index, value)`. `elem_emax`/`elem_max` describe the element format.
template <typename Store>
bool quantize_blocks(const float* x, int64_t k, uint8_t* scales, MxScaleRule rule, int elem_emax,
                     float elem_max, Store store) {
  if (k % kMxBlock != 0 || !all_finite(x, k)) return false;
  for (int64_t b = 0; b < k / kMxBlock; ++b) {
    const float* blk = x + b * kMxBlock;
    const float amax = block_amax(blk);
    const uint8_t s = amax == 0.0f ? kE8M0Neutral : block_scale(amax, rule, elem_emax, elem_max);
    scales[b] = s;
    const float inv = std::ldexp(1.0f, 127 - int(s));  // exact power of two
    for (int i = 0; i < kMxBlock; ++i) store(b * kMxBlock + i, blk[i] * inv);
  }
  return true;
}

}  // namespace

bool mxfp4_quantize_row(const float* x, int64_t k, uint8_t* codes, uint8_t* scales,
                        MxScaleRule rule) {
  return quantize_blocks(x, k, scales, rule, 2, kE2M1Max, [codes](int64_t i, float v) {
    const uint8_t code = float_to_e2m1(v);
    uint8_t& byte = codes[i / 2];
    byte = (i & 1) ? uint8_t((byte & 0x0F) | (code << 4)) : uint8_t((byte & 0xF0) | code);
  });
}

void mxfp4_dequantize_row(const uint8_t* codes, const uint8_t* scales, int64_t k, float* out) {
  for (int64_t i = 0; i < k; ++i)
    out[i] = e2m1_to_float(e2m1_code_at(codes, i)) * e8m0_to_float(scales[i / kMxBlock]);
}

bool mxfp8_quantize_row(const float* x, int64_t k, uint8_t* codes, uint8_t* scales,
                        MxScaleRule rule) {
  return quantize_blocks(x, k, scales, rule, 8, kE4M3Max,
                         [codes](int64_t i, float v) { codes[i] = float_to_e4m3(v); });
}

void mxfp8_dequantize_row(const uint8_t* codes, const uint8_t* scales, int64_t k, float* out) {
  for (int64_t i = 0; i < k; ++i)
    out[i] = e4m3_to_float(codes[i]) * e8m0_to_float(scales[i / kMxBlock]);
}

}  // namespace mxmoe
