// Preparation plans and prepared weights: bytes, extents, and the reference
// forward on prepared views.
#include <algorithm>
#include <cstring>
#include <iostream>
#include <tuple>

#include <gtest/gtest.h>

#include "mxmoe/format.h"
#include "mxmoe/prepare.h"
#include "mxmoe/reference.h"
#include "support/prepare_checks.h"
#include "support/test_support.h"

namespace mxmoe {
namespace {

using testing::ExpectedSlice;

struct HI {
  int64_t h, i;
};
// Edges: 2880 % 128 = 64 (sm90 pads H and I), 736 % 64 = 32 (portable pads I).
const HI kShapes[] = {{160, 160}, {320, 224}, {2880, 2880}, {2880, 736}};
const W13Layout kLayouts[] = {W13Layout::kInterleaved, W13Layout::kStackedUpGate, W13Layout::kStackedGateUp,
                              W13Layout::kInterleavedChunkOrder, W13Layout::kBlockedGateUp16};

// Few experts at 2880 keep the sweep fast; the copy loops do not depend on E
// beyond the expert offset, which the smaller shapes cover with 4.
int64_t experts_for(const HI& s) { return s.h * s.i >= 2880 * 2880 ? 1 : s.h >= 2880 ? 2 : 4; }

// Weights per shape index, generated once (seeded: 1000 + index).
const MoeWeights& original_weights(int shape_index) {
  static std::vector<MoeWeights> cache(std::size(kShapes));
  MoeWeights& w = cache[size_t(shape_index)];
  if (w.w13_codes.empty()) {
    const HI s = kShapes[shape_index];
    std::cout << "weights seed " << 1000 + shape_index << "\n";
    w = make_random_weights({experts_for(s), s.h, s.i, 1}, 1000 + uint64_t(shape_index));
  }
  return w;
}

PreparePlan plan_with_layout(BackendKind b, const MoeShape& shape, W13Layout layout) {
  PreparePlan p = make_plan(b, shape);
  p.w13_layout = layout;
  update_extents(&p);
  return p;
}

TEST(Plan, PortableLayoutIsDenseInterleavedAt64) {
  const PreparePlan p = make_plan(BackendKind::kPortable, {4, 2880, 736, 4});
  EXPECT_EQ(p.hidden_padded, 2880);
  EXPECT_EQ(p.intermediate_padded, 768);
  EXPECT_EQ(p.w13_layout, W13Layout::kInterleaved);
  EXPECT_EQ(p.prefetch_rows, 0);
  EXPECT_EQ(p.w13_codes_bytes, 4 * 2 * 768 * 2880 / 2);
  EXPECT_EQ(p.w13_scales_bytes, 4 * 2 * 768 * 2880 / 32);
  EXPECT_EQ(p.w2_codes_bytes, 4 * 2880 * 768 / 2);
  EXPECT_EQ(p.w2_scales_bytes, 4 * 2880 * 768 / 32);
}

TEST(Plan, Sm90PadsToWhole64WideChunks) {
  // The triton_kernels Hopper bug: 90 scale columns, 128-wide K tiles walk 92.
  // sm90 walks 2880 as 22 chunks of 128 and one of 64: nothing to pad.
  const PreparePlan p = make_plan(BackendKind::kSm90, kGptOss20b);
  EXPECT_EQ(p.hidden_padded, 2880);
  EXPECT_EQ(p.intermediate_padded, 2880);
  // The portable kernel's words, a 128-row tile's groups interleaved by chunk
  // (its decode path runs on these weights), w13's pairs in the wgmma K order
  // of each chunk, and no over-read: the producer requests only the chunks of
  // its tiles.
  EXPECT_EQ(p.w13_layout, W13Layout::kInterleavedChunkOrder);
  EXPECT_EQ(p.swizzle, WeightSwizzle::kMmaRowTiles128);
  EXPECT_EQ(p.prefetch_rows, 0);
  EXPECT_EQ(p.w13_codes_bytes, 32 * 2 * 2880 * 2880 / 2);
  EXPECT_EQ(p.w2_scales_bytes, 32 * 2880 * 2880 / 32);
  EXPECT_EQ(p.prepared_bytes(), original_bytes(kGptOss20b));
  const PreparePlan tp = make_plan(BackendKind::kSm90, {4, 320, 224, 4});
  EXPECT_EQ(tp.hidden_padded, 320);
  EXPECT_EQ(tp.intermediate_padded, 256);
  // The layout's 128-row tiles run over all E * Hp rows of w2: an odd E pads
  // H = 2880 (22.5 tiles an expert) to 2944.
  EXPECT_EQ(make_plan(BackendKind::kSm90, {3, 2880, 2880, 2}).hidden_padded, 2944);
  EXPECT_EQ(make_plan(BackendKind::kSm90, {3, 2880, 2880, 2}).intermediate_padded, 2880);
  EXPECT_EQ(make_plan(BackendKind::kSm90, {3, 2816, 2880, 2}).hidden_padded, 2816);
  EXPECT_EQ(make_plan(BackendKind::kCpu, kGptOss20b).prepared_bytes(), original_bytes(kGptOss20b));
}

// Walks every tile each backend's loops may load (its K step and N tile are its
// alignment; one extra N tile per prefetch) and checks the furthest byte lies
// inside the allocation, and that no K tile crosses into the next row.
TEST(Plan, EveryTileReadIsInsideTheExtent) {
  for (BackendKind b : kAllBackends)
    for (const HI& s : kShapes)
      for (int64_t E : {1, 3}) {
        SCOPED_TRACE(::testing::Message() << backend_name(b) << " H=" << s.h << " I=" << s.i << " E=" << E);
        const PreparePlan p = make_plan(b, {E, s.h, s.i, 1});
        const BackendAlignment a = backend_alignment(b);
        struct T {
          int64_t rows, cols, n_tile, k_tile, code_bytes, scale_bytes;
        };
        const T tensors[] = {
            {2 * p.intermediate_padded, p.hidden_padded, a.intermediate, a.hidden, p.w13_codes_bytes, p.w13_scales_bytes},
            {p.hidden_padded, p.intermediate_padded, a.hidden, a.intermediate, p.w2_codes_bytes, p.w2_scales_bytes}};
        for (const T& t : tensors) {
          EXPECT_EQ(t.cols % t.k_tile, 0);
          EXPECT_EQ(t.rows % t.n_tile, 0);
          int64_t last_code = 0, last_scale = 0;
          for (int64_t n = 0; n < t.rows; n += t.n_tile)
            for (int64_t k = 0; k < t.cols; k += t.k_tile) {
              // Last row loaded by this tile, prefetch of the following rows included.
              const int64_t row = (E - 1) * t.rows + n + t.n_tile - 1 + p.prefetch_rows;
              last_code = std::max(last_code, row * t.cols / 2 + (k + t.k_tile) / 2 - 1);
              last_scale = std::max(last_scale, row * t.cols / 32 + (k + t.k_tile) / 32 - 1);
            }
          EXPECT_LT(last_code, t.code_bytes);
          EXPECT_LT(last_scale, t.scale_bytes);
        }
      }
}

class Prepared : public ::testing::TestWithParam<std::tuple<BackendKind, int, W13Layout>> {};

TEST_P(Prepared, BytesAndDequantizedValuesMatchTheOriginal) {
  const auto [b, shape_index, layout] = GetParam();
  const HI s = kShapes[shape_index];
  const MoeWeights& w = original_weights(shape_index);
  const MoeShape shape = w.shape;
  PreparedWeights p;
  ASSERT_TRUE(prepare_weights(plan_with_layout(b, shape, layout), w.view(), &p).ok());
  EXPECT_EQ(p.weights.w13_layout, layout);
  testing::expect_prepared_bytes(w, p);
  testing::expect_same_dequantized(w, p);
}

TEST_P(Prepared, ReferenceForwardIsBitExact) {
  const auto [b, shape_index, layout] = GetParam();
  const HI s = kShapes[shape_index];
  const MoeWeights& w = original_weights(shape_index);
  const MoeShape shape = w.shape;
  const uint64_t seed = 2000 + uint64_t(shape_index);
  std::cout << "input seed " << seed << "\n";
  PreparedWeights p;
  ASSERT_TRUE(prepare_weights(plan_with_layout(b, shape, layout), w.view(), &p).ok());
  const int64_t T = 3, Hp = p.plan.hidden_padded;
  const auto x = testing::random_floats(size_t(T * s.h), seed + 1);
  const auto xp = testing::pad_columns(x, T, s.h, Hp);
  const Routing r = make_random_routing(T, shape.experts, shape.topk, seed + 2);
  const ReferenceOptions fp64{.fp64 = true};
  const RoutingView routed = r.view();
  for (const RoutingView* rv : {static_cast<const RoutingView*>(nullptr), &routed}) {
    std::vector<float> y(size_t(T * s.h)), yp(size_t(T * Hp), -1.0f);
    ASSERT_TRUE(reference_forward(w.view(), x.data(), T, rv, y.data(), fp64).ok());
    ASSERT_TRUE(reference_forward(p.view(), xp.data(), T, rv, yp.data(), fp64).ok());
    ASSERT_GT(testing::l2_norm(y), 0.0);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < Hp; ++h) {
        const float want = h < s.h ? y[size_t(t * s.h + h)] : 0.0f;
        ASSERT_EQ(yp[size_t(t * Hp + h)], want) << "t=" << t << " h=" << h << (rv ? " routed" : " router");
      }
  }
}

std::string param_name(const ::testing::TestParamInfo<Prepared::ParamType>& info) {
  const auto [b, si, layout] = info.param;
  const char* l = layout == W13Layout::kInterleaved             ? "interleaved"
                  : layout == W13Layout::kStackedUpGate         ? "upgate"
                  : layout == W13Layout::kInterleavedChunkOrder ? "chunkorder"
                  : layout == W13Layout::kBlockedGateUp16       ? "gateup16"
                                                                : "gateup";
  return std::string(backend_name(b)) + "_H" + std::to_string(kShapes[si].h) + "_I" +
         std::to_string(kShapes[si].i) + "_" + l;
}

// Every backend's plan on every shape; the layouts it does not use by default
// on the small shapes only (layout code does not depend on the size).
std::vector<Prepared::ParamType> all_plans() {
  std::vector<Prepared::ParamType> out;
  for (BackendKind b : kAllBackends)
    for (int si = 0; si < int(std::size(kShapes)); ++si)
      for (W13Layout l : kLayouts) {
        const HI s = kShapes[si];
        const PreparePlan p = make_plan(b, {1, s.h, s.i, 1});
        const bool own = p.w13_layout == l;
        const bool fits = l != W13Layout::kInterleavedChunkOrder || p.intermediate_padded % 64 == 0;
        if (own || (s.h < 2880 && fits)) out.emplace_back(b, si, l);
      }
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllPlans, Prepared, ::testing::ValuesIn(all_plans()), param_name);

TEST(PrepareErrors, ShapeMismatchAndStalePlansAreRejected) {
  const MoeShape shape{2, 160, 160, 2};
  const MoeWeights w = make_random_weights(shape, 7);
  PreparedWeights p;
  EXPECT_FALSE(prepare_weights(make_plan(BackendKind::kPortable, {2, 160, 224, 2}), w.view(), &p).ok());
  PreparePlan stale = make_plan(BackendKind::kPortable, shape);
  stale.prefetch_rows = 64;  // extents not recomputed
  EXPECT_EQ(prepare_weights(stale, w.view(), &p).code(), StatusCode::kInvalidArgument);
  update_extents(&stale);
  EXPECT_TRUE(prepare_weights(stale, w.view(), &p).ok());
  testing::expect_prepared_bytes(w, p);
}

TEST(PrepareErrors, ChunkOrderNeedsWholeHalfChunks) {
  // I = 224 pads to 224 on the cpu plan: 224 % 64 = 32, no 64-wide last chunk.
  const MoeShape shape{2, 160, 224, 2};
  const MoeWeights w = make_random_weights(shape, 13);
  PreparedWeights p;
  const PreparePlan plan = plan_with_layout(BackendKind::kCpu, shape, W13Layout::kInterleavedChunkOrder);
  ASSERT_EQ(plan.intermediate_padded % 64, 32);
  EXPECT_EQ(prepare_weights(plan, w.view(), &p).code(), StatusCode::kInvalidArgument);
}

TEST(PrepareErrors, PreparingAStackedViewAgainGivesTheSameBytes) {
  // The source may itself be prepared (stacked, padded strides): re-preparing
  // it into the interleaved portable plan equals preparing the original.
  const MoeShape shape{3, 320, 224, 2};
  const MoeWeights w = make_random_weights(shape, 11);
  PreparedWeights stacked, direct, again;
  ASSERT_TRUE(prepare_weights(make_plan(BackendKind::kCpu, shape), w.view(), &direct).ok());
  PreparePlan sp = plan_with_layout(BackendKind::kCpu, shape, W13Layout::kStackedGateUp);
  ASSERT_TRUE(prepare_weights(sp, w.view(), &stacked).ok());
  ASSERT_TRUE(prepare_weights(make_plan(BackendKind::kCpu, shape), stacked.view(), &again).ok());
  EXPECT_TRUE(again.weights.w13_codes == direct.weights.w13_codes);
  EXPECT_TRUE(again.weights.w13_scales == direct.weights.w13_scales);
  EXPECT_TRUE(again.weights.b13 == direct.weights.b13);
}

}  // namespace
}  // namespace mxmoe
