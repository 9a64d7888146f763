// The cpu backend's kernels (src/cpu/) on every path this CPU runs, on 1
// thread and on all: against the fp64 reference on the same bytes (rel L2
// <= 1e-4 with fp32 y, the activations' 16-bit quantisation; <= 5e-3 with
// bf16 y), and every path and thread count bit for bit equal to the scalar
// path on one thread. Shapes at the edges (H, I in 160, 320, 736, 2880; T =
// 1, 3, 127), experts without tokens, every pair on one expert, the caller's
// routing and the router; NaN input, E8M0 scale 0 (2^-127), T = 0, the path
// choice and its environment variable.
#include <cmath>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cpu/cpu_moe.h"
#include "mxmoe/cpu.h"
#include "mxmoe/format.h"
#include "mxmoe/reference.h"
#include "support/test_support.h"

namespace mxmoe {
namespace {

using testing::RouteMode;

std::vector<CpuIsa> supported_isas() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : kAllCpuIsas)
    if (cpu_isa_supported(isa)) out.push_back(isa);
  return out;
}

struct Case {
  MoeShape shape;
  int64_t tokens;
  RouteMode mode;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string mode = testing::route_mode_name(c.mode);
  for (char& ch : mode)
    if (ch == '-') ch = '_';
  return "E" + std::to_string(c.shape.experts) + "_H" + std::to_string(c.shape.hidden) + "_I" +
         std::to_string(c.shape.intermediate) + "_k" + std::to_string(c.shape.topk) + "_T" +
         std::to_string(c.tokens) + "_" + mode;
}

// x: N(0, 1) rounded to bf16, as bits and as the floats the reference reads.
struct Input {
  std::vector<uint16_t> bits;
  std::vector<float> values;
};
Input make_input(int64_t n, uint64_t seed) {
  Input in;
  in.values = testing::round_to_bf16(testing::random_floats(size_t(n), seed));
  for (float v : in.values) in.bits.push_back(float_to_bf16(v));
  return in;
}

// One forward of `moe`; y as floats (bf16 y widened).
std::vector<float> run(const cpu::CpuMoe& moe, const Input& x, int64_t T, const Routing* r, OutputDtype dtype,
                       int threads) {
  const int64_t H = moe.shape().hidden;
  std::vector<float> y32(size_t(T * H), NAN);
  std::vector<uint16_t> y16(size_t(T * H), 0x7FC0);
  LayerForwardArgs a{.x = x.bits.data(), .tokens = T, .y_dtype = dtype};
  if (r) {
    a.topk_ids = r->ids.data();
    a.topk_weights = r->weights.data();
  }
  a.y = dtype == OutputDtype::kFp32 ? static_cast<void*>(y32.data()) : y16.data();
  std::vector<uint8_t> ws(moe.workspace_bytes(T));
  const Status st = moe.forward(a, ws.data(), ws.size(), threads);
  EXPECT_TRUE(st.ok()) << st.message();
  if (dtype == OutputDtype::kBf16)
    for (size_t i = 0; i < y16.size(); ++i) y32[i] = bf16_to_float(y16[i]);
  return y32;
}

// A case's weights, x, routing (none where the router routes) and the fp64
// reference's y, all from `seed`.
struct CaseData {
  MoeWeights w;
  Input x;
  std::optional<Routing> routing;
  std::vector<float> ref;
  const Routing* r() const { return routing ? &*routing : nullptr; }
};
CaseData make_case_data(const Case& c, uint64_t seed) {
  CaseData d{make_random_weights(c.shape, seed), make_input(c.tokens * c.shape.hidden, seed + 1), std::nullopt, {}};
  if (c.mode != RouteMode::kRouter) d.routing = testing::make_test_routing(c.mode, c.tokens, c.shape, seed + 2);
  const RoutingView rv = d.routing ? d.routing->view() : RoutingView{};
  d.ref.resize(d.x.values.size());
  const Status st = reference_forward(d.w.view(), d.x.values.data(), c.tokens, d.routing ? &rv : nullptr,
                                      d.ref.data(), {.fp64 = true});
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_GT(testing::l2_norm(d.ref), 0.0);
  return d;
}

class CpuPaths : public ::testing::TestWithParam<Case> {};

