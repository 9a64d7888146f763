// Format codecs against values computed here from the format definitions
// (never by calling the codec under test).
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "mxmoe/format.h"
#include "support/test_support.h"

namespace mxmoe {
namespace {

// E2M1 by definition: sign bit 3, exponent bits 2..1 (bias 1), mantissa bit 0;
// exponent 0 is subnormal (0 or 0.5).
double e2m1_by_definition(int code) {
  const int e = (code >> 1) & 3, m = code & 1;
  const double mag = e == 0 ? 0.5 * m : (1.0 + 0.5 * m) * std::pow(2.0, e - 1);
  return (code & 8) ? -mag : mag;
}

// E4M3 by definition: bias 7, exponent 0 subnormal, S.1111.111 NaN.
double e4m3_by_definition(int code) {
  const int e = (code >> 3) & 0xF, m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = e == 0 ? m / 8.0 * std::pow(2.0, -6) : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
  return (code & 0x80) ? -mag : mag;
}

TEST(E2M1, SixteenCodesHaveTheOcpMagnitudes) {
  const double expected[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(e2m1_to_float(uint8_t(c)), e2m1_by_definition(c)) << "code " << c;
    EXPECT_EQ(std::fabs(e2m1_by_definition(c)), expected[c & 7]);
  }
  EXPECT_TRUE(std::signbit(e2m1_to_float(0x8))) << "code 8 is -0.0";
}

TEST(Mxfp4, AllScaleBytesTimesAllCodesDequantize) {
  // One block per (scale, code) pair; codes packed low nibble = even element.
  for (int s = 0; s < 256; ++s) {
    for (int c = 0; c < 16; ++c) {
      uint8_t codes[16];
      std::memset(codes, c | (c << 4), sizeof codes);
      const uint8_t scale = uint8_t(s);
      float out[32];
      mxfp4_dequantize_row(codes, &scale, 32, out);
      for (float v : out) {
        if (s == 0xFF) {
          EXPECT_TRUE(std::isnan(v)) << "scale 0xFF must decode to NaN";
        } else {
          // Rounded to float: 6 * 2^127 and the like overflow to Inf, as float must.
          EXPECT_EQ(v, float(e2m1_by_definition(c) * std::pow(2.0, s - 127))) << "scale " << s << " code " << c;
        }
      }
    }
  }
}

TEST(Mxfp4, LowNibbleIsTheEvenElement) {
  const uint8_t codes[16] = {0x72};  // element 0 -> code 2 (1.0), element 1 -> code 7 (6.0)
  const uint8_t scale = kE8M0Neutral;
  float out[32];
  mxfp4_dequantize_row(codes, &scale, 32, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 6.0f);
  EXPECT_EQ(out[2], 0.0f);
}

TEST(E8M0, ValuesAndNaN) {
  for (int s = 0; s < 255; ++s) EXPECT_EQ(double(e8m0_to_float(uint8_t(s))), std::pow(2.0, s - 127)) << s;
  EXPECT_TRUE(std::isnan(e8m0_to_float(0xFF)));
  EXPECT_EQ(e8m0_to_float(kE8M0Neutral), 1.0f);
}

TEST(E2M1, RoundToNearestEvenAndSaturate) {
  struct Case { float in; uint8_t code; };
  const Case cases[] = {
      {0.0f, 0}, {0.25f, 0}, {0.2501f, 1}, {0.75f, 2}, {0.7499f, 1}, {1.25f, 2}, {1.2501f, 3},
      {1.75f, 4}, {2.5f, 4}, {2.5001f, 5}, {3.5f, 6}, {5.0f, 6}, {5.0001f, 7}, {6.0f, 7},
      {100.0f, 7}, {std::numeric_limits<float>::infinity(), 7}, {-0.75f, 0xA}, {-7.0f, 0xF},
      {-0.0f, 0x8}, {-0.1f, 0x8}};
  for (const Case& c : cases) EXPECT_EQ(float_to_e2m1(c.in), c.code) << "input " << c.in;
  for (int c = 0; c < 16; ++c) EXPECT_EQ(float_to_e2m1(float(e2m1_by_definition(c))), c) << "grid value of code " << c;
}

TEST(E4M3, AllCodesDecodeAndReEncode) {
  for (int c = 0; c < 256; ++c) {
    const double want = e4m3_by_definition(c);
    const float got = e4m3_to_float(uint8_t(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << c;
      continue;
    }
    EXPECT_EQ(double(got), want) << "code " << c;
    EXPECT_EQ(float_to_e4m3(got), c) << "re-encode code " << c;
  }
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
}

TEST(E4M3, SaturatesRoundsEvenAndKeepsNaN) {
  EXPECT_EQ(float_to_e4m3(448.0f), 0x7E);
  EXPECT_EQ(float_to_e4m3(1e6f), 0x7E);
  EXPECT_EQ(float_to_e4m3(-1e6f), 0xFE);
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7F);
  // 1 + 1/16 is halfway between 1 (mantissa 0) and 1.125 (mantissa 1): even wins.
  EXPECT_EQ(float_to_e4m3(1.0625f), 0x38);
  EXPECT_EQ(float_to_e4m3(1.1875f), 0x3A);  // between 1.125 and 1.25: even mantissa 2
  // Subnormal quantum 2^-9; half of it rounds to even (0).
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -10)), 0x00);
  EXPECT_EQ(float_to_e4m3(std::ldexp(3.0f, -10)), 0x02);
}

