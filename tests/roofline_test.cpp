// The bench's floors (tools/mxmoe/roofline.h): the floor of bytes and
// FLOPs, and the time the board's power limit allows for both.
#include <gtest/gtest.h>

#include "model_presets.h"
#include "mxmoe/moe.h"
#include "roofline.h"

namespace mxmoe::cli {
namespace {

TEST(Roofline, GptOssExpertBytesAndDecodeFloor) {
  // 2880 x 5760 + 2880 x 2880 E2M1 codes, a scale byte per 32, bf16 biases.
  EXPECT_DOUBLE_EQ(expert_bytes(kGptOss20b), 2880.0 * 8640 / 2 + 2880.0 * 8640 / 32 + 2 * 8640);
  const Floor f = moe_floor(kGptOss20b, 1, 4);
  EXPECT_TRUE(f.memory_bound);
  EXPECT_NEAR(f.us, 4 * expert_bytes(kGptOss20b) / 4.14e12 * 1e6, 1e-9);
  EXPECT_NEAR(f.us, 12.8, 0.1);
}

TEST(Roofline, PowerCappedTimeIsBothEnergiesOverTheHeadroom) {
  const Floor f = moe_floor(kGptOss120b, 1024, 128);
  const double joules = f.bytes * kJoulesPerByteRead + f.flops * kJoulesPerBf16Flop;
  EXPECT_NEAR(f.capped_us, joules / (kBoardLimitWatts - kIdleWatts) * 1e6, 1e-9);
  // 1.7 GB and 204 GFLOP: each alone fits the limit, together they take
  // longer than either rate allows.
  EXPECT_GT(f.capped_us, 1.5 * f.us);
  // One token's 53 MB: the rates bound it, not the power.
  const Floor decode = moe_floor(kGptOss120b, 1, 4);
  EXPECT_LT(decode.capped_us, decode.us);
  // More FLOPs or bytes never take less time.
  EXPECT_GT(moe_floor(kGptOss120b, 2048, 128).capped_us, f.capped_us);
  EXPECT_GT(moe_floor(kGptOss120b, 1024, 64).capped_us, moe_floor(kGptOss120b, 1024, 32).capped_us);
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
  EXPECT_NEAR(moe_floor(tp8, 1, 4).us, 1.71, 0.01);
}

}  // namespace
}  // namespace mxmoe::cli
