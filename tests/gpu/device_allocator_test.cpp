// Device memory from the caller's allocator (include/mxmoe/allocator.h) on a
// GPU: a layer built from host or device weights, through load_layers or as a
// tensor-parallel rank, takes every byte from the allocator given, on the
// stream given; holds device_bytes() of it once built; gives all of it back
// when destroyed, and everything taken so far when an allocation fails
// halfway. Its forwards are the bits of a layer on the default allocator.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "mxmoe/allocator.h"
#include "mxmoe/format.h"
#include "mxmoe/layer.h"
#include "mxmoe/load.h"
#include "mxmoe/parallel.h"
#include "support/counting_allocator.h"
#include "support/safetensors_writer.h"
#include "support/test_support.h"

#ifndef MXMOE_WITH_CUDA
TEST(DeviceAllocator, NotBuilt) { GTEST_SKIP() << "GPU test skipped: this build has no CUDA"; }
#else
#include "support/gpu_layers.h"

namespace mxmoe {
namespace {

using testing::CountingAllocator;
using testing::Dev;
using testing::gpu_backends;

std::shared_ptr<CountingAllocator> counting_cuda_malloc() {
  return std::make_shared<CountingAllocator>(cuda_malloc_allocator());
}

// A non-blocking stream for one test.
struct Stream {
  cudaStream_t s = nullptr;
  Stream() { EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess); }
  ~Stream() { cudaStreamDestroy(s); }
};

// y (fp32) of one forward at T tokens through the router, on the legacy stream.
std::vector<float> forward(const MoeLayer& layer, int64_t T, uint64_t seed) {
  const int64_t H = layer.shape().hidden;
  const std::vector<float> xf = testing::round_to_bf16(testing::random_floats(size_t(T * H), seed));
  std::vector<uint16_t> xb(xf.size());
  for (size_t i = 0; i < xf.size(); ++i) xb[i] = float_to_bf16(xf[i]);
  Dev x(xb.size() * 2), y(size_t(T * H) * 4), ws(layer.workspace_bytes(T));
  EXPECT_EQ(cudaMemcpy(x.p, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  LayerForwardArgs a{.x = x.as<uint16_t>(), .tokens = T, .y = y.p, .y_dtype = OutputDtype::kFp32};
  const Status st = layer.forward(a, ws.p, layer.workspace_bytes(T), nullptr);
  EXPECT_TRUE(st.ok()) << st.message();
  std::vector<float> out(size_t(T * H));
  EXPECT_EQ(cudaMemcpy(out.data(), y.p, out.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

void expect_all_given_back(const CountingAllocator& counting) {
  EXPECT_TRUE(counting.live().empty()) << counting.live().size() << " allocations (" << counting.live_bytes()
                                       << " bytes) not given back";
  const auto mismatches = counting.mismatches();
  EXPECT_TRUE(mismatches.empty()) << mismatches.front();
}

TEST(DeviceAllocator, LayerMemoryComesFromTheCallersAllocator) {
  MXMOE_SKIP_WITHOUT_GPU();
  for (const MoeShape shape : {MoeShape{8, 160, 96, 2}, MoeShape{8, 2880, 736, 4}}) {
    const MoeWeights w = make_random_weights(shape, 91);
    testing::DeviceWeights on_device(w);
    for (const std::string& backend : gpu_backends(shape))
      for (const bool from_device : {false, true}) {
        SCOPED_TRACE(::testing::Message() << backend << " E=" << shape.experts << " H=" << shape.hidden
                                          << " I=" << shape.intermediate << " weights in "
                                          << (from_device ? "device" : "host") << " memory, seed 91");
        const MoeWeightsView& view = from_device ? on_device.view : w.view();
        std::unique_ptr<MoeLayer> plain;
        ASSERT_TRUE(MoeLayer::create(view, {.backend = backend, .device = 0}, &plain).ok());
        auto counting = counting_cuda_malloc();
        Stream stream;
        const LayerOptions options{.backend = backend, .device = 0, .allocator = counting, .stream = stream.s};
        std::unique_ptr<MoeLayer> layer;
        const Status st = MoeLayer::create(view, options, &layer);
        ASSERT_TRUE(st.ok()) << st.message();
        // Once built, the layer holds its image alone: the staging copy and
        // the checks' results are back.
        const auto live = counting->live();
        EXPECT_EQ(counting->live_bytes(), layer->device_bytes());
        EXPECT_GE(live.size(), 6u);  // one allocation a tensor
        for (const auto& [p, t] : live) {
          EXPECT_EQ(t.device, 0);
          EXPECT_EQ(t.stream, stream.s);
          EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
        }
        EXPECT_GT(counting->allocations(), int(live.size()));  // the checks' buffer (and staging) came and went
        EXPECT_EQ(plain->device_bytes(), layer->device_bytes());
        for (const int64_t T : {1, 37}) {
          const std::vector<float> got = forward(*layer, T, 92), want = forward(*plain, T, 92);
          EXPECT_GT(testing::l2_norm(want), 0.0);
          EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << "T = " << T;
        }
        const int taken = counting->allocations();
        layer.reset();
        expect_all_given_back(*counting);
        // Every allocation fails in turn: create says so and keeps nothing.
        for (int fail = 0; fail < taken; ++fail) {
          counting->fail_at(fail);
          const Status failed = MoeLayer::create(view, options, &layer);
          EXPECT_EQ(failed.code(), StatusCode::kOutOfMemory) << "allocation " << fail << ": " << failed.message();
          EXPECT_EQ(layer, nullptr);
          expect_all_given_back(*counting);
        }
      }
  }
}

TEST(DeviceAllocator, LoadLayersTakesEveryByteFromIt) {
  MXMOE_SKIP_WITHOUT_GPU();
  const MoeShape shape{8, 320, 224, 2};
  testing::TempDir dir;
  std::vector<MoeWeights> layers;
  for (uint64_t i = 0; i < 3; ++i) layers.push_back(make_random_weights(shape, 95 + i));
  testing::write_hf_checkpoint(dir.path, layers);
  auto counting = counting_cuda_malloc();
  Stream stream;
  LoadOptions o;
  o.device = 0;
  o.allocator = counting;
  o.stream = stream.s;
  std::vector<std::unique_ptr<MoeLayer>> loaded;
  Status st = load_layers(dir.path.string(), {}, o, &loaded);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(loaded.size(), 3u);
  size_t held = 0;
  for (const auto& l : loaded) held += l->device_bytes();
  EXPECT_GT(held, 0u);
  EXPECT_EQ(counting->live_bytes(), held);  // the staging buffer is back
  for (const auto& [p, t] : counting->live()) EXPECT_EQ(t.stream, stream.s);
  const int taken = counting->allocations();
  loaded.clear();
  expect_all_given_back(*counting);
  for (int fail = 0; fail < taken; fail += 3) {  // the staging buffer, then each layer's
    counting->fail_at(fail);
    st = load_layers(dir.path.string(), {}, o, &loaded);
    EXPECT_EQ(st.code(), StatusCode::kOutOfMemory) << st.message();
    EXPECT_EQ(st.message().rfind("layer ", 0) == 0, fail > 0) << st.message();
    EXPECT_TRUE(loaded.empty());
    expect_all_given_back(*counting);
  }
}

TEST(DeviceAllocator, ParallelRanksTakeTheirBuffersFromIt) {
  MXMOE_SKIP_WITHOUT_GPU();
#ifndef MXMOE_WITH_NCCL
  GTEST_SKIP() << "GPU test skipped: this build has no NCCL";
#else
  const MoeShape shape{8, 160, 96, 2};
  const MoeWeights w = make_random_weights(shape, 97);
  for (const ParallelMode mode : {ParallelMode::kTensor, ParallelMode::kExpert}) {
    SCOPED_TRACE(parallel_mode_name(mode));
    auto counting = counting_cuda_malloc();
    std::unique_ptr<ParallelLayer> layer;
    ParallelConfig c{.mode = mode, .size = 1, .allocator = counting};
    const Status st = create_parallel_layer(w.view(), c, &layer);
    ASSERT_TRUE(st.ok()) << st.message();
    const std::vector<float> x = testing::random_floats(size_t(5 * shape.hidden), 98);
    std::vector<float> y(x.size());
    ASSERT_TRUE(layer->forward_host(x.data(), 5, nullptr, y.data()).ok());
    EXPECT_GT(testing::l2_norm(y), 0.0);
    EXPECT_GT(counting->live().size(), 6u);  // the shard's image and the rank's buffers
    layer.reset();
    expect_all_given_back(*counting);
  }
#endif
}

}  // namespace
}  // namespace mxmoe
#endif
