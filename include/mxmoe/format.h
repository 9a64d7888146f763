// Number formats of MXFP4 MoE weights and activations (OCP Microscaling v1.0).
//
// E2M1 (FP4): 1 sign bit (bit 3), 2 exponent bits, 1 mantissa bit; magnitudes
//   code & 7 -> {0, 0.5, 1, 1.5, 2, 3, 4, 6}. No Inf, no NaN.
//   Packing: two codes per byte, LOW nibble = EVEN element, HIGH nibble = ODD element
//   (the GPT-OSS checkpoint convention).
// E8M0 (scale): value 2^(s - 127); s = 0xFF is NaN; s = 127 is 1.0, the neutral scale
//   every padded scale position holds.
// E4M3 (FP8, MXFP8 elements): bias 7, max finite 448, NaN = S.1111.111, no Inf.
// MX block: 32 consecutive elements along K share one E8M0 scale.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mxmoe {

inline constexpr int kMxBlock = 32;            // elements per shared scale
inline constexpr uint8_t kE8M0Neutral = 127;   // 2^0 = 1.0
inline constexpr uint8_t kE8M0NaN = 0xFF;
inline constexpr float kE2M1Max = 6.0f;
inline constexpr float kE4M3Max = 448.0f;

// ---- bf16 -------------------------------------------------------------------
// Round-to-nearest-even; NaN stays NaN (quiet), Inf stays Inf.
uint16_t float_to_bf16(float v);
float bf16_to_float(uint16_t bits);

// ---- E8M0 -------------------------------------------------------------------
// 2^(s-127) as float (s = 0 gives 2^-127, a float subnormal); NaN for 0xFF.
float e8m0_to_float(uint8_t s);

// ---- E2M1 -------------------------------------------------------------------
float e2m1_to_float(uint8_t code);  // uses the low 4 bits of `code`
// Round-to-nearest-even onto the E2M1 grid, saturating at +-6. NaN -> +6 is NOT
// done: NaN input is rejected by the quantizers before it reaches here; this
// maps NaN to code 0x7 (+6) only as a defined fallback. -0.0 -> code 0x8.
uint8_t float_to_e2m1(float v);

// Element `i` of a packed E2M1 row.
inline uint8_t e2m1_code_at(const uint8_t* packed, int64_t i) {
  const uint8_t byte = packed[i >> 1];
  return (i & 1) ? uint8_t(byte >> 4) : uint8_t(byte & 0xF);
}

// ---- E4M3 -------------------------------------------------------------------
float e4m3_to_float(uint8_t code);
// Round-to-nearest-even, saturating at +-448; NaN -> 0x7F.
uint8_t float_to_e4m3(float v);

// ---- MX blocks --------------------------------------------------------------
enum class MxScaleRule {
  // OCP MX v1.0: shared exponent = floor(log2(amax)) - emax_elem (2 for E2M1,
  // 8 for E4M3); elements then round-to-nearest-even and saturate.
  kOcp,
  // OpenAI triton_kernels quantizer: scale = 2^ceil(log2(amax / max_elem)), so no
  // element ever exceeds max_elem (never clips). The rule the Blackwell engines
  // quantize MXFP8 activations with (max_elem 448 for E4M3), and mxmoe's
  // default for them (ActivationOptions).
  kTriton,
};

// Quantize one row of `k` floats (k a multiple of 32) to packed E2M1 codes
// (k/2 bytes) and E8M0 scales (k/32 bytes). An all-zero block gets scale 127
// (neutral) and zero codes. Returns false (writing nothing meaningful) if the row
// holds NaN or Inf.
bool mxfp4_quantize_row(const float* x, int64_t k, uint8_t* codes, uint8_t* scales,
                        MxScaleRule rule = MxScaleRule::kOcp);
// Dequantize k elements; a block with scale 0xFF yields NaN; products beyond
// float range (e.g. 4 * 2^127) become +-Inf.
void mxfp4_dequantize_row(const uint8_t* codes, const uint8_t* scales, int64_t k, float* out);

// MXFP8 (E4M3 elements, one byte each; E8M0 scale per 32).
bool mxfp8_quantize_row(const float* x, int64_t k, uint8_t* codes, uint8_t* scales,
                        MxScaleRule rule = MxScaleRule::kOcp);
void mxfp8_dequantize_row(const uint8_t* codes, const uint8_t* scales, int64_t k, float* out);

}  // namespace mxmoe
