// Helpers shared by the tests: seeded inputs, error metrics, GPU skipping.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace mxmoe::testing {

// Relative L2 error ||a - b|| / ||b|| in double; +inf if any NaN.
double rel_l2(const std::vector<float>& a, const std::vector<float>& b);
double l2_norm(const std::vector<float>& a);

// N(0, sigma^2) floats, deterministic in `seed`.
std::vector<float> random_floats(size_t n, uint64_t seed, float sigma = 1.0f);
// The same values rounded to bf16 and back (what GPU backends consume).
std::vector<float> round_to_bf16(std::vector<float> v);

// True when a CUDA device is usable; otherwise `why` says why.
bool gpu_available(std::string* why);

}  // namespace mxmoe::testing

// Skips the current test, with the reason, where no GPU is present.
#define MXMOE_SKIP_WITHOUT_GPU()                                      \
  do {                                                                \
    std::string mxmoe_why_;                                           \
    if (!::mxmoe::testing::gpu_available(&mxmoe_why_))                \
      GTEST_SKIP() << "GPU test skipped: " << mxmoe_why_;             \
  } while (0)
