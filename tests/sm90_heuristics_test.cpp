// The sm90 backend's policy: path, token tile and pipeline depth as pure
// functions of the problem, including the shared-memory budget they imply.
#include <string>

#include <gtest/gtest.h>

#include "cuda/sm90/heuristics.h"

namespace mxmoe::sm90 {
namespace {

TEST(Sm90Heuristics, DecodeGoesToThePortableKernels) {
  // Up to 64 (token, slot) pairs whatever the experts; up to 128 (T = 32 at
  // top-4) while each expert has at most 8 rows.
  EXPECT_EQ(choose_config(1, 4, 32, 2944, 2944).path, Path::kPortableDecode);
  EXPECT_EQ(choose_config(32, 4, 32, 2944, 2944).path, Path::kPortableDecode);
  EXPECT_EQ(choose_config(33, 4, 32, 2944, 2944).path, Path::kWgmma);
  EXPECT_EQ(choose_config(32, 4, 128, 2944, 2944).path, Path::kPortableDecode);
  EXPECT_EQ(choose_config(33, 4, 128, 2944, 2944).path, Path::kWgmma);
  EXPECT_EQ(choose_config(64, 4, 32, 2944, 2944).path, Path::kWgmma);
  EXPECT_EQ(choose_config(64, 1, 8, 2944, 2944).path, Path::kPortableDecode);   // 8 rows an expert
  EXPECT_EQ(choose_config(65, 1, 8, 2944, 2944).path, Path::kWgmma);            // 9
  EXPECT_EQ(choose_config(128, 1, 16, 2944, 2944).path, Path::kPortableDecode);  // 8
  EXPECT_EQ(choose_config(72, 1, 8, 2944, 2944).path, Path::kWgmma);            // 72 pairs, 9 rows
  EXPECT_EQ(choose_config(64, 1, 2, 2944, 2944).path, Path::kPortableDecode);   // 64 pairs, 32 rows
  EXPECT_EQ(choose_config(33, 4, 128, 2944, 2944).token_tile, 16);
  EXPECT_EQ(mean_rows_per_expert(3, 1, 8), 1);
  EXPECT_EQ(mean_rows_per_expert(65, 4, 32), 9);
  const Overrides chain{0, 0, portable::Overrides{0, 0, portable::kFusedDecodeOff}};
  const Config one_launch =
      choose_config(6, 4, 32, 2944, 2944, {0, 0, portable::Overrides{0, 0, portable::kFusedDecodeOn}});
  EXPECT_EQ(one_launch.path, Path::kPortableDecode);
  EXPECT_TRUE(one_launch.fused);
  EXPECT_EQ(one_launch.decode.fused_decode, portable::kFusedDecodeOn);
  EXPECT_EQ(describe(one_launch),
            std::string("portable decode kernel (mma.sync GEMV) in ") + portable::kFusedDecodeDescription);
  EXPECT_FALSE(choose_config(6, 4, 32, 2944, 2944).fused);  // not taken unless forced
  EXPECT_FALSE(choose_config(1, 4, 32, 2944, 2944, {2, 0}).fused);  // wgmma forced
  const Config decode = choose_config(6, 4, 32, 2944, 2944, chain);
  EXPECT_EQ(decode.token_tile, 0);
  EXPECT_EQ(decode.stages_gemm1, 0);
  EXPECT_TRUE(decode.per_pair);
  EXPECT_TRUE(decode.tile_waits);
  EXPECT_EQ(describe(decode), std::string("portable decode kernels (mma.sync GEMV), ") +
                                  portable::kPerPairDescription + portable::kTileWaitDescription);
  EXPECT_FALSE(choose_config(24, 1, 2, 2944, 2944, chain).per_pair);  // 12 rows per expert: 32-token tiles
  EXPECT_EQ(describe(choose_config(24, 1, 2, 2944, 2944, chain)),
            "portable decode kernels (mma.sync GEMV) on expert-grouped tiles");
  const Config single = choose_config(1, 4, 32, 2944, 2944, chain);
  EXPECT_TRUE(single.per_pair);
  EXPECT_FALSE(single.tile_waits);
  EXPECT_EQ(describe(single),
            std::string("portable decode kernels (mma.sync GEMV), ") + portable::kPerPairDescription);
  EXPECT_FALSE(choose_config(1, 4, 32, 2944, 2944, {2, 0}).per_pair);  // wgmma forced
}

TEST(Sm90Heuristics, TokenTileFollowsRowsPerExpert) {
  EXPECT_EQ(token_tile(64, 4, 32), 16);      // 8 rows per expert
  EXPECT_EQ(token_tile(88, 4, 32), 16);      // 11
  EXPECT_EQ(token_tile(89, 4, 32), 32);      // 12
  EXPECT_EQ(token_tile(216, 4, 32), 32);     // 27
  EXPECT_EQ(token_tile(224, 4, 32), 48);     // 28
  EXPECT_EQ(token_tile(320, 4, 32), 48);     // 40
  EXPECT_EQ(token_tile(344, 4, 32), 48);     // 43
  EXPECT_EQ(token_tile(352, 4, 32), 64);     // 44
  EXPECT_EQ(token_tile(488, 4, 32), 64);     // 61
  EXPECT_EQ(token_tile(496, 4, 32), 96);     // 62
  EXPECT_EQ(token_tile(696, 4, 32), 96);     // 87
  EXPECT_EQ(token_tile(704, 4, 32), 128);    // 88
  EXPECT_EQ(token_tile(920, 4, 32), 128);    // 115
  EXPECT_EQ(token_tile(928, 4, 32), 144);    // 116
  EXPECT_EQ(token_tile(4096, 4, 128), 144);  // 128
  EXPECT_EQ(token_tile(1048, 4, 32), 144);   // 131
  EXPECT_EQ(token_tile(1056, 4, 32), 160);   // 132
  EXPECT_EQ(token_tile(1400, 4, 32), 160);   // 175
  EXPECT_EQ(token_tile(1408, 4, 32), 128);   // 176
  EXPECT_EQ(token_tile(3064, 4, 32), 128);   // 383
  EXPECT_EQ(token_tile(3072, 4, 32), 192);   // 384
  EXPECT_EQ(token_tile(16384, 4, 32), 192);
  EXPECT_EQ(token_tile(16384, 4, 32, 64), 64);  // override
  EXPECT_EQ(token_tile(1, 4, 32, 128), 128);
  EXPECT_EQ(token_tile(16384, 4, 32, 80), 192);  // not a tile the kernel has: ignored
}

TEST(Sm90Heuristics, StagesFillSharedMemory) {
  // gpt-oss K = 2944: a stage is 8 KB of codes + 256 bytes per token; two
  // 11.5 KB scale buffers; 227 KB in all for one block per SM, 113 KB each
  // for two.
  EXPECT_EQ(pipeline_stages(192, 2944), 3);
  EXPECT_EQ(pipeline_stages(160, 2944), 4);
  EXPECT_EQ(pipeline_stages(128, 2944), 5);
  EXPECT_EQ(pipeline_stages(96, 2944), 6);
  EXPECT_EQ(blocks_per_sm(96), 1);
  EXPECT_EQ(blocks_per_sm(64), 2);
  EXPECT_EQ(pipeline_stages(64, 2944), 3);
  EXPECT_EQ(pipeline_stages(48, 2944), 4);
  EXPECT_EQ(pipeline_stages(32, 2944), 5);
  EXPECT_EQ(pipeline_stages(16, 2944), 7);
  EXPECT_EQ(pipeline_stages(128, 256), 5);
  // gpt-oss as the sm90 plan pads it (K = 2880: 22 chunks and a 64-wide
  // tail): a stage is still sized for a full chunk and the scale buffers are
  // 256 bytes smaller, so every tile keeps the ring it had at 2944.
  for (int bn : kTokenTiles) EXPECT_EQ(pipeline_stages(bn, 2880), pipeline_stages(bn, 2944)) << bn;
  for (int bn : kTokenTiles) {
    EXPECT_LE(blocks_per_sm(bn) * (max_dynamic_smem(bn) + 1024), 233472) << bn;  // the SM's 228 KB
    for (int64_t kp : {128, 256, 768, 2944, 3072, 7936, 8192}) {
      const int s = pipeline_stages(bn, kp);
      if (bn == 64 && kp == 8192) {
        // Half an SM holds two 64-token stages and the two scale buffers up
        // to K = 7936: wider K takes the portable kernels at these tiles.
        EXPECT_EQ(s, 0);
        continue;
      }
      ASSERT_GE(s, 2) << bn << " " << kp;
      EXPECT_LE(smem_layout(bn, int(kp), s, false).bytes, max_dynamic_smem(bn));
      if (s < kMaxStages) EXPECT_GT(smem_layout(bn, int(kp), s + 1, false).bytes, max_dynamic_smem(bn));
    }
  }
  // Not even two stages: K so large that the scale buffers alone take the space.
  EXPECT_EQ(pipeline_stages(128, 1 << 15), 0);
  EXPECT_EQ(choose_config(16384, 4, 32, 1 << 15, 2944).path, Path::kPortableDecode);
  EXPECT_EQ(choose_config(384, 4, 32, 8192, 2944).path, Path::kPortableDecode);  // 64-token tiles, K = 8192
}

TEST(Sm90Heuristics, OverridesAndDescription) {
  const Config forced = choose_config(1, 4, 32, 2944, 2944, {2, 0});
  EXPECT_EQ(forced.path, Path::kWgmma);
  EXPECT_EQ(forced.token_tile, 16);  // 1 row per expert
  EXPECT_EQ(choose_config(16384, 4, 32, 2944, 2944, {1, 0}).path, Path::kPortableDecode);
  const Config c = choose_config(16384, 4, 32, 2944, 2944);
  EXPECT_EQ(c.path, Path::kWgmma);
  EXPECT_EQ(c.token_tile, 192);
  EXPECT_EQ(c.stages_gemm1, 3);
  EXPECT_EQ(c.stages_gemm2, 3);
  EXPECT_EQ(describe(c),
            "wgmma: 192-token tiles, 3 / 3 stages (GEMM1 / GEMM2), 1 block per SM, GEMM1 output staged for one "
            "bulk store per item");
  EXPECT_EQ(describe(choose_config(256, 4, 32, 2944, 2944)),
            "wgmma: 48-token tiles, 4 / 4 stages (GEMM1 / GEMM2), 2 blocks per SM, wgmma N per item up to its "
            "last token column, GEMM1 output staged for one bulk store per item, weight codes read evict-first "
            "from L2");
  // GEMM1's output half is staged where it costs no stage (144-token tiles:
  // 18 KB of 26 KB free) or leaves 4 (128: 5 stages become 4), not where it
  // would leave 3 of 4 (160).
  const Config c128 = choose_config(1024, 4, 32, 2880, 2880, {2, 128});
  EXPECT_TRUE(c128.staged_output);
  EXPECT_EQ(c128.stages_gemm1, 4);
  EXPECT_EQ(c128.stages_gemm2, 5);
  const Config c160 = choose_config(1024, 4, 32, 2880, 2880, {2, 160});
  EXPECT_FALSE(c160.staged_output);
  EXPECT_EQ(c160.stages_gemm1, 4);
  EXPECT_TRUE(stages_output(3, 3));
  EXPECT_TRUE(stages_output(6, 5));
  EXPECT_FALSE(stages_output(4, 3));
  EXPECT_FALSE(stages_output(2, 0));
  const Config c144 = choose_config(1024, 4, 32, 2880, 2880);
  EXPECT_EQ(c144.token_tile, 144);
  EXPECT_TRUE(c144.staged_output);
  EXPECT_EQ(c144.stages_gemm1, pipeline_stages(144, 2880, true));
}

TEST(Sm90Heuristics, CodesStreamWhereAnExpertFitsOneTile) {
  EXPECT_TRUE(streams_codes(256, 4, 32, 48));      // gpt-oss-20b T = 256: 32 rows an expert
  EXPECT_TRUE(streams_codes(1024, 4, 128, 48));    // gpt-oss-120b T = 1024
  EXPECT_TRUE(streams_codes(1152, 4, 32, 144));    // 144 rows on 144-token tiles
  EXPECT_FALSE(streams_codes(1160, 4, 32, 144));   // 145
  EXPECT_FALSE(streams_codes(4096, 4, 32, 192));   // 512 rows: about three tiles an expert
  EXPECT_TRUE(choose_config(1024, 4, 128, 2880, 2880).stream_codes);
  EXPECT_FALSE(choose_config(4096, 4, 32, 2880, 2880).stream_codes);
  EXPECT_FALSE(choose_config(1000, 4, 32, 2880, 2880, {2, 16}).stream_codes);  // 125 rows on 16-token tiles
  EXPECT_FALSE(choose_config(1, 4, 32, 2880, 2880).stream_codes);              // decode path
}

}  // namespace
}  // namespace mxmoe::sm90
