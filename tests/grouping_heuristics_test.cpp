// How the grouping of pairs by expert is split over blocks: one block up to
// kOneBlockGroupPairs, then ranges that cover every pair, at most
// kMaxGroupRanges of them.
#include <gtest/gtest.h>

#include "cuda/common/grouping_heuristics.h"

namespace mxmoe::smxx {
namespace {

TEST(GroupingHeuristics, OneBlockUpToTheBound) {
  for (int64_t pairs : {int64_t(1), int64_t(4), int64_t(1024), kOneBlockGroupPairs}) {
    EXPECT_EQ(group_ranges(pairs), 1) << pairs;
    EXPECT_EQ(group_range_count_ints(pairs, 128), 0) << pairs;
  }
  const int64_t past = kOneBlockGroupPairs / kGroupRangePairs + 1;  // whole ranges and one pair
  EXPECT_EQ(group_ranges(kOneBlockGroupPairs + 1), past);
  EXPECT_EQ(group_range_count_ints(kOneBlockGroupPairs + 1, 128), past * 128);
  EXPECT_EQ(group_ranges(4 * 1024), 1);  // gpt-oss T = 1024: one block
  EXPECT_EQ(group_ranges(4 * 4096), 16);  // T = 4096: 1024-pair ranges
}

TEST(GroupingHeuristics, RangesCoverEveryPairWithinTheBound) {
  EXPECT_EQ(group_ranges(4 * 16384), 64);  // gpt-oss T = 16384: 1024-pair ranges
  EXPECT_EQ(group_range_pairs(4 * 16384), kGroupRangePairs);
  for (int64_t pairs = kOneBlockGroupPairs + 1; pairs < (int64_t(1) << 30); pairs = pairs * 3 / 2 + 7) {
    const int64_t per = group_range_pairs(pairs), ranges = group_ranges(pairs);
    EXPECT_EQ(per % kGroupRangePairs, 0) << pairs;
    EXPECT_LE(ranges, kMaxGroupRanges) << pairs;
    EXPECT_GE(ranges * per, pairs) << pairs;
    EXPECT_LT((ranges - 1) * per, pairs) << pairs;  // no empty range
  }
}

TEST(GroupingHeuristics, Describes) {
  EXPECT_EQ(describe_grouping(), "one block up to 4096 (token, slot) pairs, then ranges of 1024 or more pairs, "
                                 "counted and placed by a block each");
}

}  // namespace
}  // namespace mxmoe::smxx
