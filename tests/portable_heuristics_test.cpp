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

}  // namespace
}  // namespace mxmoe::portable
