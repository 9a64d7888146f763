// The engine-facing MoeLayer on the CPU, for both host backends (cpu, the
// one auto picks without a GPU, and reference): forwards on host pointers
// against the fp64 reference on the same bytes, T = 0, row strides, both
// output dtypes, and the errors a caller's mistakes get.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "mxmoe/format.h"
#include "mxmoe/layer.h"
#include "mxmoe/reference.h"
#include "support/test_support.h"

namespace mxmoe {
namespace {

using testing::l2_norm;
using testing::random_floats;
using testing::rel_l2;
using testing::round_to_bf16;

constexpr MoeShape kShape{8, 160, 96, 2};  // H, I not multiples of 64

std::unique_ptr<MoeLayer> cpu_layer(const MoeWeights& w, const char* backend = "auto") {
  std::unique_ptr<MoeLayer> layer;
  const Status st = MoeLayer::create(w.view(), {.backend = backend, .device = -1}, &layer);
  EXPECT_TRUE(st.ok()) << st.message();
  return layer;
}

// x as bf16 rows `stride` elements apart (the gaps hold NaN, which a read of
// them would carry into y), and the same values as dense floats.
struct StridedX {
  std::vector<uint16_t> bits;
  std::vector<float> dense;
};
StridedX make_x(int64_t T, int64_t H, int64_t stride, uint64_t seed) {
  StridedX x;
  x.dense = round_to_bf16(random_floats(size_t(T * H), seed));
  x.bits.assign(size_t(T * stride), 0x7FC0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) x.bits[size_t(t * stride + h)] = float_to_bf16(x.dense[size_t(t * H + h)]);
  return x;
}

struct Case {
  int64_t tokens;
  bool caller_routing;
  OutputDtype y_dtype;
  int64_t stride_pad;
};

// Each test of LayerHost runs on both host backends.
class LayerHost : public ::testing::TestWithParam<const char*> {};
INSTANTIATE_TEST_SUITE_P(Backends, LayerHost, ::testing::Values("cpu", "reference"));

TEST(LayerCpu, AutoPicksTheCpuKernels) {
  const auto layer = cpu_layer(make_random_weights(kShape, 10));
  ASSERT_TRUE(layer);
  EXPECT_EQ(layer->backend(), BackendKind::kCpu);
  EXPECT_NE(layer->backend_reason().find(" kernels ("), std::string::npos) << layer->backend_reason();
}

TEST_P(LayerHost, MatchesTheReferenceOnTheSameBytes) {
  const MoeWeights w = make_random_weights(kShape, 11);
  const auto layer = cpu_layer(w, GetParam());
  ASSERT_TRUE(layer);
  EXPECT_EQ(backend_name(layer->backend()), std::string(GetParam()));
  EXPECT_EQ(layer->device(), -1);
  EXPECT_TRUE(layer->has_router());
  EXPECT_FALSE(layer->backend_reason().empty());
  const int64_t H = kShape.hidden;
  std::vector<uint8_t> ws(layer->workspace_bytes(37));
  for (const Case c : {Case{1, false, OutputDtype::kBf16, 0}, Case{3, true, OutputDtype::kFp32, 8},
                       Case{37, false, OutputDtype::kFp32, 24}, Case{37, true, OutputDtype::kBf16, 0},
                       Case{2, true, OutputDtype::kBf16, 64}}) {
    const uint64_t seed = 100 + uint64_t(c.tokens) + uint64_t(c.stride_pad);
    SCOPED_TRACE("T=" + std::to_string(c.tokens) + " routing=" + (c.caller_routing ? "caller" : "router") +
                 " y=" + (c.y_dtype == OutputDtype::kBf16 ? "bf16" : "fp32") +
                 " stride=H+" + std::to_string(c.stride_pad) + " seed=" + std::to_string(seed));
    const int64_t T = c.tokens, stride = H + c.stride_pad;
    const StridedX x = make_x(T, H, stride, seed);
    const Routing r = make_random_routing(T, kShape.experts, kShape.topk, seed + 1);
    const RoutingView rv = r.view();
    std::vector<float> ref(size_t(T * H));
    ASSERT_TRUE(reference_forward(w.view(), x.dense.data(), T, c.caller_routing ? &rv : nullptr, ref.data(),
                                  {.fp64 = true})
                    .ok());
    std::vector<float> y32(size_t(T * H), NAN);
    std::vector<uint16_t> y16(size_t(T * H), 0x7FC0);
    LayerForwardArgs a;
    a.x = x.bits.data();
    a.x_row_stride = c.stride_pad ? stride : 0;
    a.tokens = T;
    if (c.caller_routing) {
      a.topk_ids = r.ids.data();
      a.topk_weights = r.weights.data();
    }
    a.y_dtype = c.y_dtype;
    a.y = c.y_dtype == OutputDtype::kFp32 ? static_cast<void*>(y32.data()) : y16.data();
    const Status st = layer->forward(a, ws.data(), ws.size(), nullptr);
    ASSERT_TRUE(st.ok()) << st.message();
    if (c.y_dtype == OutputDtype::kBf16)
      for (size_t i = 0; i < y16.size(); ++i) y32[i] = bf16_to_float(y16[i]);
    EXPECT_GT(l2_norm(ref), 0.0);
    // fp32 out: the reference's is its fp64 result rounded once; cpu's adds
    // the 16-bit quantisation of the activations. bf16 out adds a rounding of y.
    const bool reference = layer->backend() == BackendKind::kReference;
    EXPECT_LE(rel_l2(y32, ref), c.y_dtype == OutputDtype::kBf16 ? 5e-3 : reference ? 1e-6 : 1e-4);
  }
}

TEST_P(LayerHost, NoTokensIsANoOp) {
  const MoeWeights w = make_random_weights(kShape, 12);
  const auto layer = cpu_layer(w, GetParam());
  ASSERT_TRUE(layer);
  EXPECT_EQ(layer->forward_workspace_bytes(0), 0u);
  float y = 42.f;
  LayerForwardArgs a;
  a.tokens = 0;
  a.y = &y;  // x may be null at T = 0
  ASSERT_TRUE(layer->forward(a, nullptr, 0, nullptr).ok());
  EXPECT_EQ(y, 42.f);
}

TEST_P(LayerHost, WorkspaceCoversEveryTokenCount) {
  const MoeWeights w = make_random_weights(kShape, 13);
  const auto layer = cpu_layer(w, GetParam());
  ASSERT_TRUE(layer);
  const size_t most = layer->workspace_bytes(50);
  for (int64_t t = 1; t <= 50; ++t) EXPECT_LE(layer->forward_workspace_bytes(t), most) << "T=" << t;
  EXPECT_EQ(layer->workspace_bytes(0), 0u);
}

// Each mistake gets InvalidArgument naming what is wrong, and y is not written.
TEST_P(LayerHost, RefusesBadForwards) {
  const MoeWeights w = make_random_weights(kShape, 14);
  const auto layer = cpu_layer(w, GetParam());
  ASSERT_TRUE(layer);
  const int64_t T = 3, H = kShape.hidden;
  const StridedX x = make_x(T, H, H, 15);
  Routing r = make_random_routing(T, kShape.experts, kShape.topk, 16);
  std::vector<uint16_t> y(size_t(T * H), 0x1234);
  std::vector<uint8_t> ws(layer->workspace_bytes(T));
  auto run = [&](LayerForwardArgs a, size_t ws_bytes = 0) {
    return layer->forward(a, ws.data(), ws_bytes ? ws_bytes : ws.size(), nullptr);
  };
  LayerForwardArgs good;
  good.x = x.bits.data();
  good.tokens = T;
  good.y = y.data();
  ASSERT_TRUE(run(good).ok());
  std::fill(y.begin(), y.end(), 0x1234);
  auto expect_refused = [&](const Status& st, const char* words) {
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(words), std::string::npos) << st.message();
    for (uint16_t v : y) ASSERT_EQ(v, 0x1234) << "y written by a refused forward";
  };
  LayerForwardArgs a = good;
  a.tokens = -1;
  expect_refused(run(a), "negative");
  a = good;
  a.x = nullptr;
  expect_refused(run(a), "null x");
  a = good;
  a.y = nullptr;
  expect_refused(run(a), "null y");
  a = good;
  a.topk_ids = r.ids.data();
  expect_refused(run(a), "together");
  a = good;
  a.x_row_stride = H - 32;
  expect_refused(run(a), "below H");
  expect_refused(run(good, 16), "workspace of 16 bytes");
  a = good;
  a.y_dtype = static_cast<OutputDtype>(7);
  expect_refused(run(a), "y_dtype");
  r.ids[4] = int32_t(kShape.experts);  // token 2, slot 0
  a = good;
  a.topk_ids = r.ids.data();
  a.topk_weights = r.weights.data();
  expect_refused(run(a), "token 2 slot 0 has expert id 8");
}

TEST_P(LayerHost, NeedsRoutingWithoutARouter) {
  MoeWeights w = make_random_weights(kShape, 17);
  w.router_weight.clear();
  w.router_bias.clear();
  const auto layer = cpu_layer(w, GetParam());
  ASSERT_TRUE(layer);
  EXPECT_FALSE(layer->has_router());
  const StridedX x = make_x(1, kShape.hidden, kShape.hidden, 18);
  std::vector<float> y(size_t(kShape.hidden));
  std::vector<uint8_t> ws(layer->workspace_bytes(1));
  LayerForwardArgs a{.x = x.bits.data(), .tokens = 1, .y = y.data(), .y_dtype = OutputDtype::kFp32};
  const Status st = layer->forward(a, ws.data(), ws.size(), nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("no router"), std::string::npos) << st.message();
}

Status create_on(const MoeWeightsView& v, const std::string& backend, int device) {
  std::unique_ptr<MoeLayer> layer;
  return MoeLayer::create(v, {.backend = backend, .device = device}, &layer);
}

TEST(LayerCpu, RefusesPoisonedWeights) {
  MoeWeights w = make_random_weights(kShape, 19);
  const int64_t blocks = kShape.hidden / kMxBlock;
  w.w13_scales[size_t((1 * 2 * kShape.intermediate + 5) * blocks + 3)] = kE8M0NaN;  // expert 1, row 5 (up 2), block 3
  Status st = create_on(w.view(), "auto", -1);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("w13 scales: byte 0xFF (NaN) at expert 1, row 5 (up 2), block 3 (elements 96..127)"),
            std::string::npos)
      << st.message();
  w = make_random_weights(kShape, 19);
  w.w2_scales.back() = kE8M0NaN;
  st = create_on(w.view(), "auto", -1);
  EXPECT_NE(st.message().find("w2 scales"), std::string::npos) << st.message();
  w = make_random_weights(kShape, 19);
  w.b2[size_t(2 * kShape.hidden + 7)] = 0x7F80;  // +Inf
  st = create_on(w.view(), "auto", -1);
  EXPECT_NE(st.message().find("b2: non-finite value (Inf) at [2, 7]"), std::string::npos) << st.message();
  w = make_random_weights(kShape, 19);
  w.router_bias[3] = 0xFFC1;  // NaN
  st = create_on(w.view(), "auto", -1);
  EXPECT_NE(st.message().find("router bias: non-finite value (NaN) at [0, 3]"), std::string::npos) << st.message();
  w = make_random_weights(kShape, 19);
  w.router_bias.clear();
  st = create_on(w.view(), "auto", -1);
  EXPECT_NE(st.message().find("router weight and bias"), std::string::npos) << st.message();
}

TEST(LayerCpu, RefusesBadOptions) {
  const MoeWeights w = make_random_weights(kShape, 20);
  Status st = create_on(w.view(), "bogus", -1);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("bogus"), std::string::npos) << st.message();
  st = create_on(w.view(), "portable", -1);  // a GPU backend for a CPU layer
  EXPECT_EQ(st.code(), StatusCode::kUnsupported) << st.message();
  st = create_on(w.view(), "auto", -2);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("device -2"), std::string::npos) << st.message();
  st = create_on(w.view(), "auto", 64);  // no such device on any machine we run
  EXPECT_EQ(st.code(), StatusCode::kUnsupported) << st.message();
  EXPECT_NE(st.message().find("CUDA device 64"), std::string::npos) << st.message();
  st = create_on(w.view(), "cpu", 64);  // experts in host memory for a device that does not exist
  EXPECT_EQ(st.code(), StatusCode::kUnsupported) << st.message();
  EXPECT_NE(st.message().find("CUDA"), std::string::npos) << st.message();
  MoeWeightsView v = w.view();
  v.shape.hidden = 100;
  st = create_on(v, "auto", -1);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
}

}  // namespace
}  // namespace mxmoe
