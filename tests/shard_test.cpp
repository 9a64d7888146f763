// Tensor- and expert-parallel shards: bytes per rank, and the sum over ranks of
// the per-rank reference outputs equals the unsharded output bit-exactly.
//
// Why bit-exact is a fair demand: the data are chosen so every quantity the
// reference forms is exactly representable, so no summation order can round.
//   - weights: random E2M1 codes with scales 2^0 or 2^1 -> multiples of 0.5, |w| <= 12;
//   - x: integers in [-2, 2]; biases: integers in [-4, 4]; routing weights dyadic;
//   - SwiGLU with alpha = 2048: for |g| >= 0.5, exp(-alpha g) is exactly 0 or
//     +inf in double and float, so the activation is max(g, 0) * (clamp(u) + 1)
//     exactly (g, u multiples of 0.5, limit 7);
//   - sums stay below 2^24 units of their resolution, so float outputs are exact.
// The test asserts that premise (fp32 and fp64 references agree bitwise) before
// comparing shards, so a change that breaks exactness fails loudly.
#include <iostream>
#include <map>
#include <numeric>
#include <random>

#include <gtest/gtest.h>

#include "mxmoe/format.h"
#include "mxmoe/prepare.h"
#include "mxmoe/reference.h"
#include "support/prepare_checks.h"
#include "support/test_support.h"

namespace mxmoe {
namespace {

MoeWeights make_exact_weights(const MoeShape& shape, uint64_t seed) {
  std::cout << "weights seed " << seed << "\n";
  MoeWeights w = make_random_weights(shape, seed);
  std::mt19937_64 rng(seed ^ 0x5eed);
  std::uniform_int_distribution<int> scale(127, 128), bias(-4, 4);
  for (auto& s : w.w13_scales) s = uint8_t(scale(rng));
  for (auto& s : w.w2_scales) s = uint8_t(scale(rng));
  for (auto& b : w.b13) b = float_to_bf16(float(bias(rng)));
  for (auto& b : w.b2) b = float_to_bf16(float(bias(rng)));
  w.swiglu = {2048.0f, 7.0f};
  return w;
}

std::vector<float> make_exact_x(int64_t n, uint64_t seed) {
  std::cout << "x seed " << seed << "\n";
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> v(-2, 2);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& f : x) f = float(v(rng));
  return x;
}

Routing make_exact_routing(int64_t T, int64_t E, int64_t k, uint64_t seed) {
  std::cout << "routing seed " << seed << "\n";
  Routing r = make_random_routing(T, E, k, seed);
  for (int64_t t = 0; t < T; ++t)  // 1/2, 1/4, ..., last two equal: sums to 1
    for (int64_t s = 0; s < k; ++s)
      r.weights[size_t(t * k + s)] = std::ldexp(1.0f, -int(std::min(s + 1, k - 1)));
  return r;
}

struct Case {
  int64_t experts, h, i, topk;
};

// Plain output y [T, H] in fp64, after checking fp32 gives the same bits.
std::vector<float> plain_forward(const MoeWeights& w, const std::vector<float>& x, int64_t T,
                                 const Routing& r) {
  std::vector<float> y64(size_t(T * w.shape.hidden)), y32(y64.size());
  const RoutingView rv = r.view();
  EXPECT_TRUE(reference_forward(w.view(), x.data(), T, &rv, y64.data(), {.fp64 = true}).ok());
  EXPECT_TRUE(reference_forward(w.view(), x.data(), T, &rv, y32.data(), {.fp64 = false}).ok());
  EXPECT_TRUE(y64 == y32) << "test data are not exactly representable";
  EXPECT_GT(testing::l2_norm(y64), 0.0);
  return y64;
}

// Adds rank output yr [T, Hp] into acc [T, H]; checks padded columns are 0.
void accumulate(std::vector<double>* acc, const std::vector<float>& yr, int64_t T, int64_t H,
                int64_t Hp) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < Hp; ++h) {
      const float v = yr[size_t(t * Hp + h)];
      if (h < H) (*acc)[size_t(t * H + h)] += double(v);
      else ASSERT_EQ(v, 0.0f) << "padded output column " << h;
    }
}

void expect_sum_equals(const std::vector<double>& acc, const std::vector<float>& y) {
  int64_t mismatches = 0;
  for (size_t i = 0; i < y.size(); ++i) mismatches += acc[i] != double(y[i]);
  EXPECT_EQ(mismatches, 0);
}