TEST_P(CpuPaths, MatchTheReferenceAndEachOther) {
  const Case& c = GetParam();
  const uint64_t seed = 7000 + uint64_t(c.tokens) + uint64_t(c.shape.hidden) + uint64_t(c.shape.intermediate);
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const CaseData d = make_case_data(c, seed);
  const MoeWeights& w = d.w;
  const Input& x = d.x;
  const std::vector<float>& ref = d.ref;

  std::vector<float> first;  // the first path's fp32 y on one thread
  for (CpuIsa isa : supported_isas()) {
    SCOPED_TRACE(cpu_isa_name(isa));
    std::unique_ptr<cpu::CpuMoe> moe;
    ASSERT_TRUE(cpu::CpuMoe::create(w.view(), isa, &moe).ok());
    ASSERT_EQ(moe->isa(), isa);
    for (int threads : {1, 0}) {
      SCOPED_TRACE(threads == 1 ? "1 thread" : "all threads");
      const Routing* r = d.r();
      const std::vector<float> y32 = run(*moe, x, c.tokens, r, OutputDtype::kFp32, threads);
      const std::vector<float> y16 = run(*moe, x, c.tokens, r, OutputDtype::kBf16, threads);
      EXPECT_LE(testing::rel_l2(y32, ref), 1e-4);
      EXPECT_LE(testing::rel_l2(y16, ref), 5e-3);
      if (first.empty()) first = y32;
      else EXPECT_EQ(y32, first) << "not bit for bit the " << cpu_isa_name(supported_isas().front())
                                 << " path on one thread";
    }
  }
}

const MoeShape kSmall{8, 160, 160, 2}, kWide{4, 320, 736, 4}, kGptOss{4, 2880, 2880, 4}, kShard{3, 2880, 736, 2},
    kNarrow{6, 736, 320, 3};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int64_t T : {1, 3, 127}) {
    for (RouteMode m : {RouteMode::kRouter, RouteMode::kRandom, RouteMode::kOneExpert, RouteMode::kFewExperts,
                        RouteMode::kRepeatedExpert})
      out.push_back({kSmall, T, m});
    for (RouteMode m : {RouteMode::kRouter, RouteMode::kRandom}) out.push_back({kWide, T, m});
    out.push_back({kNarrow, T, RouteMode::kLowExperts});
  }
  for (int64_t T : {1, 3}) {
    out.push_back({kGptOss, T, RouteMode::kRouter});
    out.push_back({kGptOss, T, RouteMode::kRandom});
    out.push_back({kShard, T, RouteMode::kFewExperts});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Sweep, CpuPaths, ::testing::ValuesIn(cases()), case_name);

// The amx path's tile multiplies take an expert's rows 16 at a time, 64 to a
// packed chunk, from cpu::kAmxMinRows rows: every pair on one expert at row
// counts around those edges (and below the threshold, where its experts take
// avx512_vnni's chains), then rows spread over experts. Bit for bit the
// avx512_vnni path, and within the reference's bounds.
TEST(AmxPath, RowCountsAroundTilesAndChunksGiveAvx512VnniBits) {
  if (!cpu_isa_supported(CpuIsa::kAmx))
    GTEST_SKIP() << "this CPU lacks " << cpu_isa_features(CpuIsa::kAmx) << ": the amx path is not run here";
  std::vector<Case> amx_cases;
  for (int64_t T : {1, 3, 4, 5, 15, 16, 17, 63, 64, 65, 129})
    amx_cases.push_back({{3, 320, 736, 1}, T, RouteMode::kRepeatedExpert});
  amx_cases.push_back({kShard, 129, RouteMode::kRandom});
  amx_cases.push_back({kNarrow, 97, RouteMode::kFewExperts});
  amx_cases.push_back({kGptOss, 40, RouteMode::kRouter});
  for (const Case& c : amx_cases) {
    const uint64_t seed = 9100 + uint64_t(c.tokens) + uint64_t(c.shape.intermediate);
    SCOPED_TRACE(::testing::Message() << "T " << c.tokens << " I " << c.shape.intermediate << " "
                                      << testing::route_mode_name(c.mode) << ", seed " << seed);
    const CaseData d = make_case_data(c, seed);
    std::unique_ptr<cpu::CpuMoe> amx, vnni;
    ASSERT_TRUE(cpu::CpuMoe::create(d.w.view(), CpuIsa::kAmx, &amx).ok());
    ASSERT_TRUE(cpu::CpuMoe::create(d.w.view(), CpuIsa::kAvx512Vnni, &vnni).ok());
    for (int threads : {1, 0}) {
      const std::vector<float> y = run(*amx, d.x, c.tokens, d.r(), OutputDtype::kFp32, threads);
      EXPECT_LE(testing::rel_l2(y, d.ref), 1e-4);
      EXPECT_EQ(y, run(*vnni, d.x, c.tokens, d.r(), OutputDtype::kFp32, threads)) << threads << " threads (0: all)";
    }
  }
}

