// How the grouping of (token, slot) pairs by expert is split over blocks
// (smxx_moe_kernels.cu): small pure functions of the pair count.
#pragma once

#include <cstdint>
#include <string>

namespace mxmoe::smxx {

// Up to this many pairs one block groups them all (one launch). Past it the
// pairs are cut into ranges: one kernel counts each range per expert, a
// second places each range's pairs (a block a range in both). The one block
// walks its pairs in 32-pair steps per warp, twice, so its time grows with the
// pairs, while the two range kernels take about the same time whatever the
// count (H200, ncu at base clocks, us: one block 8.3-8.8 at 1024 pairs, 17.4-18.2
// at 4096, 39.2-39.7 at 16384, 140-141 at 65536; the two range kernels
// 5.5-6.1 + 11.8-12.0 at 4096, 4.8-5.8 + 10.2-11.4 at 16384 and at 65536).
// They tie at 4096 pairs, where the forward's A/B did not settle which is
// faster, so one block keeps those.
inline constexpr int64_t kOneBlockGroupPairs = 4096;
// Pairs a range takes at least, and the most ranges (the per-range counts
// are ranges x experts ints of workspace).
inline constexpr int64_t kGroupRangePairs = 1024;
inline constexpr int64_t kMaxGroupRanges = 512;

// Pairs of one range: all of them up to kOneBlockGroupPairs, else a multiple
// of kGroupRangePairs that keeps the ranges within kMaxGroupRanges.
inline int64_t group_range_pairs(int64_t pairs) {
  if (pairs <= kOneBlockGroupPairs) return pairs < 1 ? 1 : pairs;
  const int64_t per = (pairs + kMaxGroupRanges - 1) / kMaxGroupRanges;
  return (per + kGroupRangePairs - 1) / kGroupRangePairs * kGroupRangePairs;
}

// Ranges the pairs are cut into (1: the one-block kernel).
inline int64_t group_ranges(int64_t pairs) {
  const int64_t per = group_range_pairs(pairs);
  return pairs <= per ? 1 : (pairs + per - 1) / per;
}

// Workspace ints for the per-range counts (none for one block).
inline int64_t group_range_count_ints(int64_t pairs, int64_t experts) {
  const int64_t ranges = group_ranges(pairs);
  return ranges == 1 ? 0 : ranges * experts;
}

// One line for `mxmoe info`.
inline std::string describe_grouping() {
  return "one block up to " + std::to_string(kOneBlockGroupPairs) + " (token, slot) pairs, then ranges of " +
         std::to_string(kGroupRangePairs) + " or more pairs, counted and placed by a block each";
}

}  // namespace mxmoe::smxx