// Weights, inputs, routing and the plain output of one case, built once.
struct CaseData {
  MoeWeights w;
  std::vector<float> x;
  Routing r;
  std::vector<float> y;
};
const CaseData& case_data(const Case& c, int64_t T, uint64_t seed) {
  static std::map<uint64_t, CaseData> cache;
  auto it = cache.find(seed);
  if (it != cache.end()) return it->second;
  CaseData d;
  d.w = make_exact_weights({c.experts, c.h, c.i, c.topk}, seed);
  d.x = make_exact_x(T * c.h, seed + 100);
  d.r = make_exact_routing(T, c.experts, c.topk, seed + 200);
  d.y = plain_forward(d.w, d.x, T, d.r);
  return cache.emplace(seed, std::move(d)).first->second;
}

class TensorParallel : public ::testing::TestWithParam<std::tuple<BackendKind, int, int>> {};
const Case kTpCases[] = {{4, 160, 160, 2}, {4, 320, 224, 2}, {2, 2880, 736, 2}, {1, 2880, 2880, 1}};

TEST_P(TensorParallel, RanksHoldAlignedSlicesAndSumToTheUnshardedOutput) {
  const auto [b, ci, size] = GetParam();
  const Case c = kTpCases[ci];
  const int64_t T = 3;
  const CaseData& d = case_data(c, T, 300 + uint64_t(ci));
  const MoeWeights& w = d.w;
  const auto& x = d.x;
  const Routing& r = d.r;
  const std::vector<float>& y = d.y;

  const int64_t a = std::lcm(int64_t(32), backend_alignment(b).intermediate);
  const int64_t padded_i = tensor_parallel_intermediate(b, c.i, size);
  EXPECT_GE(padded_i, c.i);
  EXPECT_EQ(padded_i % (size * a), 0);
  EXPECT_LT(padded_i - c.i, size * a);
  std::vector<double> acc(y.size(), 0.0);
  for (int rank = 0; rank < size; ++rank) {
    SCOPED_TRACE(::testing::Message() << "rank " << rank << " of " << size);
    WeightShard s;
    ASSERT_TRUE(shard_tensor_parallel(b, w.view(), rank, size, &s).ok());
    const PreparePlan& p = s.prepared.plan;
    EXPECT_EQ(p.intermediate_padded, padded_i / size);
    EXPECT_EQ(p.intermediate_padded % a, 0);
    EXPECT_EQ(s.intermediate_offset, rank * padded_i / size);
    testing::expect_prepared_bytes(w, s.prepared, {0, s.intermediate_offset, rank == 0});
    testing::expect_same_dequantized(w, s.prepared, {0, s.intermediate_offset, rank == 0});
    const auto xp = testing::pad_columns(x, T, c.h, p.hidden_padded);
    std::vector<float> yr(size_t(T * p.hidden_padded));
    const RoutingView rv = r.view();
    ASSERT_TRUE(reference_forward(s.prepared.view(), xp.data(), T, &rv, yr.data(), {.fp64 = true}).ok());
    accumulate(&acc, yr, T, c.h, p.hidden_padded);
  }
  expect_sum_equals(acc, y);
}

std::string tp_name(const ::testing::TestParamInfo<TensorParallel::ParamType>& info) {
  const auto [b, ci, size] = info.param;
  return std::string(backend_name(b)) + "_H" + std::to_string(kTpCases[ci].h) + "_I" +
         std::to_string(kTpCases[ci].i) + "_tp" + std::to_string(size);
}

INSTANTIATE_TEST_SUITE_P(AllPlans, TensorParallel,
                         ::testing::Combine(::testing::ValuesIn(kAllBackends), ::testing::Range(0, 4),
                                            ::testing::Values(2, 4, 8)),
                         tp_name);

TEST(TensorParallel, Gptoss2880AtTp4PadsToWholeBlocksPerRank) {
  // 2880 / 4 = 720 = 22.5 blocks of 32: the split must pad first.
  EXPECT_EQ(tensor_parallel_intermediate(BackendKind::kCpu, 2880, 4), 2944);       // 736 = 23 x 32
  EXPECT_EQ(tensor_parallel_intermediate(BackendKind::kPortable, 2880, 4), 3072);  // 768 = 12 x 64
  EXPECT_EQ(tensor_parallel_intermediate(BackendKind::kSm90, 2880, 4), 3072);      // 768 = 12 x 64
  EXPECT_EQ(tensor_parallel_intermediate(BackendKind::kSm90, 2880, 2), 2944);      // 1472 = 23 x 64
  EXPECT_EQ(tensor_parallel_intermediate(BackendKind::kCpu, 2880, 1), 2880);
}