TEST(Bf16, EveryBf16RoundTripsAndRoundingIsToNearestEven) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = bf16_to_float(uint16_t(b));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(f))));
      continue;
    }
    EXPECT_EQ(float_to_bf16(f), b);
  }
  // bf16 keeps 7 mantissa bits: near 1 the step is 2^-7, half a step is 2^-8.
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);  // tie -> even
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8))), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20))),
            1.0f + std::ldexp(1.0f, -7));
  EXPECT_TRUE(std::isinf(bf16_to_float(float_to_bf16(std::numeric_limits<float>::infinity()))));
}

// ---- block quantization ------------------------------------------------------

std::vector<float> block_with_amax(float amax, uint64_t seed) {
  auto v = testing::random_floats(32, seed, amax / 4);
  for (auto& x : v) x = std::clamp(x, -amax * 0.99f, amax * 0.99f);
  v[7] = -amax;
  return v;
}

TEST(Mxfp4Quantize, OcpSharedExponentAtPowersOfTwo) {
  for (int k = -20; k <= 20; ++k) {
    const float amax = std::ldexp(1.0f, k);
    const auto x = block_with_amax(amax, uint64_t(k + 100));
    uint8_t codes[16], scale;
    ASSERT_TRUE(mxfp4_quantize_row(x.data(), 32, codes, &scale, MxScaleRule::kOcp));
    EXPECT_EQ(int(scale), k - 2 + 127) << "amax 2^" << k << ": shared exponent floor(log2 amax) - 2";
    EXPECT_EQ(e2m1_code_at(codes, 7), 0xE) << "amax maps to -4 exactly";
    ASSERT_TRUE(mxfp4_quantize_row(x.data(), 32, codes, &scale, MxScaleRule::kTriton));
    EXPECT_EQ(int(scale), k - 2 + 127) << "2^ceil(log2(2^k / 6)) = 2^(k-2)";
  }
}

TEST(Mxfp4Quantize, OcpClipsWhereTritonRuleDoesNot) {
  auto x = block_with_amax(7.0f, 5);
  uint8_t codes[16], scale;
  ASSERT_TRUE(mxfp4_quantize_row(x.data(), 32, codes, &scale, MxScaleRule::kOcp));
  EXPECT_EQ(scale, 127);
  EXPECT_EQ(e2m1_code_at(codes, 7), 0xF) << "-7 saturates to -6";
  ASSERT_TRUE(mxfp4_quantize_row(x.data(), 32, codes, &scale, MxScaleRule::kTriton));
  EXPECT_EQ(scale, 128);
  EXPECT_EQ(e2m1_code_at(codes, 7), 0xE) << "-7 / 2 = -3.5 rounds to even -4";
}

