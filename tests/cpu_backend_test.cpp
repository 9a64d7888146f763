// The host backends behind the Backend interface: reference's forward is the
// fp64 reference, cpu's is within its bound of it (on x rounded to bf16), and
// both time forwards and refuse what they cannot time.
#include <algorithm>

#include <gtest/gtest.h>

#include "mxmoe/backend.h"
#include "mxmoe/reference.h"
#include "support/test_support.h"

namespace mxmoe {
namespace {

void expect_host_timing(Backend& be, uint64_t seed) {
  ForwardTiming t;
  ASSERT_TRUE(be.time_forward(2, 2, 2, seed, 0.0, 0.0, &t).ok());
  EXPECT_GT(t.median_us, 0.0);
  EXPECT_LE(t.min_us, t.median_us);
  EXPECT_EQ(t.chained_median_us, 0.0);  // no graphs on the CPU
  EXPECT_EQ(t.iterations, 2);
  ASSERT_EQ(t.batch_us.size(), 2u);  // each forward's time
  EXPECT_EQ(std::min(t.batch_us[0], t.batch_us[1]), t.min_us);
  EXPECT_TRUE(t.batch_sm_clock_mhz.empty());  // no SM clock on the CPU
  EXPECT_EQ(t.median_sm_clock_mhz, 0.0);
  EXPECT_TRUE(t.chained_batch_sm_clock_mhz.empty());
  EXPECT_TRUE(t.power_note.empty());  // no window asked for
  // A power window asked of a CPU backend: no power, and the reason.
  ASSERT_TRUE(be.time_forward(2, 2, 2, seed, 0.0, 0.5, &t).ok());
  EXPECT_EQ(t.power_w, 0.0);
  EXPECT_EQ(t.energy_mj, 0.0);
  EXPECT_NE(t.power_note.find("CPU"), std::string::npos) << t.power_note;
  // A warm-up window runs forwards before the timed ones.
  ASSERT_TRUE(be.time_forward(1, 2, 3, seed, 0.01, 0.0, &t).ok());
  EXPECT_EQ(t.iterations, 3);
  EXPECT_FALSE(be.time_forward(0, 2, 2, seed, 0.0, 0.0, &t).ok());
  EXPECT_FALSE(be.time_forward(-3, 2, 2, seed, 0.0, 0.0, &t).ok());
  EXPECT_FALSE(be.time_forward(2, 2, 2, seed, 0.0, 0.0, nullptr).ok());
}

TEST(HostBackends, ReferenceIsTheFp64ReferenceAndCpuIsWithinItsBound) {
  const uint64_t seed = 41;
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const MoeShape shape{4, 64, 96, 2};
  const MoeWeights w = make_random_weights(shape, seed);
  const auto x = testing::random_floats(3 * 64, seed + 1);
  std::vector<float> ref(x.size()), ref_bf16(x.size());
  ASSERT_TRUE(reference_forward(w.view(), x.data(), 3, nullptr, ref.data(), {.fp64 = true}).ok());
  const auto xb = testing::round_to_bf16(x);
  ASSERT_TRUE(reference_forward(w.view(), xb.data(), 3, nullptr, ref_bf16.data(), {.fp64 = true}).ok());
  EXPECT_GT(testing::l2_norm(ref), 0.0);

  for (BackendKind kind : {BackendKind::kReference, BackendKind::kCpu}) {
    SCOPED_TRACE(backend_name(kind));
    std::unique_ptr<Backend> be;
    ASSERT_TRUE(create_backend(kind, w.view(), &be).ok());
    ASSERT_EQ(be->kind(), kind);
    std::vector<float> y(x.size());
    ASSERT_TRUE(be->forward_host(x.data(), 3, nullptr, y.data()).ok());
    EXPECT_FALSE(be->forward_host(x.data(), 0, nullptr, y.data()).ok()) << "no tokens: refused, as on a GPU";
    if (kind == BackendKind::kReference) EXPECT_EQ(y, ref);
    else EXPECT_LE(testing::rel_l2(y, ref_bf16), 1e-4);  // fp32 y: the activations' 16-bit quantisation
    expect_host_timing(*be, seed);
  }
}

TEST(HostBackends, CpuTakesBf16ActivationsOnly) {
  const MoeWeights w = make_random_weights({4, 64, 96, 2}, 43);
  std::unique_ptr<Backend> be;
  const Status st = create_backend(BackendKind::kCpu, w.view(), {.format = ActivationFormat::kMxfp8}, &be);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("the reference backend computes either"), std::string::npos) << st.message();
  EXPECT_TRUE(create_backend(BackendKind::kReference, w.view(), {.format = ActivationFormat::kMxfp8}, &be).ok());
}

}  // namespace
}  // namespace mxmoe