class ExpertParallel : public ::testing::TestWithParam<std::tuple<BackendKind, int, int>> {};
const Case kEpCases[] = {{8, 160, 160, 4}, {6, 320, 224, 3}, {4, 2880, 736, 2}};

TEST_P(ExpertParallel, RanksHoldExpertRangesAndSumToTheUnshardedOutput) {
  const auto [b, ci, size] = GetParam();
  const Case c = kEpCases[ci];
  const int64_t T = 5;
  const CaseData& d = case_data(c, T, 600 + uint64_t(ci));
  const MoeWeights& w = d.w;
  const auto& x = d.x;
  const Routing& r = d.r;
  const std::vector<float>& y = d.y;

  std::vector<double> acc(y.size(), 0.0);
  int64_t next_expert = 0;
  for (int rank = 0; rank < size; ++rank) {
    SCOPED_TRACE(::testing::Message() << "rank " << rank << " of " << size);
    WeightShard s;
    ASSERT_TRUE(shard_expert_parallel(b, w.view(), rank, size, &s).ok());
    EXPECT_EQ(s.expert_offset, next_expert);  // contiguous, covering, disjoint
    next_expert += s.prepared.plan.shape.experts;
    testing::expect_prepared_bytes(w, s.prepared, {s.expert_offset, 0, true});
    Routing local;
    ASSERT_TRUE(localize_routing(r.view(), s, &local).ok());
    const PreparePlan& p = s.prepared.plan;
    const auto xp = testing::pad_columns(x, T, c.h, p.hidden_padded);
    std::vector<float> yr(size_t(T * p.hidden_padded));
    const RoutingView lv = local.view();
    ASSERT_TRUE(reference_forward(s.prepared.view(), xp.data(), T, &lv, yr.data(), {.fp64 = true}).ok());
    accumulate(&acc, yr, T, c.h, p.hidden_padded);
  }
  EXPECT_EQ(next_expert, c.experts);
  expect_sum_equals(acc, y);
}

std::string ep_name(const ::testing::TestParamInfo<ExpertParallel::ParamType>& info) {
  const auto [b, ci, size] = info.param;
  return std::string(backend_name(b)) + "_E" + std::to_string(kEpCases[ci].experts) + "_H" +
         std::to_string(kEpCases[ci].h) + "_ep" + std::to_string(size);
}

INSTANTIATE_TEST_SUITE_P(SomePlans, ExpertParallel,
                         ::testing::Combine(::testing::Values(BackendKind::kCpu, BackendKind::kPortable,
                                                              BackendKind::kSm90),
                                            ::testing::Range(0, 3), ::testing::Values(1, 2, 4)),
                         ep_name);

TEST(ExpertParallel, LocalizedRoutingKeepsOnlyTheShardsSlots) {
  const MoeWeights w = make_random_weights({4, 64, 64, 2}, 9);
  WeightShard s;
  ASSERT_TRUE(shard_expert_parallel(BackendKind::kCpu, w.view(), 1, 2, &s).ok());  // experts 2, 3
  Routing g;
  g.tokens = 2;
  g.topk = 2;
  g.ids = {3, 0, 1, 0};
  g.weights = {0.75f, 0.25f, 0.5f, 0.5f};
  Routing l;
  ASSERT_TRUE(localize_routing(g.view(), s, &l).ok());
  EXPECT_EQ(l.topk, 2);
  EXPECT_EQ(l.ids, (std::vector<int32_t>{1, 0, 0, 0}));
  EXPECT_EQ(l.weights, (std::vector<float>{0.75f, 0.0f, 0.0f, 0.0f}));
}

TEST(ShardErrors, BadRanksAndTooManyExpertRanksAreRejected) {
  const MoeWeights w = make_random_weights({2, 64, 64, 1}, 3);
  WeightShard s;
  EXPECT_EQ(shard_tensor_parallel(BackendKind::kCpu, w.view(), 2, 2, &s).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(shard_tensor_parallel(BackendKind::kCpu, w.view(), 0, 0, &s).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(shard_expert_parallel(BackendKind::kCpu, w.view(), 0, 4, &s).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mxmoe
