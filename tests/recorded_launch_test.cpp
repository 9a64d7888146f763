// Launches kept as data (src/cuda/common/recorded_launch.h), on the host: the
// arguments' bytes at their alignments, the shape that decides whether two
// launches can share a graph node, and a list that overflows saying so.
#include <gtest/gtest.h>

#ifndef MXMOE_WITH_CUDA
TEST(RecordedLaunch, NotBuilt) { GTEST_SKIP() << "skipped: this build has no CUDA"; }
#else
#include <cstdint>
#include <cstring>

#include "cuda/common/recorded_launch.h"

namespace mxmoe::smxx {
namespace {

struct Wide {
  double d;
  int32_t i[5];
};

cudaError_t record(LaunchList* list, const void* func, dim3 grid, char c, const Wide& w, const void* p,
                   bool cooperative = false) {
  const void* values[] = {&c, &w, &p};
  const size_t size[] = {sizeof(c), sizeof(w), sizeof(p)};
  const size_t align[] = {alignof(char), alignof(Wide), alignof(const void*)};
  return record_launch(list, func, grid, dim3(128), 512, true, 2, cooperative, 3, values, size, align);
}

TEST(RecordedLaunch, KeepsEachArgumentAtItsAlignment) {
  LaunchList list;
  const Wide w{2.5, {1, 2, 3, 4, 5}};
  int anchor = 0;
  ASSERT_EQ(record(&list, &anchor, dim3(7, 2), 'q', w, &anchor), cudaSuccess);
  ASSERT_EQ(list.count, 1);
  const RecordedLaunch& l = list.launches[0];
  EXPECT_EQ(l.args, 3);
  EXPECT_EQ(l.offset[0], 0);
  EXPECT_EQ(l.offset[1], alignof(Wide));
  EXPECT_EQ(l.offset[2] % alignof(void*), 0u);
  void* params[RecordedLaunch::kMaxArgs];
  l.arguments(params);
  EXPECT_EQ(*static_cast<char*>(params[0]), 'q');
  Wide back{};
  std::memcpy(&back, params[1], sizeof(back));
  EXPECT_EQ(back.d, 2.5);
  EXPECT_EQ(back.i[4], 5);
  EXPECT_EQ(*static_cast<void**>(params[2]), &anchor);
  EXPECT_EQ(l.grid.x, 7u);
  EXPECT_EQ(l.grid.y, 2u);
  EXPECT_EQ(l.smem, 512u);
  EXPECT_TRUE(l.overlap);
  EXPECT_EQ(l.cluster_x, 2u);
  EXPECT_FALSE(l.cooperative);
}

TEST(RecordedLaunch, ShapeIsAllButTheArgumentValues) {
  LaunchList a, b;
  int f = 0, g = 0, p = 0, q = 0;
  const Wide w{1.0, {1, 1, 1, 1, 1}};
  ASSERT_EQ(record(&a, &f, dim3(4), 'a', w, &p), cudaSuccess);
  ASSERT_EQ(record(&b, &f, dim3(4), 'a', w, &q), cudaSuccess);  // another pointer
  ASSERT_EQ(record(&b, &f, dim3(4), 'a', w, &p), cudaSuccess);
  ASSERT_EQ(record(&b, &g, dim3(4), 'a', w, &p), cudaSuccess);  // another kernel
  ASSERT_EQ(record(&b, &f, dim3(5), 'a', w, &p), cudaSuccess);  // another grid
  ASSERT_EQ(record(&b, &f, dim3(4), 'a', w, &p, true), cudaSuccess);  // cooperative
  const RecordedLaunch& l = a.launches[0];
  EXPECT_TRUE(l.same_shape(b.launches[0]));
  EXPECT_FALSE(l.same_arguments(b.launches[0]));
  EXPECT_TRUE(l.same_shape(b.launches[1]));
  EXPECT_TRUE(l.same_arguments(b.launches[1]));
  EXPECT_FALSE(l.same_shape(b.launches[2]));
  EXPECT_FALSE(l.same_shape(b.launches[3]));
  EXPECT_FALSE(l.same_shape(b.launches[4]));
  EXPECT_TRUE(b.launches[4].cooperative);
}

TEST(RecordedLaunch, AFullListRefusesTheNextLaunch) {
  LaunchList list;
  int f = 0;
  const Wide w{};
  for (int i = 0; i < LaunchList::kMaxLaunches; ++i) ASSERT_EQ(record(&list, &f, dim3(1), 'x', w, &f), cudaSuccess);
  EXPECT_FALSE(list.overflow);
  EXPECT_EQ(record(&list, &f, dim3(1), 'x', w, &f), cudaErrorInvalidValue);
  EXPECT_TRUE(list.overflow);
  EXPECT_EQ(list.count, LaunchList::kMaxLaunches);
}

TEST(RecordedLaunch, ArgumentsPastTheRoomAreRefused) {
  LaunchList list;
  static unsigned char big[RecordedLaunch::kMaxArgBytes + 1];
  const void* values[] = {big};
  const size_t size[] = {sizeof(big)};
  const size_t align[] = {1};
  int f = 0;
  EXPECT_EQ(record_launch(&list, &f, dim3(1), dim3(32), 0, false, 1, false, 1, values, size, align), cudaErrorInvalidValue);
  EXPECT_TRUE(list.overflow);
  EXPECT_EQ(list.count, 0);
}

TEST(RecordedLaunch, RecordsOnlyInsideARecordingOnItsThread) {
  EXPECT_EQ(recording_list(), nullptr);
  LaunchList outer, inner;
  {
    LaunchRecording r1(&outer);
    EXPECT_EQ(recording_list(), &outer);
    {
      LaunchRecording r2(&inner);
      EXPECT_EQ(recording_list(), &inner);
    }
    EXPECT_EQ(recording_list(), &outer);
  }
  EXPECT_EQ(recording_list(), nullptr);
}

}  // namespace
}  // namespace mxmoe::smxx
#endif
