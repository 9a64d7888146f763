// The expert-grouping kernel (shared by the CUDA backends) against a host
// stable grouping, bit for bit: the tile schedule, every row of sorted_pair
// (padding rows -1), pair_row, and rows past the schedule left as they were.
// Pair counts from 1 to 65536 (gpt-oss T = 16384, k = 4) and past the most
// ranges, on the one-block kernel and the range kernels, token tiles 8 to 160,
// uniform ids, one hot expert, and most experts empty; and a caller's routing
// as given, whose ids outside [0, E) are grouped as expert 0 and whose
// weights come out checked (NaN for those pairs), on both kernels.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <array>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#ifdef MXMOE_WITH_CUDA
#include <cuda_runtime.h>

#include "cuda/common/smxx_moe_kernels.h"
#endif
#include "support/test_support.h"

#ifndef MXMOE_WITH_CUDA
TEST(GroupingGpu, NotBuilt) { GTEST_SKIP() << "GPU test skipped: this build has no CUDA"; }
#else
namespace mxmoe {
namespace {

constexpr int32_t kUntouched = 0x7E7E7E7E;  // the device buffers' fill byte 0x7E

enum class Ids { kUniform, kOneHot, kFew, kSomeOutOfRange };

struct Grouping {
  int32_t num_tiles = 0;
  std::vector<int32_t> sorted_pair, pair_row, tile_expert, tile_row;
};

// Pairs of one expert in pair order, each expert padded to a multiple of tile.
Grouping host_grouping(const std::vector<int32_t>& ids, int E, int tile, int64_t max_tiles) {
  Grouping g;
  g.sorted_pair.assign(size_t(max_tiles * tile), kUntouched);
  g.pair_row.assign(ids.size(), kUntouched);
  g.tile_expert.assign(size_t(max_tiles), kUntouched);
  g.tile_row.assign(size_t(max_tiles), kUntouched);
  int32_t row = 0;
  for (int e = 0; e < E; ++e) {
    const int32_t first = row;
    for (size_t p = 0; p < ids.size(); ++p)
      if (ids[p] == e) {
        g.sorted_pair[size_t(row)] = int32_t(p);
        g.pair_row[p] = row++;
      }
    while (row % tile != 0) g.sorted_pair[size_t(row++)] = -1;
    for (int32_t r = first; r < row; r += tile) {
      g.tile_expert[size_t(g.num_tiles)] = e;
      g.tile_row[size_t(g.num_tiles)] = r;
      ++g.num_tiles;
    }
  }
  return g;
}

std::vector<int32_t> make_ids(int64_t pairs, int E, Ids mode, uint64_t seed) {
  std::vector<int32_t> ids(static_cast<size_t>(pairs));
  uint64_t s = seed;
  for (auto& id : ids) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const int32_t r = int32_t((s >> 33) % uint64_t(E));
    switch (mode) {
      case Ids::kUniform: id = r; break;
      case Ids::kOneHot: id = (s >> 20) % 8 ? E - 1 : r; break;  // 7 in 8 on the last expert
      case Ids::kFew: id = r % 3 == 0 ? 0 : E - 1 - r % 2; break;   // experts 0, E-2, E-1
      case Ids::kSomeOutOfRange:  // 1 in 8 outside [0, E): -1, E, or far off
        id = (s >> 20) % 8 ? r : std::array<int32_t, 3>{-1, E, -2147483647 - 1}[(s >> 24) % 3];
        break;
    }
  }
  return ids;
}

template <typename T>
struct DeviceBuffer {
  T* p = nullptr;
  explicit DeviceBuffer(size_t n, int fill_byte) {
    EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemset(p, fill_byte, n * sizeof(T)), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(p); }
  std::vector<T> read(size_t n) const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

void check(int64_t pairs, int E, int tile, Ids mode, uint64_t seed) {
  SCOPED_TRACE("pairs " + std::to_string(pairs) + " experts " + std::to_string(E) + " tile " +
               std::to_string(tile) + " mode " + std::to_string(int(mode)) + " seed " + std::to_string(seed));
  const std::vector<int32_t> ids = make_ids(pairs, E, mode, seed);
  // launch_check_routing's rule: an id outside [0, E) is expert 0, weight NaN.
  std::vector<int32_t> checked_ids(ids.size());
  std::vector<float> weights(ids.size()), checked_weights(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const bool in_range = ids[i] >= 0 && ids[i] < E;
    checked_ids[i] = in_range ? ids[i] : 0;
    weights[i] = 0.25f + float(i % 97) / 97.f;
    checked_weights[i] = in_range ? weights[i] : std::nanf("");
  }
  // k = 1 and T = pairs: the bound only depends on their product.
  const int64_t max_tiles = smxx::max_token_tiles(pairs, 1, E, tile);
  const Grouping want = host_grouping(checked_ids, E, tile, max_tiles);
  ASSERT_LE(want.num_tiles, max_tiles);

  const int64_t range_ints = smxx::group_range_count_ints(pairs, E);
  DeviceBuffer<int32_t> range_counts(size_t(std::max<int64_t>(1, range_ints)), 0x7E);
  DeviceBuffer<int32_t> d_ids(ids.size(), 0), sorted(size_t(max_tiles * tile), 0x7E),
      pair_row(ids.size(), 0x7E), tile_expert(size_t(max_tiles), 0x7E), tile_row(size_t(max_tiles), 0x7E),
      num_tiles(1, 0x7E);
  DeviceBuffer<float> d_weights(ids.size(), 0), weights_out(ids.size(), 0x7E);
  ASSERT_EQ(cudaMemcpy(d_ids.p, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_weights.p, weights.data(), ids.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  const Status st = smxx::launch_group_by_expert(d_ids.p, d_weights.p, pairs, E, tile, weights_out.p,
                                                 range_ints > 0 ? range_counts.p : nullptr, sorted.p, pair_row.p,
                                                 tile_expert.p, tile_row.p, num_tiles.p, false, nullptr, "test");
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  EXPECT_EQ(num_tiles.read(1)[0], want.num_tiles);
  // Rows and tiles past the schedule are not written: they keep the fill.
  EXPECT_EQ(sorted.read(want.sorted_pair.size()), want.sorted_pair);
  EXPECT_EQ(pair_row.read(ids.size()), want.pair_row);
  EXPECT_EQ(tile_expert.read(size_t(max_tiles)), want.tile_expert);
  EXPECT_EQ(tile_row.read(size_t(max_tiles)), want.tile_row);
  // The checked weights, bit for bit (NaN where the id was out of range).
  const std::vector<float> got_weights = weights_out.read(ids.size());
  EXPECT_EQ(std::memcmp(got_weights.data(), checked_weights.data(), ids.size() * 4), 0);
}

class GroupingGpu : public ::testing::Test {
 protected:
  void SetUp() override { MXMOE_SKIP_WITHOUT_GPU(); }
};

TEST_F(GroupingGpu, FewPairs) {
  check(1, 32, 8, Ids::kUniform, 1);
  check(3, 8, 64, Ids::kUniform, 2);
  check(31, 128, 8, Ids::kUniform, 3);
  check(33, 128, 64, Ids::kOneHot, 4);
}

TEST_F(GroupingGpu, ManyPairs) {
  check(4 * 1024, 32, 64, Ids::kUniform, 10);
  check(4 * 1025 + 3, 128, 64, Ids::kUniform, 11);  // the last warp's range is partial
  check(4 * 16384, 32, 128, Ids::kUniform, 12);
  check(4 * 16384, 128, 64, Ids::kUniform, 13);
}

TEST_F(GroupingGpu, RangesAroundTheOneBlockBound) {
  ASSERT_EQ(smxx::group_ranges(smxx::kOneBlockGroupPairs), 1);
  ASSERT_GT(smxx::group_ranges(smxx::kOneBlockGroupPairs + 1), 1);
  check(smxx::kOneBlockGroupPairs, 128, 48, Ids::kUniform, 30);
  check(smxx::kOneBlockGroupPairs + 1, 128, 48, Ids::kUniform, 31);  // a last range of one pair
  check(3 * smxx::kGroupRangePairs * 2 + 17, 32, 160, Ids::kUniform, 32);
  check(smxx::kOneBlockGroupPairs + 500, 128, 16, Ids::kFew, 33);
  check(smxx::kOneBlockGroupPairs, 32, 16, Ids::kOneHot, 34);
}

TEST_F(GroupingGpu, MoreRangesThanTheBound) {
  // Ranges of 2048 pairs once 1024-pair ranges would pass kMaxGroupRanges.
  const int64_t pairs = smxx::kMaxGroupRanges * smxx::kGroupRangePairs + 4099;
  ASSERT_EQ(smxx::group_range_pairs(pairs), 2 * smxx::kGroupRangePairs);
  check(pairs, 32, 128, Ids::kUniform, 40);
  check(pairs, 256, 8, Ids::kOneHot, 41);
}

TEST_F(GroupingGpu, CallerIdsOutOfRange) {
  check(7, 32, 8, Ids::kSomeOutOfRange, 50);
  check(1000, 128, 16, Ids::kSomeOutOfRange, 51);
  check(smxx::kOneBlockGroupPairs + 777, 128, 64, Ids::kSomeOutOfRange, 52);  // the range kernels
}

TEST_F(GroupingGpu, SkewedExperts) {
  check(4 * 4096, 128, 128, Ids::kOneHot, 20);
  check(4 * 4096, 128, 64, Ids::kFew, 21);
  check(1000, 32, 8, Ids::kFew, 22);
}

}  // namespace
}  // namespace mxmoe
#endif