std::unique_ptr<cpu::CpuMoe> best(const MoeWeights& w) {
  std::unique_ptr<cpu::CpuMoe> moe;
  EXPECT_TRUE(cpu::CpuMoe::create(w.view(), supported_isas().front(), &moe).ok());
  return moe;
}

TEST(CpuMoe, NoTokensWritesNothing) {
  const MoeWeights w = make_random_weights(kSmall, 71);
  for (CpuIsa isa : supported_isas()) {
    std::unique_ptr<cpu::CpuMoe> moe;
    ASSERT_TRUE(cpu::CpuMoe::create(w.view(), isa, &moe).ok());
    EXPECT_EQ(moe->workspace_bytes(0), 0u);
    float y = 42.f;
    ASSERT_TRUE(moe->forward({.tokens = 0, .y = &y}, nullptr, 0).ok());
    EXPECT_EQ(y, 42.f);
  }
}

// A NaN in one token's x makes that token's y NaN and changes no other
// token's y (in the reference too: 0 x NaN = NaN in its dot products).
TEST(CpuMoe, NanInputPoisonsOnlyItsToken) {
  const MoeShape s = kSmall;
  const MoeWeights w = make_random_weights(s, 72);
  Input x = make_input(3 * s.hidden, 73);
  const Routing r = testing::make_test_routing(RouteMode::kRandom, 3, s, 74);
  const auto moe = best(w);
  const std::vector<float> clean = run(*moe, x, 3, &r, OutputDtype::kFp32, 0);
  x.bits[size_t(s.hidden + 37)] = 0x7FC0;  // token 1
  const std::vector<float> y = run(*moe, x, 3, &r, OutputDtype::kFp32, 0);
  for (int64_t h = 0; h < s.hidden; ++h) {
    EXPECT_TRUE(std::isnan(y[size_t(s.hidden + h)])) << h;
    EXPECT_EQ(y[size_t(h)], clean[size_t(h)]);
    EXPECT_EQ(y[size_t(2 * s.hidden + h)], clean[size_t(2 * s.hidden + h)]);
  }
}

// E8M0 byte 0 is 2^-127 (a float subnormal), not zero: output 0 of every
// expert reads only blocks of scales 0 and 1 (2^-126) and has no bias, so
// its value, about 1e-39 (a subnormal with some 20 significant bits), is all
// theirs; flushing the 0 blocks would lose about half of it.
TEST(CpuMoe, ScaleByteZeroIsTwoToTheMinus127) {
  const MoeShape s = kSmall;
  MoeWeights w = make_random_weights(s, 75);
  const int64_t blocks = s.intermediate / 32;
  for (int64_t e = 0; e < s.experts; ++e) {
    for (int64_t b = 0; b < blocks; ++b) w.w2_scales[size_t(e * s.hidden * blocks + b)] = uint8_t(b % 2);
    w.b2[size_t(e * s.hidden)] = 0;
  }
  const Input x = make_input(4 * s.hidden, 76);
  const Routing r = testing::make_test_routing(RouteMode::kRandom, 4, s, 77);
  const RoutingView rv = r.view();
  std::vector<float> ref(x.values.size());
  ASSERT_TRUE(reference_forward(w.view(), x.values.data(), 4, &rv, ref.data(), {.fp64 = true}).ok());
  for (CpuIsa isa : supported_isas()) {
    SCOPED_TRACE(cpu_isa_name(isa));
    std::unique_ptr<cpu::CpuMoe> moe;
    ASSERT_TRUE(cpu::CpuMoe::create(w.view(), isa, &moe).ok());
    const std::vector<float> y = run(*moe, x, 4, &r, OutputDtype::kFp32, 0);
    for (int64_t t = 0; t < 4; ++t) {
      const float want = ref[size_t(t * s.hidden)], got = y[size_t(t * s.hidden)];
      ASSERT_GT(std::fabs(want), 1e-40f);
      EXPECT_NEAR(got, want, 1e-3 * std::fabs(want)) << "token " << t;
    }
  }
}

