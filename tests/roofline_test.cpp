// The bench's floors (tools/mxmoe/roofline.h): the floor of bytes and
// FLOPs, and the time the board's power limit allows for both, at a device's
// ceilings (tools/mxmoe/device_ceilings.h).
#include <gtest/gtest.h>

#include "model_presets.h"
#include "mxmoe/moe.h"
#include "roofline.h"

namespace mxmoe::cli {
namespace {

const DeviceCeilings kH200 = known_ceilings(kH200Ceilings, "NVIDIA H200", "");

// An H100 SXM as it might measure: HBM3 read at 3.0 TB/s, a bf16 GEMM at 650
// TFLOP/s, the same 700 W limit, a lower idle draw.
DeviceCeilings h100_like() {
  DeviceCeilings c = kH200;
  c.device = "NVIDIA H100 80GB HBM3";
  c.copy_bytes_per_s = 3.0e12;
  c.bf16_flops_per_s = 650e12;
  c.idle_w = 75;
  return c;
}

TEST(Roofline, GptOssExpertBytesAndDecodeFloor) {
  // 2880 x 5760 + 2880 x 2880 E2M1 codes, a scale byte per 32, bf16 biases.
  EXPECT_DOUBLE_EQ(expert_bytes(kGptOss20b), 2880.0 * 8640 / 2 + 2880.0 * 8640 / 32 + 2 * 8640);
  const Floor f = moe_floor(kGptOss20b, 1, 4, kH200);
  EXPECT_TRUE(f.memory_bound);
  EXPECT_NEAR(f.us, 4 * expert_bytes(kGptOss20b) / 4.14e12 * 1e6, 1e-9);
  EXPECT_NEAR(f.us, 12.8, 0.1);
}

TEST(Roofline, TheFloorFollowsTheDevicesCopyRate) {
  // The same 53 MB at an H100's HBM3 rate: 17.6 us, not the H200's 12.8.
  const Floor f = moe_floor(kGptOss20b, 1, 4, h100_like());
  EXPECT_NEAR(f.bytes, 52.9e6, 0.1e6);
  EXPECT_NEAR(f.us, f.bytes / 3.0e12 * 1e6, 1e-9);
  EXPECT_NEAR(f.us, 17.6, 0.1);
  EXPECT_TRUE(f.memory_bound);
  // Many tokens: the FLOPs at its GEMM rate.
  const Floor prefill = moe_floor(kGptOss120b, 16384, 128, h100_like());
  EXPECT_FALSE(prefill.memory_bound);
  EXPECT_NEAR(prefill.us, prefill.flops / 650e12 * 1e6, 1e-9);
}

TEST(Roofline, PowerCappedTimeIsBothEnergiesOverTheHeadroom) {
  const Floor f = moe_floor(kGptOss120b, 1024, 128, kH200);
  const double joules = f.bytes * kH200Ceilings.joules_per_byte_read + f.flops * kH200Ceilings.joules_per_bf16_flop;
  EXPECT_NEAR(f.capped_us, joules / (700 - 120.2) * 1e6, 1e-9);
  // 1.7 GB and 204 GFLOP: each alone fits the limit, together they take
  // longer than either rate allows.
  EXPECT_GT(f.capped_us, 1.5 * f.us);
  // One token's 53 MB: the rates bound it, not the power.
  const Floor decode = moe_floor(kGptOss120b, 1, 4, kH200);
  EXPECT_LT(decode.capped_us, decode.us);
  // More FLOPs or bytes never take less time.
  EXPECT_GT(moe_floor(kGptOss120b, 2048, 128, kH200).capped_us, f.capped_us);
  EXPECT_GT(moe_floor(kGptOss120b, 1024, 64, kH200).capped_us, moe_floor(kGptOss120b, 1024, 32, kH200).capped_us);
  // The headroom is the board's: a lower idle draw leaves more of the limit.
  const Floor h100 = moe_floor(kGptOss120b, 1024, 128, h100_like());
  EXPECT_NEAR(h100.capped_us, joules / (700 - 75) * 1e6, 1e-9);
}

TEST(Roofline, NoEnergiesNoCappedTime) {
  DeviceCeilings c = h100_like();
  c.joules_per_byte_read = c.joules_per_bf16_flop = 0;
  const Floor f = moe_floor(kGptOss120b, 1024, 128, c);
  EXPECT_EQ(f.capped_us, 0);
  EXPECT_NEAR(f.us, moe_floor(kGptOss120b, 1024, 128, h100_like()).us, 1e-9);
  // A limit at or under the idle draw leaves no headroom to divide by.
  c = h100_like();
  c.power_limit_w = c.idle_w;
  EXPECT_EQ(moe_floor(kGptOss120b, 1, 4, c).capped_us, 0);
}

TEST(Roofline, TheHeaderLineNamesEachFiguresSource) {
  DeviceCeilings c = h100_like();
  c.copy_source = "measured";
  c.idle_source = "NVML";
  EXPECT_EQ(describe(c),
            "ceilings of NVIDIA H100 80GB HBM3: copy 3.00 TB/s [measured], bf16 GEMM 650 TFLOP/s [known entry: "
            "H200], power limit 700 W [known entry: H200] / idle 75.0 W [NVML], energy 129.1 pJ/byte, 0.863 "
            "pJ/FLOP [known entry: H200]");
  c.joules_per_byte_read = 0;
  c.energy_source = "none";
  c.cache_file = "/c/ceilings-GPU-1.json";
  c.cached_on = "2026-12-07";
  EXPECT_NE(describe(c).find("no energies, no capped_us [none]; measured 2026-12-07, kept in /c/ceilings-GPU-1.json"),
            std::string::npos);
  EXPECT_EQ(known_source(kH200Ceilings, "no NVML"), "known entry: H200 (no NVML)");
}

TEST(Roofline, TensorParallelShardsAreWholeMxBlocks) {
  EXPECT_EQ(tp_shard_intermediate(2880, 1), 2880);
  EXPECT_EQ(tp_shard_intermediate(2880, 2), 1440);
  EXPECT_EQ(tp_shard_intermediate(2880, 4), 736);  // 720 is 22.5 blocks
  EXPECT_EQ(tp_shard_intermediate(2880, 8), 384);  // 360 is 11.25 blocks
  EXPECT_EQ(tp_shard_intermediate(100, 3), 64);    // 34 rounds up to two blocks
  // A shard's decode floor is its 4 experts' bytes: 1.7 us at TP 8.
  MoeShape tp8 = kGptOss120b;
  tp8.intermediate = tp_shard_intermediate(2880, 8);
  EXPECT_NEAR(moe_floor(tp8, 1, 4, kH200).us, 1.71, 0.01);
}

}  // namespace
}  // namespace mxmoe::cli
