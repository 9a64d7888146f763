// The portable backend's policy: the token tile as a pure function of the
// problem (mean rows per expert) and of the tuning override.
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

TEST(PortableHeuristics, PerPairDecodeWhileExpertsRarelyRepeat) {
  EXPECT_TRUE(per_pair_decode(1, 4, 32, 8));     // gpt-oss-20b T = 1
  EXPECT_TRUE(per_pair_decode(2, 4, 32, 8));     // 8 pairs: 56 <= 64
  EXPECT_FALSE(per_pair_decode(3, 4, 32, 8));    // 12 pairs: 132 > 64
  EXPECT_TRUE(per_pair_decode(4, 4, 128, 8));    // gpt-oss-120b: 240 <= 256
  EXPECT_FALSE(per_pair_decode(5, 4, 128, 8));   // 380 > 256
  EXPECT_FALSE(per_pair_decode(1, 8, 8, 8));     // 8 experts, top-8: 56 > 16
  EXPECT_FALSE(per_pair_decode(1, 4, 32, 32));   // only with 8-token tiles
}

TEST(PortableHeuristics, DescribesTheTiles) {
  EXPECT_EQ(describe_tiles(1, 4, 32), kPerPairDescription);
  EXPECT_EQ(describe_tiles(16, 4, 32), "8-token tiles of expert-grouped rows");
  EXPECT_EQ(describe_tiles(1024, 4, 32), "32-token tiles of expert-grouped rows");
  EXPECT_EQ(describe_tiles(16384, 4, 32), "64-token tiles of expert-grouped rows");
}

}  // namespace
}  // namespace mxmoe::portable
