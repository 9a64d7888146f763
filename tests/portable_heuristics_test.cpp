// The portable backend's policy: the token tile as a pure function of the
// problem (mean rows per expert) and of the tuning override, and the warps of
// a decode block as one of its grid and the SM count.
#include <gtest/gtest.h>

#include "cuda/portable/heuristics.h"

namespace mxmoe::portable {
namespace {

TEST(PortableHeuristics, TokenTileFollowsRowsPerExpert) {
  EXPECT_EQ(token_tile(1, 4, 32), 8);       // gpt-oss-20b decode
  EXPECT_EQ(token_tile(64, 4, 32), 8);      // 8 rows per expert
  EXPECT_EQ(token_tile(65, 4, 32), 32);     // 9
  EXPECT_EQ(token_tile(8192, 4, 32), 32);   // 1024
  EXPECT_EQ(token_tile(8200, 4, 32), 64);   // 1025
  EXPECT_EQ(token_tile(1, 4, 32, 64), 64);  // override
  EXPECT_EQ(token_tile(1, 4, 32, 16), 8);   // not a tile: ignored
}

TEST(PortableHeuristics, PerPairDecodeUpTo24Pairs) {
  EXPECT_TRUE(per_pair_decode(1, 4, 8));     // gpt-oss-20b/120b T = 1
  EXPECT_TRUE(per_pair_decode(6, 4, 8));     // 24 pairs
  EXPECT_FALSE(per_pair_decode(7, 4, 8));    // 28
  EXPECT_FALSE(per_pair_decode(8, 4, 8));    // 32: expert-grouped tiles win
  EXPECT_TRUE(per_pair_decode(3, 8, 8));     // top-8
  EXPECT_TRUE(per_pair_decode(24, 1, 8));
  EXPECT_FALSE(per_pair_decode(25, 1, 8));
  EXPECT_FALSE(per_pair_decode(1, 4, 32));   // only with 8-token tiles
}

TEST(PortableHeuristics, TileWaitsFromTwoTokensOfPerPairTiles) {
  EXPECT_FALSE(decode_tile_waits(1, true, false));  // one wave of GEMM1: the counts' reset costs more
  EXPECT_TRUE(decode_tile_waits(2, true, false));
  EXPECT_TRUE(decode_tile_waits(6, true, false));
  EXPECT_FALSE(decode_tile_waits(8, false, false));  // expert-grouped tiles
  EXPECT_FALSE(decode_tile_waits(2, true, true));    // GEMM2 with the combine waits for all of GEMM1
}

TEST(PortableHeuristics, DownCombineWhereWarpsHaveFewChunks) {
  // gpt-oss-120b's tensor-parallel shards (padded I 384, 768, 1472: 3, 6 and
  // 12 chunks) and the full layer (2880: 23 chunks), top-4 of 128 experts.
  EXPECT_EQ(down_combine_warps(1, 4, 128, 384), 16);  // one chunk a warp
  EXPECT_EQ(down_combine_warps(1, 4, 128, 768), 0);
  EXPECT_EQ(down_combine_warps(1, 4, 128, 2880), 0);
  EXPECT_EQ(down_combine_warps(2, 4, 128, 384), 8);   // two warps a slot: 2 chunks a warp
  EXPECT_EQ(down_combine_warps(16, 4, 128, 768), 8);  // 3
  EXPECT_EQ(down_combine_warps(17, 4, 128, 768), 0);  // more pairs than half the experts
  EXPECT_EQ(down_combine_warps(4, 4, 32, 384), 8);    // gpt-oss-20b: up to 16 pairs
  EXPECT_EQ(down_combine_warps(8, 4, 32, 384), 0);
  EXPECT_EQ(down_combine_warps(2, 4, 128, 1472), 0);  // 6
  EXPECT_EQ(down_combine_warps(6, 4, 128, 2880), 0);
  EXPECT_EQ(down_combine_warps(2, 8, 128, 384), 8);   // a warp a slot, 3 chunks each
  EXPECT_EQ(down_combine_warps(2, 1, 128, 2880), 8);  // eight warps on one slot's 23 chunks
  EXPECT_EQ(down_combine_warps(1, 4, 128, 2880, 8), 8);  // overrides
  EXPECT_EQ(down_combine_warps(1, 4, 128, 384, kDownCombineSplit), 0);
  EXPECT_EQ(down_combine_warps(2, 9, 128, 384), 0);  // more slots than the kernel holds
}

TEST(PortableHeuristics, DecodeBlockWarpsFollowTheGrid) {
  // gpt-oss at T = 1 on 132 SMs: GEMM1 4 tiles x 180 row blocks, GEMM2 4 x 90.
  EXPECT_EQ(decode_block_warps(4 * 180, 132), 4);
  EXPECT_EQ(decode_block_warps(4 * 90, 132), 8);
  EXPECT_EQ(decode_block_warps(528, 132), 4);  // 4 blocks per SM
  EXPECT_EQ(decode_block_warps(527, 132), 8);
  EXPECT_EQ(decode_block_warps(133, 132), 8);
  EXPECT_EQ(decode_block_warps(4 * 24, 132), 16);  // the TP 8 shard's GEMM1 at T = 1 (2I = 768)
  EXPECT_EQ(decode_block_warps(1, 132), 16);
}

TEST(PortableHeuristics, DecodeWarpsPerGemm) {
  // gpt-oss (2I = 5760 and H = 2880 rows) on 132 SMs: per-pair tiles at T = 1 and 2, grouped at 16.
  const DecodeWarps t1 = decode_warps(1, 4, 32, 5760, 2880, 132);
  EXPECT_EQ(t1.gemm1, 4);  // 4 x 180 blocks
  EXPECT_EQ(t1.gemm2, 8);  // 4 x 90
  EXPECT_EQ(decode_warps(2, 4, 32, 5760, 2880, 132).gemm2, 4);   // 8 x 90
  EXPECT_EQ(decode_warps(16, 4, 32, 5760, 2880, 132).gemm2, 4);  // 40 tiles x 90
  const DecodeWarps small = decode_warps(1, 2, 8, 384, 192, 132);  // H = I = 192
  EXPECT_EQ(small.gemm1, 16);  // 2 x 12 blocks
  EXPECT_EQ(small.gemm2, 16);
  EXPECT_EQ(describe_decode_warps(t1, 132), "blocks of 4 warps (GEMM1) and 8 (GEMM2) on 132 SMs");
}

TEST(PortableHeuristics, DescribesTheTiles) {
  const Overrides one_launch{0, 0, kFusedDecodeOn}, chain{0, 0, kFusedDecodeOff};
  EXPECT_EQ(describe_tiles(1, 4, 32, 2880, one_launch), kFusedDecodeDescription);
  EXPECT_EQ(describe_tiles(16, 4, 32, 2880, one_launch), kFusedDecodeDescription);
  EXPECT_EQ(describe_tiles(1, 4, 32, 2880), kPerPairDescription);
  EXPECT_EQ(describe_tiles(1, 4, 32, 2880, chain), kPerPairDescription);
  EXPECT_EQ(describe_tiles(2, 4, 32, 2880, chain), std::string(kPerPairDescription) + kTileWaitDescription);
  EXPECT_EQ(describe_tiles(6, 4, 32, 2880, chain), std::string(kPerPairDescription) + kTileWaitDescription);
  EXPECT_EQ(describe_tiles(1, 4, 128, 384, chain),
            std::string(kPerPairDescription) + ", GEMM2 and the combine in one kernel (16 warps a block)");
  EXPECT_EQ(describe_tiles(2, 4, 128, 384, chain),
            std::string(kPerPairDescription) + ", GEMM2 and the combine in one kernel (8 warps a block)");
  EXPECT_EQ(describe_tiles(16, 4, 128, 768, chain),
            "8-token tiles of expert-grouped rows, GEMM2 and the combine in one kernel (8 warps a block)");
  EXPECT_EQ(describe_tiles(8, 4, 32, 2880, chain), "8-token tiles of expert-grouped rows");
  EXPECT_EQ(describe_tiles(16, 4, 32, 2880, chain), "8-token tiles of expert-grouped rows");
  EXPECT_EQ(describe_tiles(1024, 4, 32, 2880), "32-token tiles of expert-grouped rows");
  EXPECT_EQ(describe_tiles(16384, 4, 32, 2880), "64-token tiles of expert-grouped rows");
}

// The one-launch decode: only where forced (it lost at every shape
// measured), up to the 128 pairs its schedule holds; its grid: the larger
// phase's items, at most the blocks the device holds at once.
TEST(PortableHeuristics, OneLaunchDecode) {
  EXPECT_FALSE(fused_decode(1, 4));
  EXPECT_FALSE(fused_decode(16, 4));
  EXPECT_FALSE(fused_decode(1, 4, kFusedDecodeOff));
  EXPECT_TRUE(fused_decode(1, 4, kFusedDecodeOn));
  EXPECT_TRUE(fused_decode(32, 4, kFusedDecodeOn));
  EXPECT_FALSE(fused_decode(33, 4, kFusedDecodeOn));  // 132 pairs: past the schedule
  EXPECT_FALSE(fused_decode(129, 1, kFusedDecodeOn));
  EXPECT_EQ(fused_decode_blocks(1, 4, 24, 90, 396), 360);    // TP8: GEMM2's 4 x 90 items
  EXPECT_EQ(fused_decode_blocks(1, 4, 180, 90, 396), 396);   // full I: 720 GEMM1 items
  EXPECT_EQ(fused_decode_blocks(16, 4, 180, 90, 396), 396);
  EXPECT_EQ(fused_decode_blocks(1, 1, 2, 1, 396), 2);
}

}  // namespace
}  // namespace mxmoe::portable
