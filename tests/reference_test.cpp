// The CPU reference against a direct loop written here from the GPT-OSS MoE
// definition, element by element, in double.
#include <algorithm>
#include <cmath>
#include <numeric>

#include <gtest/gtest.h>

#include "mxmoe/format.h"
#include "mxmoe/reference.h"
#include "support/test_support.h"

namespace mxmoe {
namespace {

double weight_at(const MxMatrixView& m, int64_t e, int64_t r, int64_t k) {
  static const double kMag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  const uint8_t byte = m.code_row(e, r)[k / 2];
  const int code = (k % 2) ? byte >> 4 : byte & 0xF;
  const double v = (code & 8) ? -kMag[code & 7] : kMag[code & 7];
  return v * std::pow(2.0, int(m.scale_row(e, r)[k / 32]) - 127);
}

struct Direct {
  std::vector<float> y;
  int64_t gate_clamped = 0, up_clamped_low = 0, up_clamped_high = 0;
};

Direct direct_moe(const MoeWeights& w, const std::vector<float>& x, int64_t T) {
  const MoeWeightsView v = w.view();
  const int64_t E = w.shape.experts, H = w.shape.hidden, I = w.shape.intermediate, K = w.shape.topk;
  const double alpha = w.swiglu.alpha, limit = w.swiglu.limit;
  Direct d;
  d.y.assign(size_t(T * H), 0.0f);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> logits(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) {
      double s = bf16_to_float(w.router_bias[size_t(e)]);
      for (int64_t h = 0; h < H; ++h) s += double(bf16_to_float(w.router_weight[size_t(e * H + h)])) * x[size_t(t * H + h)];
      logits[size_t(e)] = s;
    }
    std::vector<int64_t> chosen;
    std::vector<bool> taken(size_t(E), false);
    for (int64_t k = 0; k < K; ++k) {  // selection: strictly larger wins, so ties keep the lower id
      int64_t best = -1;
      for (int64_t e = 0; e < E; ++e)
        if (!taken[size_t(e)] && (best < 0 || logits[size_t(e)] > logits[size_t(best)])) best = e;
      taken[size_t(best)] = true;
      chosen.push_back(best);
    }
    double denom = 0;
    for (int64_t e : chosen) denom += std::exp(logits[size_t(e)] - logits[size_t(chosen[0])]);
    std::vector<double> yt(size_t(H), 0.0);
    for (int64_t e : chosen) {
      const double weight = std::exp(logits[size_t(e)] - logits[size_t(chosen[0])]) / denom;
      std::vector<double> a(static_cast<size_t>(I));
      for (int64_t j = 0; j < I; ++j) {
        double gate = bf16_to_float(w.b13[size_t(e * 2 * I + 2 * j)]);
        double up = bf16_to_float(w.b13[size_t(e * 2 * I + 2 * j + 1)]);
        for (int64_t h = 0; h < H; ++h) {
          gate += weight_at(v.w13, e, 2 * j, h) * x[size_t(t * H + h)];
          up += weight_at(v.w13, e, 2 * j + 1, h) * x[size_t(t * H + h)];
        }
        d.gate_clamped += gate > limit;
        d.up_clamped_low += up < -limit;
        d.up_clamped_high += up > limit;
        const double g = std::min(gate, limit), u = std::max(-limit, std::min(up, limit));
        a[size_t(j)] = g * (1.0 / (1.0 + std::exp(-alpha * g))) * (u + 1.0);
      }
      for (int64_t h = 0; h < H; ++h) {
        double s = bf16_to_float(w.b2[size_t(e * H + h)]);
        for (int64_t j = 0; j < I; ++j) s += weight_at(v.w2, e, h, j) * a[size_t(j)];
        yt[size_t(h)] += weight * s;
      }
    }
    for (int64_t h = 0; h < H; ++h) d.y[size_t(t * H + h)] = float(yt[size_t(h)]);
  }
  return d;
}

struct Case { MoeShape shape; int64_t tokens; float x_sigma; uint64_t seed; };

class ReferenceVsDirect : public ::testing::TestWithParam<Case> {};

TEST_P(ReferenceVsDirect, MatchesInFp64WithClampAndBiasesExercised) {
  const Case c = GetParam();
  SCOPED_TRACE(::testing::Message() << "seed " << c.seed);
  MoeWeights w = make_random_weights(c.shape, c.seed);
  w.swiglu = {1.702f, 7.0f};
  const auto x = testing::random_floats(size_t(c.tokens * c.shape.hidden), c.seed + 1, c.x_sigma);
  std::vector<float> y(x.size());
  ASSERT_TRUE(reference_forward(w.view(), x.data(), c.tokens, nullptr, y.data(), {.fp64 = true}).ok());
  const Direct d = direct_moe(w, x, c.tokens);
  EXPECT_GT(testing::l2_norm(d.y), 0.0);
  EXPECT_LE(testing::rel_l2(y, d.y), 1e-6);
  EXPECT_GT(d.gate_clamped, 0) << "inputs must be large enough for min(gate, 7) to bite";
  EXPECT_GT(d.up_clamped_low + d.up_clamped_high, 0) << "inputs must be large enough for clamp(up) to bite";

  // fp32 accumulation stays close to the fp64 result.
  std::vector<float> y32(x.size());
  ASSERT_TRUE(reference_forward(w.view(), x.data(), c.tokens, nullptr, y32.data()).ok());
  EXPECT_LE(testing::rel_l2(y32, d.y), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Shapes, ReferenceVsDirect,
                         ::testing::Values(Case{{8, 64, 32, 2}, 5, 8.0f, 11}, Case{{4, 160, 96, 4}, 3, 6.0f, 12},
                                           Case{{16, 96, 64, 1}, 7, 8.0f, 13}, Case{{5, 64, 64, 5}, 2, 8.0f, 14}));

TEST(Reference, PrecomputedRoutingEqualsRouterRouting) {
  const MoeShape shape{8, 64, 64, 3};
  const auto w = make_random_weights(shape, 3);
  const auto x = testing::random_floats(4 * 64, 4);
  Routing r;
  ASSERT_TRUE(reference_route(w.view(), x.data(), 4, &r).ok());
  std::vector<float> y1(x.size()), y2(x.size());
  ASSERT_TRUE(reference_forward(w.view(), x.data(), 4, nullptr, y1.data()).ok());
  const RoutingView rv = r.view();
  ASSERT_TRUE(reference_forward(w.view(), x.data(), 4, &rv, y2.data()).ok());
  EXPECT_EQ(y1, y2);
  EXPECT_GT(testing::l2_norm(y1), 0.0);
}

TEST(Reference, RouterTiesGoToTheLowerExpertId) {
  const MoeShape shape{6, 32, 32, 2};
  MoeWeights w = make_random_weights(shape, 5);
  std::fill(w.router_weight.begin(), w.router_weight.end(), uint16_t(0));
  for (int e = 0; e < 6; ++e) w.router_bias[size_t(e)] = float_to_bf16(e == 4 || e == 1 || e == 5 ? 1.0f : 0.0f);
  const auto x = testing::random_floats(32, 6);
  Routing r;
  ASSERT_TRUE(reference_route(w.view(), x.data(), 1, &r).ok());
  EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 4}));
  EXPECT_FLOAT_EQ(r.weights[0], 0.5f);
}

