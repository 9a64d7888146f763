// The CPU backend behind the Backend interface: a forward equal to the
// reference, and timing that refuses what it cannot time.
#include <gtest/gtest.h>

#include "mxmoe/backend.h"
#include "mxmoe/reference.h"
#include "support/test_support.h"

namespace mxmoe {
namespace {

TEST(CpuBackend, ForwardIsTheReferenceAndTimingNeedsTokens) {
  const uint64_t seed = 41;
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const MoeShape shape{4, 64, 96, 2};
  const MoeWeights w = make_random_weights(shape, seed);
  std::unique_ptr<Backend> be;
  ASSERT_TRUE(create_backend(BackendKind::kCpu, w.view(), &be).ok());
  ASSERT_EQ(be->kind(), BackendKind::kCpu);

  const auto x = testing::random_floats(3 * 64, seed + 1);
  std::vector<float> y(x.size()), ref(x.size());
  ASSERT_TRUE(be->forward_host(x.data(), 3, nullptr, y.data()).ok());
  EXPECT_FALSE(be->forward_host(x.data(), 0, nullptr, y.data()).ok()) << "no tokens: refused, as on a GPU";
  ASSERT_TRUE(reference_forward(w.view(), x.data(), 3, nullptr, ref.data()).ok());
  EXPECT_EQ(y, ref);
  EXPECT_GT(testing::l2_norm(ref), 0.0);

  ForwardTiming t;
  ASSERT_TRUE(be->time_forward(2, 2, 2, seed, 0.0, 0.0, &t).ok());
  EXPECT_GT(t.median_us, 0.0);
  EXPECT_LE(t.min_us, t.median_us);
  EXPECT_EQ(t.chained_median_us, 0.0);  // no graphs on the CPU
  EXPECT_EQ(t.iterations, 2);
  EXPECT_TRUE(t.batch_us.empty());  // no SM clock on the CPU
  EXPECT_TRUE(t.batch_sm_clock_mhz.empty());
  EXPECT_EQ(t.median_sm_clock_mhz, 0.0);
  EXPECT_TRUE(t.chained_batch_sm_clock_mhz.empty());
  EXPECT_TRUE(t.power_note.empty());  // no window asked for
  // A power window asked of the CPU backend: no power, and the reason.
  ASSERT_TRUE(be->time_forward(2, 2, 2, seed, 0.0, 0.5, &t).ok());
  EXPECT_EQ(t.power_w, 0.0);
  EXPECT_EQ(t.energy_mj, 0.0);
  EXPECT_NE(t.power_note.find("CPU"), std::string::npos) << t.power_note;
  EXPECT_FALSE(be->time_forward(0, 2, 2, seed, 0.0, 0.0, &t).ok());
  EXPECT_FALSE(be->time_forward(-3, 2, 2, seed, 0.0, 0.0, &t).ok());
  EXPECT_FALSE(be->time_forward(2, 2, 2, seed, 0.0, 0.0, nullptr).ok());
}

}  // namespace
}  // namespace mxmoe
