// Preparation on the device against the host's, byte for byte: every piece of
// the device image (codes, scales, biases, router; padding and prefetch rows
// included) that the device kernels write from device weights equals what the
// host executor prepares and uploads, for each GPU backend's plan (the
// Blackwell plans' images are built and compared on any GPU: only their GEMMs
// need Blackwell), at full and tensor-parallel shard shapes and small odd
// ones. Then the checks (a NaN scale in one expert, a non-finite bias, weights
// on another device) and a layer built from device pointers.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "mxmoe/dispatch.h"
#include "mxmoe/format.h"
#include "mxmoe/layer.h"
#include "support/test_support.h"

#ifndef MXMOE_WITH_CUDA
TEST(DevicePrepare, NotBuilt) { GTEST_SKIP() << "GPU test skipped: this build has no CUDA"; }
#else
#include "cuda/prepare/device_image.h"
#include "support/gpu_layers.h"

namespace mxmoe {
namespace {

using testing::DeviceWeights;

#define SKIP_WITHOUT_GPU()                                            \
  do {                                                                \
    std::string why;                                                  \
    if (!testing::gpu_available(&why)) GTEST_SKIP() << why;           \
  } while (0)

std::vector<uint8_t> download(const uint8_t* p, size_t n) {
  std::vector<uint8_t> out(n);
  EXPECT_EQ(cudaMemcpy(out.data(), p, n, cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

const char* kPieceNames[kImagePieces] = {"w13 codes", "w13 scales", "b13", "w2 codes", "w2 scales", "b2",
                                         "router weight", "router bias"};

// Piece by piece: device executor == host executor (the bytes host_image_piece
// gives, and what upload_image puts on the device).
void expect_same_image(BackendKind kind, const MoeShape& shape, uint64_t seed, bool large_scale) {
  SCOPED_TRACE(::testing::Message() << backend_name(kind) << " E=" << shape.experts << " H=" << shape.hidden
                                  << " I=" << shape.intermediate << " seed " << seed);
  MoeWeights w = make_random_weights(shape, seed);
  if (large_scale) w.w2_scales[w.w2_scales.size() / 3] = 130;  // sm90's two-multiply path
  const PreparePlan plan = make_plan(kind, shape);
  const ScaleImage scales = scale_image_of(kind);
  PreparedWeights prep;
  ASSERT_TRUE(prepare_weights(plan, w.view(), &prep).ok());
  DeviceWeights dw(w);
  smxx::DeviceImage on_device, uploaded;
  const Status st = smxx::prepare_image(plan, scales, dw.view, 0, "test", {}, &on_device);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_TRUE(smxx::upload_image(prep, scales, 0, "test", {}, &uploaded).ok());
  const auto sizes = image_piece_bytes(plan, scales, true);
  for (int i = 0; i < kImagePieces; ++i) {
    std::vector<uint8_t> want;
    ASSERT_TRUE(host_image_piece(prep, scales, ImagePiece(i), &want).ok());
    ASSERT_EQ(int64_t(want.size()), sizes[size_t(i)]) << kPieceNames[i];
    const std::vector<uint8_t> got = download(on_device.piece[size_t(i)], want.size());
    const std::vector<uint8_t> up = download(uploaded.piece[size_t(i)], want.size());
    size_t bad = 0;
    while (bad < want.size() && got[bad] == want[bad]) ++bad;
    ASSERT_EQ(bad, want.size()) << kPieceNames[i] << ": device byte " << bad << " is " << int(got[bad])
                                << ", the host's " << int(want[bad]) << " (of " << want.size() << ")";
    ASSERT_TRUE(up == want) << kPieceNames[i] << ": the uploaded host image differs";
  }
  EXPECT_EQ(on_device.w13_large_scales, uploaded.w13_large_scales);
  EXPECT_EQ(on_device.w2_large_scales, uploaded.w2_large_scales);
  EXPECT_EQ(on_device.w2_large_scales, large_scale);
}

const BackendKind kKinds[] = {BackendKind::kPortable, BackendKind::kSm90, BackendKind::kSm100, BackendKind::kSm120};

TEST(DevicePrepare, SmallOddShapesMatchTheHost) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 500;
  // H = 160 (K = 128 + a 32-wide tail of the portable pad to 192), I = 320
  // and 96; E = 3 makes sm90 pad H to 128.
  for (const MoeShape s : {MoeShape{4, 160, 320, 2}, MoeShape{3, 160, 96, 2}, MoeShape{5, 320, 224, 2}})
    for (BackendKind k : kKinds) {
      ++seed;
      expect_same_image(k, s, seed, seed % 2 == 0);
    }
}

TEST(DevicePrepare, GptOssAndShardShapesMatchTheHost) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 600;
  // The full expert and its tensor-parallel shards: I = 2880 / 1440 / 736 / 384.
  for (int64_t I : {2880, 1440, 736, 384})
    for (BackendKind k : kKinds) expect_same_image(k, {2, 2880, I, 2}, seed + uint64_t(I) + int(k), I == 736);
}

TEST(DevicePrepare, NaNScaleInOneExpertIsNamed) {
  SKIP_WITHOUT_GPU();
  const MoeShape shape{4, 160, 96, 2};
  MoeWeights w = make_random_weights(shape, 71);
  const int64_t blocks = shape.hidden / 32, row = 7, block = 3;
  w.w13_scales[size_t((2 * 2 * shape.intermediate + row) * blocks + block)] = 0xFF;  // expert 2
  DeviceWeights dw(w);
  smxx::DeviceImage img;
  const Status st =
      smxx::prepare_image(make_plan(BackendKind::kPortable, shape), ScaleImage::kPlanOrder, dw.view, 0, "t", {}, &img);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(), validate_weight_values(w.view()).message());
  EXPECT_NE(st.message().find("expert 2, row 7 (up 3), block 3"), std::string::npos) << st.message();
  EXPECT_EQ(img.storage, nullptr);
}

TEST(DevicePrepare, NonFiniteBiasIsNamed) {
  SKIP_WITHOUT_GPU();
  const MoeShape shape{4, 160, 96, 2};
  MoeWeights w = make_random_weights(shape, 72);
  w.b2[size_t(3 * shape.hidden + 17)] = 0x7F80;  // +Inf
  DeviceWeights dw(w);
  smxx::DeviceImage img;
  const Status st =
      smxx::prepare_image(make_plan(BackendKind::kSm90, shape), ScaleImage::kPlanOrder, dw.view, 0, "t", {}, &img);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(), validate_weight_values(w.view()).message());
  EXPECT_NE(st.message().find("b2: non-finite value (Inf) at [3, 17]"), std::string::npos) << st.message();
}

// A layer from device pointers gives the bits of one from host pointers (the
// same image), and T = 0 is a no-op.
TEST(DevicePrepare, LayerFromDevicePointersForwardsAsFromHost) {
  SKIP_WITHOUT_GPU();
  const MoeShape shape{8, 2880, 736, 4};
  const MoeWeights w = make_random_weights(shape, 73);
  DeviceWeights dw(w);
  for (BackendKind k : {BackendKind::kPortable, BackendKind::kSm90}) {
    std::string why;
    if (!backend_available(k, dispatch_input_for_device(backend_name(k), shape, 0), &why)) continue;
    SCOPED_TRACE(backend_name(k));
    std::unique_ptr<MoeLayer> from_device, from_host;
    LayerOptions o{.backend = backend_name(k), .device = 0};
    Status st = MoeLayer::create(dw.view, o, &from_device);
    ASSERT_TRUE(st.ok()) << st.message();
    ASSERT_TRUE(MoeLayer::create(w.view(), o, &from_host).ok());
    const int64_t T = 5;
    const std::vector<float> xf = testing::round_to_bf16(testing::random_floats(size_t(T * shape.hidden), 74));
    std::vector<uint16_t> xb(xf.size());
    for (size_t i = 0; i < xf.size(); ++i) xb[i] = float_to_bf16(xf[i]);
    void *x = nullptr, *y = nullptr, *ws = nullptr;
    const size_t wsb = std::max(from_device->workspace_bytes(T), from_host->workspace_bytes(T));
    ASSERT_EQ(cudaMalloc(&x, xb.size() * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&y, size_t(2 * T * shape.hidden * 4)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&ws, wsb), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(x, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    float* y2 = static_cast<float*>(y) + T * shape.hidden;
    LayerForwardArgs a{.x = static_cast<uint16_t*>(x), .tokens = 0, .y = y, .y_dtype = OutputDtype::kFp32};
    EXPECT_TRUE(from_device->forward(a, ws, wsb, nullptr).ok());  // T = 0
    a.tokens = T;
    ASSERT_TRUE(from_device->forward(a, ws, wsb, nullptr).ok());
    a.y = y2;
    ASSERT_TRUE(from_host->forward(a, ws, wsb, nullptr).ok());
    std::vector<float> got(size_t(2 * T * shape.hidden));
    ASSERT_EQ(cudaMemcpy(got.data(), y, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(std::memcmp(got.data(), got.data() + T * shape.hidden, size_t(T * shape.hidden) * 4), 0);
    EXPECT_GT(testing::l2_norm(got), 0.0);
    cudaFree(x);
    cudaFree(y);
    cudaFree(ws);
  }
}

TEST(DevicePrepare, WeightsElsewhereAreRefused) {
  SKIP_WITHOUT_GPU();
  const MoeShape shape{4, 160, 96, 2};
  const MoeWeights w = make_random_weights(shape, 75);
  DeviceWeights dw(w);
  std::unique_ptr<MoeLayer> layer;
  Status st = MoeLayer::create(dw.view, {.backend = "auto", .device = -1}, &layer);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("the weights are on CUDA device 0; the layer is asked for the CPU"), std::string::npos)
      << st.message();
  MoeWeightsView mixed = dw.view;
  mixed.b2 = w.b2.data();  // one tensor left in host memory
  st = MoeLayer::create(mixed, {.backend = "auto", .device = 0}, &layer);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("b2 in host memory"), std::string::npos) << st.message();
  int count = 0;
  cudaGetDeviceCount(&count);
  if (count > 1) {
    st = MoeLayer::create(dw.view, {.backend = "portable", .device = 1}, &layer);
    EXPECT_NE(st.message().find("the weights are on CUDA device 0; the layer is asked for CUDA device 1"),
              std::string::npos)
        << st.message();
  }
}

}  // namespace
}  // namespace mxmoe
#endif