TEST(CpuMoe, RefusesWhatItCannotRun) {
  const MoeWeights w = make_random_weights(kSmall, 78);
  const auto moe = best(w);
  const Input x = make_input(2 * kSmall.hidden, 79);
  Routing r = testing::make_test_routing(RouteMode::kRandom, 2, kSmall, 80);
  r.ids[3] = 8;  // token 1, slot 1
  std::vector<float> y(size_t(2 * kSmall.hidden), 1.0f);
  std::vector<uint8_t> ws(moe->workspace_bytes(2));
  LayerForwardArgs a{.x = x.bits.data(), .tokens = 2, .topk_ids = r.ids.data(), .topk_weights = r.weights.data(),
                     .y = y.data(), .y_dtype = OutputDtype::kFp32};
  Status st = moe->forward(a, ws.data(), ws.size());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("token 1 slot 1 has expert id 8"), std::string::npos) << st.message();
  r.ids[3] = 0;
  st = moe->forward(a, ws.data(), 16);
  EXPECT_NE(st.message().find("workspace of"), std::string::npos) << st.message();
  a.x_row_stride = kSmall.hidden - 32;
  EXPECT_NE(moe->forward(a, ws.data(), ws.size()).message().find("below H"), std::string::npos);
  for (float v : y) ASSERT_EQ(v, 1.0f) << "y written by a refused forward";
  // A path this CPU lacks is refused at creation (where there is one).
  for (CpuIsa isa : kAllCpuIsas)
    if (!cpu_isa_supported(isa)) {
      std::unique_ptr<cpu::CpuMoe> other;
      st = cpu::CpuMoe::create(w.view(), isa, &other);
      EXPECT_EQ(st.code(), StatusCode::kUnsupported);
      EXPECT_NE(st.message().find(cpu_isa_features(isa)), std::string::npos) << st.message();
    }
}

TEST(CpuIsaChoice, BestPathByDefaultAndTheEnvironmentForcesOne) {
  CpuIsa isa;
  std::string why;
  {
    testing::ScopedEnv env("MXMOE_CPU_ISA", "");
    ASSERT_TRUE(choose_cpu_isa(&isa, &why).ok());
    EXPECT_EQ(isa, supported_isas()[cpu_isa_chosen_by_default(supported_isas().front()) ? 0 : 1]);
    EXPECT_NE(isa, CpuIsa::kAmx) << "amx runs only where MXMOE_CPU_ISA asks for it";
    EXPECT_NE(why.find(std::string(cpu_isa_name(isa)) + " kernels"), std::string::npos) << why;
  }
  {
    testing::ScopedEnv env("MXMOE_CPU_ISA", "scalar");
    ASSERT_TRUE(choose_cpu_isa(&isa, &why).ok());
    EXPECT_EQ(isa, CpuIsa::kScalar);
    EXPECT_EQ(why, "scalar kernels (forced by MXMOE_CPU_ISA)");
  }
  {
    testing::ScopedEnv env("MXMOE_CPU_ISA", "avx1024");
    const Status st = choose_cpu_isa(&isa, &why);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("amx, avx512_vnni, avx512, avx2, scalar"), std::string::npos) << st.message();
  }
  EXPECT_TRUE(cpu_isa_supported(CpuIsa::kScalar));
  for (CpuIsa i : kAllCpuIsas) EXPECT_EQ(parse_cpu_isa(cpu_isa_name(i)), i);
  std::cout << "paths this CPU runs:";
  for (CpuIsa i : supported_isas()) std::cout << " " << cpu_isa_name(i);
  std::cout << "\n";
}

}  // namespace
}  // namespace mxmoe
