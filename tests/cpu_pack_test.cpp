// The cpu backend's one-pass packing (src/cpu/cpu_pack.h) against the layout's
// definition: prepare_weights under the cpu plan, then swizzle_codes /
// swizzle_scales (which tests/swizzle_test.cpp checks element by element),
// compared as bytes with atol 0. Shapes at the edges: H, I of 3 to 90 MX
// blocks (the scale transposes take 16 blocks at a time: tails alone, whole
// transposes and both), odd E, every source w13 layout; a 0xFF scale in a
// whole transpose and in a tail, and a non-finite bias or router value, each
// rejected with validate_weight_values' message.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cpu/cpu_pack.h"
#include "mxmoe/format.h"
#include "mxmoe/layer.h"
#include "mxmoe/prepare.h"

namespace mxmoe {
namespace {

const MoeShape kShapes[] = {{3, 160, 96, 2}, {3, 160, 320, 2}, {2, 544, 736, 2}, {1, 2880, 2880, 1}};
const W13Layout kLayouts[] = {W13Layout::kInterleaved, W13Layout::kStackedUpGate, W13Layout::kStackedGateUp,
                              W13Layout::kBlockedGateUp16};

// `w` re-laid-out with its w13 rows in `layout` (a reference plan pads nothing
// at these shapes, so the rows are the same values in another order).
PreparedWeights in_layout(const MoeWeights& w, W13Layout layout) {
  PreparePlan p = make_plan(BackendKind::kReference, w.shape);
  p.w13_layout = layout;
  update_extents(&p);
  PreparedWeights out;
  EXPECT_TRUE(prepare_weights(p, w.view(), &out).ok());
  return out;
}

std::vector<uint8_t> bytes(const cpu::HostBuffer& b) { return {b.data(), b.data() + b.size()}; }

std::vector<uint8_t> swizzled(bool codes, const std::vector<uint8_t>& dense, int64_t rows, int64_t cols) {
  std::vector<uint8_t> out(dense.size());
  const Status st = codes ? swizzle_codes(WeightSwizzle::kCpuRowGroups16, dense.data(), rows, cols, out.data())
                          : swizzle_scales(WeightSwizzle::kCpuRowGroups16, dense.data(), rows, cols, out.data());
  EXPECT_TRUE(st.ok()) << st.message();
  return out;
}

TEST(CpuPack, EqualsPrepareWeightsThenSwizzle) {
  uint64_t seed = 300;
  for (const MoeShape& s : kShapes)
    for (W13Layout layout : kLayouts) {
      if (s.hidden == 2880 && layout != W13Layout::kInterleaved) continue;  // the checkpoint's, at full size
      SCOPED_TRACE(::testing::Message() << "E " << s.experts << " H " << s.hidden << " I " << s.intermediate
                                        << " source layout " << int(layout) << " seed " << seed);
      const MoeWeights original = make_random_weights(s, seed++);
      const PreparedWeights source = in_layout(original, layout);
      const PreparePlan plan = make_plan(BackendKind::kCpu, s);
      PreparedWeights want;
      ASSERT_TRUE(prepare_weights(plan, source.view(), &want).ok());
      cpu::PackedWeights got;
      const Status st = cpu::pack_cpu_weights(plan, source.view(), &got);
      ASSERT_TRUE(st.ok()) << st.message();
      const MoeWeights& p = want.weights;
      const int64_t rows13 = s.experts * 2 * s.intermediate, rows2 = s.experts * s.hidden;
      EXPECT_EQ(bytes(got.w13_codes), swizzled(true, p.w13_codes, rows13, s.hidden));
      EXPECT_EQ(bytes(got.w13_scales), swizzled(false, p.w13_scales, rows13, s.hidden));
      EXPECT_EQ(bytes(got.w2_codes), swizzled(true, p.w2_codes, rows2, s.intermediate));
      EXPECT_EQ(bytes(got.w2_scales), swizzled(false, p.w2_scales, rows2, s.intermediate));
      EXPECT_EQ(got.b13, p.b13);
      EXPECT_EQ(got.b2, p.b2);
      EXPECT_EQ(got.router_weight, p.router_weight);
      EXPECT_EQ(got.router_bias, p.router_bias);
    }
}

// Each bad value is found by the packing pass and named as the layer's value
// check names it.
TEST(CpuPack, BadValuesGetTheValueChecksMessage) {
  const MoeShape s{3, 544, 160, 2};  // w13: 17 scale blocks (a transpose and a tail); w2: 5 (a tail)
  const MoeWeights clean = make_random_weights(s, 41);
  const PreparePlan plan = make_plan(BackendKind::kCpu, s);
  struct Poison {
    const char* what;
    void (*apply)(MoeWeights*);
  };
  const Poison cases[] = {
      {"w13 scale in a whole transpose", [](MoeWeights* w) { w->w13_scales[size_t(1 * 320 * 17 + 37 * 17 + 9)] = 0xFF; }},
      {"w13 scale in a tail", [](MoeWeights* w) { w->w13_scales[size_t(2 * 320 * 17 + 300 * 17 + 16)] = 0xFF; }},
      {"w2 scale", [](MoeWeights* w) { w->w2_scales[size_t(2 * 544 * 5 + 543 * 5 + 4)] = 0xFF; }},
      {"b13 Inf", [](MoeWeights* w) { w->b13[size_t(1 * 320 + 5)] = 0x7F80; }},
      {"b2 NaN", [](MoeWeights* w) { w->b2[size_t(2 * 544 + 100)] = 0xFFC1; }},
      {"router NaN", [](MoeWeights* w) { w->router_weight[size_t(543)] = 0x7FC0; }},
  };
  for (const Poison& c : cases) {
    SCOPED_TRACE(c.what);
    MoeWeights w = clean;
    c.apply(&w);
    const Status want = validate_weight_values(w.view());
    ASSERT_FALSE(want.ok());
    cpu::PackedWeights got;
    const Status st = cpu::pack_cpu_weights(plan, w.view(), &got);
    EXPECT_FALSE(st.ok());
    EXPECT_EQ(st.message(), want.message());
  }
  cpu::PackedWeights got;
  EXPECT_TRUE(cpu::pack_cpu_weights(plan, clean.view(), &got).ok());
}

TEST(CpuPack, OnlyTheCpuPlanOfTheShape) {
  const MoeShape s{2, 160, 96, 2};
  const MoeWeights w = make_random_weights(s, 5);
  cpu::PackedWeights got;
  EXPECT_FALSE(cpu::pack_cpu_weights(make_plan(BackendKind::kPortable, s), w.view(), &got).ok());
  EXPECT_FALSE(cpu::pack_cpu_weights(make_plan(BackendKind::kCpu, {2, 160, 128, 2}), w.view(), &got).ok());
}

}  // namespace
}  // namespace mxmoe