TEST(Reference, RejectsBadRoutingAndShapes) {
  const MoeShape shape{4, 32, 32, 2};
  const auto w = make_random_weights(shape, 1);
  const auto x = testing::random_floats(32, 2);
  std::vector<float> y(32);
  const int32_t ids[2] = {0, 4};
  const float weights[2] = {0.5f, 0.5f};
  const RoutingView bad{ids, weights, 1, 2};
  const Status s = reference_forward(w.view(), x.data(), 1, &bad, y.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("expert id 4"), std::string::npos) << s.message();
  MoeWeightsView v = w.view();
  v.shape.hidden = 48;
  EXPECT_FALSE(reference_forward(v, x.data(), 1, nullptr, y.data()).ok());
  EXPECT_TRUE(reference_forward(w.view(), x.data(), 0, nullptr, y.data()).ok()) << "T = 0 is a no-op";
}

TEST(Reference, NaNScaleGivesNaNOutput) {
  const MoeShape shape{1, 32, 32, 1};
  MoeWeights w = make_random_weights(shape, 9);
  w.w2_scales[3] = kE8M0NaN;
  const auto x = testing::random_floats(32, 10);
  std::vector<float> y(32);
  ASSERT_TRUE(reference_forward(w.view(), x.data(), 1, nullptr, y.data()).ok());
  EXPECT_TRUE(std::isnan(y[3]));
}

}  // namespace
}  // namespace mxmoe
