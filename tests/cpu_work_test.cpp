// How the CPU forward's threads share a GEMM (src/cpu/cpu_work.h): every
// item of every expert with rows exactly once, in contiguous runs in expert
// order, of near-equal cost; at T = 1 each of 2 threads streams 2 experts.
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "cpu/cpu_work.h"

namespace mxmoe::cpu {
namespace {

std::vector<int32_t> offsets_of(const std::vector<int32_t>& rows) {
  std::vector<int32_t> off(rows.size() + 1, 0);
  for (size_t e = 0; e < rows.size(); ++e) off[e + 1] = off[e] + rows[e];
  return off;
}

// Runs every thread's share and checks coverage, order and balance.
void expect_fair_cover(const std::vector<int32_t>& rows, int64_t items, int n) {
  const std::vector<int32_t> off = offsets_of(rows);
  const int64_t E = int64_t(rows.size());
  std::vector<int> seen(size_t(E * items), 0);
  std::vector<int64_t> cost(size_t(n), 0);
  int64_t last = -1;  // flat index of the last item handed out, over all threads in order
  for (int t = 0; t < n; ++t)
    for_each_span(off.data(), E, items, t, n, [&](const Span& s) {
      ASSERT_GT(rows[size_t(s.expert)], 0) << "an expert without rows got items";
      ASSERT_LT(s.begin, s.end);
      ASSERT_GT(s.expert * items + s.begin, last) << "runs out of expert order";
      last = s.expert * items + s.end - 1;
      for (int64_t i = s.begin; i < s.end; ++i) ++seen[size_t(s.expert * items + i)];
      cost[size_t(t)] += (s.end - s.begin) * item_cost(rows[size_t(s.expert)]);
    });
  int64_t total = 0, most_item = 0;
  for (int64_t e = 0; e < E; ++e)
    for (int64_t i = 0; i < items; ++i) {
      ASSERT_EQ(seen[size_t(e * items + i)], rows[size_t(e)] > 0 ? 1 : 0) << "expert " << e << " item " << i;
      if (rows[size_t(e)] > 0) {
        total += item_cost(rows[size_t(e)]);
        most_item = std::max(most_item, item_cost(rows[size_t(e)]));
      }
    }
  // Each share is the equal share up to one item.
  for (int t = 0; t < n; ++t) EXPECT_LE(std::llabs(cost[size_t(t)] - total / n), most_item) << "thread " << t;
}

TEST(CpuWork, DecodeSplitsWholeExpertsBetweenTwoThreads) {
  std::vector<int32_t> rows(128, 0);
  for (int e : {3, 40, 77, 120}) rows[size_t(e)] = 1;  // T = 1, top-4
  const std::vector<int32_t> off = offsets_of(rows);
  for (int t = 0; t < 2; ++t) {
    std::vector<Span> spans;
    for_each_span(off.data(), 128, 90, t, 2, [&](const Span& s) { spans.push_back(s); });
    ASSERT_EQ(spans.size(), 2u) << "thread " << t;
    for (const Span& s : spans) EXPECT_EQ(s.end - s.begin, 90);  // whole experts: their costs are equal
    EXPECT_EQ(spans[0].expert, t == 0 ? 3 : 77);
  }
}

TEST(CpuWork, EveryItemOnceInOrderAndBalanced) {
  std::mt19937 rng(5);
  for (int n : {1, 2, 3, 8})
    for (int64_t items : {1, 5, 90, 180}) {
      SCOPED_TRACE(::testing::Message() << n << " threads, " << items << " items");
      expect_fair_cover({0, 0, 0}, items, n);  // no rows: nothing to do
      expect_fair_cover({7}, items, n);
      std::vector<int32_t> rows(32);
      for (auto& r : rows) r = rng() % 3 == 0 ? 0 : int32_t(rng() % 200);
      expect_fair_cover(rows, items, n);
      std::vector<int32_t> one(16, 0);
      one[9] = 2048;  // every pair on one expert
      expect_fair_cover(one, items, n);
    }
}

TEST(CpuWork, ShareCutsRowsEvenly) {
  EXPECT_EQ(share(10, 0, 3).begin, 0);
  EXPECT_EQ(share(10, 2, 3).end, 10);
  EXPECT_EQ(share(1, 0, 2).end - share(1, 0, 2).begin, 0);
  EXPECT_EQ(share(1, 1, 2).end - share(1, 1, 2).begin, 1);
}

}  // namespace
}  // namespace mxmoe::cpu
