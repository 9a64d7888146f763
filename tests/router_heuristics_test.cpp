// The fused router's launch policy: the split of its warps and the cluster
// that takes a 16-token block at few tokens.
#include <gtest/gtest.h>

#include "cuda/common/router_heuristics.h"

namespace mxmoe::smxx {
namespace {

TEST(RouterHeuristics, SplitKeepsAtMostEightTilesAWarp) {
  EXPECT_EQ(router_split_n(8), 1);
  EXPECT_EQ(router_split_n(32), 1);   // gpt-oss-20b: 4 n-tiles
  EXPECT_EQ(router_split_n(64), 1);   // 8
  EXPECT_EQ(router_split_n(65), 2);   // 9
  EXPECT_EQ(router_split_n(128), 2);  // gpt-oss-120b: 16
  EXPECT_EQ(router_split_n(129), 4);  // 17
  EXPECT_EQ(router_split_n(256), 4);  // 32
}

TEST(RouterHeuristics, ClusterCoversEveryTileSlotAtFewTokens) {
  // At least as many blocks as the tile slots a warp fills (n-tiles / split),
  // a power of two: the kernel gives each block one slot.
  EXPECT_EQ(router_cluster_size(32, 1, 132), 4);   // 4 slots
  EXPECT_EQ(router_cluster_size(128, 1, 132), 8);  // 16 n-tiles / 2
  EXPECT_EQ(router_cluster_size(24, 1, 132), 4);   // 3 slots
  EXPECT_EQ(router_cluster_size(16, 1, 132), 2);
  EXPECT_EQ(router_cluster_size(8, 1, 132), 1);    // one n-tile: no cluster
  EXPECT_EQ(router_cluster_size(72, 1, 132), 8);   // 9 n-tiles / 2 = 5 slots
  EXPECT_EQ(router_cluster_size(256, 1, 132), 8);  // 32 / 4
  for (int64_t E = 1; E <= 256; ++E) {
    const int64_t slots = ((E + 7) / 8 + router_split_n(E) - 1) / router_split_n(E);
    const int c = router_cluster_size(E, 1, 132);
    EXPECT_TRUE(c == 1 || c == 2 || c == 4 || c == 8) << "E = " << E;
    EXPECT_TRUE(c >= slots || slots == 1) << "E = " << E;
  }
}

TEST(RouterHeuristics, NoClusterOnceTheBlocksFillTheChip) {
  EXPECT_EQ(router_cluster_size(32, 66, 132), 4);   // 264 blocks: two an SM
  EXPECT_EQ(router_cluster_size(32, 67, 132), 1);
  EXPECT_EQ(router_cluster_size(128, 33, 132), 8);
  EXPECT_EQ(router_cluster_size(128, 34, 132), 1);
}

TEST(RouterHeuristics, Describes) {
  EXPECT_EQ(describe_router(32, 132), "clusters of 4 blocks a 16-token block up to T = 1056, then one block a "
                                      "16-token block");
  EXPECT_EQ(describe_router(128, 132), "clusters of 8 blocks a 16-token block up to T = 528, then one block a "
                                       "16-token block");
  EXPECT_EQ(describe_router(8, 132), "one block a 16-token block");
}

}  // namespace
}  // namespace mxmoe::smxx
