#include <gtest/gtest.h>

#include "mxmoe/reference.h"
#include "support/test_support.h"

TEST(ReferenceSmoke, NonZeroOutput) {
  const mxmoe::MoeShape shape{8, 64, 32, 2};
  const auto w = mxmoe::make_random_weights(shape, 1);
  const auto x = mxmoe::testing::random_floats(3 * 64, 2);
  std::vector<float> y(3 * 64);
  ASSERT_TRUE(mxmoe::reference_forward(w.view(), x.data(), 3, nullptr, y.data()).ok());
  EXPECT_GT(mxmoe::testing::l2_norm(y), 0.0);
}
