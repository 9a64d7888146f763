// Helpers shared by the tests: seeded inputs, error metrics, GPU skipping.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "mxmoe/backend.h"
#include "mxmoe/moe.h"

namespace mxmoe::testing {

// Relative L2 error ||a - b|| / ||b|| in double; +inf if any NaN.
double rel_l2(const std::vector<float>& a, const std::vector<float>& b);
double l2_norm(const std::vector<float>& a);

// N(0, sigma^2) floats, deterministic in `seed`.
std::vector<float> random_floats(size_t n, uint64_t seed, float sigma = 1.0f);
// The same values rounded to bf16 and back (what GPU backends consume).
std::vector<float> round_to_bf16(std::vector<float> v);

// Sets (value null: unsets) an environment variable for the scope, restoring
// the old value after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// True when a CUDA device is usable; otherwise `why` says why.
bool gpu_available(std::string* why);

// MXMOE_TEST_QUICK set (and not "0"): the GPU tests keep a reduced sweep (for
// the racecheck / synccheck runs).
bool quick_sweep();

// Routing the GPU tests run a layer with.
enum class RouteMode {
  kRouter,      // the layer's router
  kRandom,      // k distinct random experts per token
  kOneExpert,   // every token's slot 0 on the last expert, slot s > 0 on expert s - 1
  kFewExperts,  // only experts 0..k-1 and the last one get tokens (k distinct per token)
  kLowExperts,  // every token on experts 0..k-1: the other experts get nothing
  kRepeatedExpert,  // every slot on expert 1 (ids repeat within a token, as in sharded routing)
};
const char* route_mode_name(RouteMode m);
// "E=.. H=.. I=.. k=.. T=.. routing=..": the start of a GPU case's trace line.
std::string describe_case(const MoeShape& s, int64_t tokens, RouteMode mode);
// The routing of `mode` (kRouter: random, unused by the caller), from seed.
Routing make_test_routing(RouteMode mode, int64_t tokens, const MoeShape& s, uint64_t seed);

// Runs `be` on x (bf16 values, [tokens, H]) with the routing of `mode`
// (make_test_routing from routing_seed; kRouter: the layer's router) and
// expects a relative L2 error of at most 1e-2 against the fp64 reference on
// `w`, and a non-zero output. Returns the backend's output.
std::vector<float> expect_matches_reference(Backend& be, const MoeWeights& w, const std::vector<float>& x,
                                            int64_t tokens, RouteMode mode, uint64_t routing_seed);

}  // namespace mxmoe::testing

// Skips the current test, with the reason, where no GPU is present.
#define MXMOE_SKIP_WITHOUT_GPU()                                      \
  do {                                                                \
    std::string mxmoe_why_;                                           \
    if (!::mxmoe::testing::gpu_available(&mxmoe_why_))                \
      GTEST_SKIP() << "GPU test skipped: " << mxmoe_why_;             \
  } while (0)
