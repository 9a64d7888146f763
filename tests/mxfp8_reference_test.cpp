// The CPU reference's MXFP8 activation mode against the pipeline written out
// step by step from the format codecs: x to MXFP8 per token, GEMM1 + SwiGLU on
// the MXFP4 weights, the SwiGLU output to MXFP8 per pair, GEMM2, combine; both
// scale rules; and how far MXFP8 moves the output from bf16 activations.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "mxmoe/format.h"
#include "mxmoe/reference.h"
#include "support/test_support.h"

namespace mxmoe {
namespace {

using testing::l2_norm;
using testing::random_floats;
using testing::rel_l2;

std::vector<float> mxfp8(const std::vector<float>& v, MxScaleRule rule) {
  std::vector<uint8_t> codes(v.size()), scales(v.size() / kMxBlock);
  EXPECT_TRUE(mxfp8_quantize_row(v.data(), int64_t(v.size()), codes.data(), scales.data(), rule));
  std::vector<float> out(v.size());
  mxfp8_dequantize_row(codes.data(), scales.data(), int64_t(v.size()), out.data());
  return out;
}

std::vector<double> decoded_row(const MxMatrixView& m, int64_t e, int64_t r) {
  std::vector<float> f(size_t(m.cols));
  mxfp4_dequantize_row(m.code_row(e, r), m.scale_row(e, r), m.cols, f.data());
  return {f.begin(), f.end()};
}

// y for the given routing, in double, from the codecs alone.
std::vector<float> by_hand(const MoeWeights& w, const std::vector<float>& x, const Routing& r, MxScaleRule rule) {
  const MoeWeightsView v = w.view();
  const int64_t H = w.shape.hidden, I = w.shape.intermediate, K = r.topk;
  std::vector<float> y(x.size(), 0.f);
  for (int64_t t = 0; t < r.tokens; ++t) {
    const std::vector<float> xq = mxfp8({x.begin() + t * H, x.begin() + (t + 1) * H}, rule);
    std::vector<double> acc(size_t(H), 0.0);
    for (int64_t s = 0; s < K; ++s) {
      const int64_t e = r.ids[size_t(t * K + s)];
      std::vector<float> a(static_cast<size_t>(I));
      for (int64_t j = 0; j < I; ++j) {
        const auto gate = decoded_row(v.w13, e, 2 * j), up = decoded_row(v.w13, e, 2 * j + 1);
        double g = bf16_to_float(w.b13[size_t(e * 2 * I + 2 * j)]), u = bf16_to_float(w.b13[size_t(e * 2 * I + 2 * j + 1)]);
        for (int64_t h = 0; h < H; ++h) {
          g += gate[size_t(h)] * xq[size_t(h)];
          u += up[size_t(h)] * xq[size_t(h)];
        }
        g = std::min(g, double(w.swiglu.limit));
        u = std::clamp(u, -double(w.swiglu.limit), double(w.swiglu.limit));
        a[size_t(j)] = float(g / (1 + std::exp(-double(w.swiglu.alpha) * g)) * (u + 1));
      }
      const std::vector<float> aq = mxfp8(a, rule);
      for (int64_t h = 0; h < H; ++h) {
        const auto row = decoded_row(v.w2, e, h);
        double o = bf16_to_float(w.b2[size_t(e * H + h)]);
        for (int64_t j = 0; j < I; ++j) o += row[size_t(j)] * aq[size_t(j)];
        acc[size_t(h)] += double(r.weights[size_t(t * K + s)]) * o;
      }
    }
    for (int64_t h = 0; h < H; ++h) y[size_t(t * H + h)] = float(acc[size_t(h)]);
  }
  return y;
}

TEST(Mxfp8Reference, MatchesThePipelineByHand) {
  const MoeShape s{6, 96, 64, 2};
  const MoeWeights w = make_random_weights(s, 81);
  const int64_t T = 5;
  const std::vector<float> x = random_floats(size_t(T * s.hidden), 82);
  const Routing r = make_random_routing(T, s.experts, s.topk, 83);
  const RoutingView rv = r.view();
  for (MxScaleRule rule : {MxScaleRule::kTriton, MxScaleRule::kOcp}) {
    SCOPED_TRACE(rule == MxScaleRule::kOcp ? "ocp" : "ceil");
    std::vector<float> y(x.size());
    ReferenceOptions o{.fp64 = true};
    o.activations = {ActivationFormat::kMxfp8, rule};
    ASSERT_TRUE(reference_forward(w.view(), x.data(), T, &rv, y.data(), o).ok());
    const std::vector<float> expect = by_hand(w, x, r, rule);
    EXPECT_GT(l2_norm(expect), 0.0);
    // The same roundings in the same order but for the sums' association: an
    // E4M3 rounding of the SwiGLU output may land on the other side of a tie.
    EXPECT_LE(rel_l2(y, expect), 1e-5);
  }
}

TEST(Mxfp8Reference, MovesTheOutputByAFewPercentAtMost) {
  const MoeShape s{8, 256, 128, 2};
  const MoeWeights w = make_random_weights(s, 91);
  const int64_t T = 16;
  const std::vector<float> x = testing::round_to_bf16(random_floats(size_t(T * s.hidden), 92));
  std::vector<float> bf16(x.size()), ceil(x.size()), ocp(x.size());
  ASSERT_TRUE(reference_forward(w.view(), x.data(), T, nullptr, bf16.data(), {.fp64 = true}).ok());
  ReferenceOptions o{.fp64 = true};
  o.activations = {ActivationFormat::kMxfp8, MxScaleRule::kTriton};
  ASSERT_TRUE(reference_forward(w.view(), x.data(), T, nullptr, ceil.data(), o).ok());
  o.activations.mxfp8_scale_rule = MxScaleRule::kOcp;
  ASSERT_TRUE(reference_forward(w.view(), x.data(), T, nullptr, ocp.data(), o).ok());
  const double e_ceil = rel_l2(ceil, bf16), e_ocp = rel_l2(ocp, bf16);
  // E4M3 keeps 3 mantissa bits: about 2^-5 relative rounding per element.
  EXPECT_GT(e_ceil, 1e-3);
  EXPECT_LT(e_ceil, 5e-2);
  EXPECT_GT(e_ocp, 1e-3);
  EXPECT_LT(e_ocp, 5e-2);
  EXPECT_GT(rel_l2(ceil, ocp), 0.0);  // the rules differ
}

TEST(Mxfp8Reference, NonFiniteActivationsStayNonFinite) {
  const MoeShape s{4, 64, 32, 1};
  const MoeWeights w = make_random_weights(s, 95);
  std::vector<float> x = random_floats(size_t(2 * s.hidden), 96), y(x.size());
  x[3] = INFINITY;  // token 0
  const Routing r = make_random_routing(2, s.experts, s.topk, 97);
  const RoutingView rv = r.view();
  ReferenceOptions o;
  o.activations.format = ActivationFormat::kMxfp8;
  ASSERT_TRUE(reference_forward(w.view(), x.data(), 2, &rv, y.data(), o).ok());
  for (int64_t h = 0; h < s.hidden; ++h) {
    EXPECT_TRUE(std::isnan(y[size_t(h)]));
    EXPECT_TRUE(std::isfinite(y[size_t(s.hidden + h)]));
  }
}

}  // namespace
}  // namespace mxmoe