TEST(Mxfp4Quantize, AllZeroBlockNegativeZeroAndNonFinite) {
  float x[32] = {};
  x[3] = -0.0f;
  uint8_t codes[16], scale;
  ASSERT_TRUE(mxfp4_quantize_row(x, 32, codes, &scale));
  EXPECT_EQ(scale, kE8M0Neutral) << "all-zero block gets the neutral scale";
  for (int i = 0; i < 32; ++i) EXPECT_EQ(e2m1_code_at(codes, i), i == 3 ? 0x8 : 0x0);
  x[5] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(mxfp4_quantize_row(x, 32, codes, &scale)) << "NaN input is rejected";
  x[5] = -std::numeric_limits<float>::infinity();
  EXPECT_FALSE(mxfp4_quantize_row(x, 32, codes, &scale)) << "Inf input is rejected";
  EXPECT_FALSE(mxfp4_quantize_row(x, 31, codes, &scale)) << "k must be a multiple of 32";
}

TEST(Mxfp4Quantize, RoundTripIsIdempotentAndBounded) {
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 200; ++trial) {
    const uint64_t seed = rng();
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    const auto x = testing::random_floats(256, seed, std::ldexp(1.0f, int(seed % 20) - 10));
    for (MxScaleRule rule : {MxScaleRule::kOcp, MxScaleRule::kTriton}) {
      uint8_t codes[128], scales[8], codes2[128], scales2[8];
      float q[256], q2[256];
      ASSERT_TRUE(mxfp4_quantize_row(x.data(), 256, codes, scales, rule));
      mxfp4_dequantize_row(codes, scales, 256, q);
      for (int i = 0; i < 256; ++i) {
        const float step = e8m0_to_float(scales[i / 32]);  // largest E2M1 gap is 2 steps (4 -> 6)
        const float clip = rule == MxScaleRule::kOcp ? std::max(0.0f, std::fabs(x[i]) - 6 * step) : 0.0f;
        EXPECT_LE(std::fabs(q[i] - x[i]), step + clip) << "element " << i;
      }
      ASSERT_TRUE(mxfp4_quantize_row(q, 256, codes2, scales2, rule));
      mxfp4_dequantize_row(codes2, scales2, 256, q2);
      for (int i = 0; i < 256; ++i) EXPECT_EQ(q2[i], q[i]) << "re-quantizing representable values changes them";
    }
  }
}

TEST(Mxfp8Quantize, RoundTripAndScale) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 100; ++trial) {
    const uint64_t seed = rng();
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    const auto x = testing::random_floats(64, seed, std::ldexp(1.0f, int(seed % 16) - 8));
    uint8_t codes[64], scales[2];
    float q[64];
    ASSERT_TRUE(mxfp8_quantize_row(x.data(), 64, codes, scales, MxScaleRule::kTriton));
    mxfp8_dequantize_row(codes, scales, 64, q);
    for (int i = 0; i < 64; ++i)  // E4M3 keeps 3 mantissa bits: relative error <= 2^-4 above the subnormals
      EXPECT_LE(std::fabs(q[i] - x[i]), std::fabs(x[i]) / 16 + std::ldexp(e8m0_to_float(scales[i / 32]), -10));
  }
  float x[32];
  for (int i = 0; i < 32; ++i) x[i] = float(i) - 16.0f;
  x[0] = 448.0f;  // amax = 448 = 1.75 * 2^8: OCP shared exponent floor(log2 448) - 8 = 0
  uint8_t codes[32], scale;
  ASSERT_TRUE(mxfp8_quantize_row(x, 32, codes, &scale, MxScaleRule::kOcp));
  EXPECT_EQ(scale, 127);
  EXPECT_EQ(codes[0], 0x7E);
}

}  // namespace
}  // namespace mxmoe
