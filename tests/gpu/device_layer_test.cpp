// The engine-facing MoeLayer on a GPU (every GPU backend this build and
// device can run): device pointers against the fp64 reference on the same
// bytes, bf16 and fp32 y, row strides, T = 0, out-of-range ids confined to
// their tokens, CUDA-graph capture, and the pointer checks.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "mxmoe/dispatch.h"
#include "mxmoe/format.h"
#include "mxmoe/layer.h"
#include "mxmoe/reference.h"
#include "support/test_support.h"

#ifndef MXMOE_WITH_CUDA
TEST(LayerGpu, NotBuilt) { GTEST_SKIP() << "GPU test skipped: this build has no CUDA"; }
#else
#include "support/gpu_layers.h"
namespace mxmoe {
namespace {

using testing::l2_norm;
using testing::random_floats;
using testing::rel_l2;
using testing::round_to_bf16;
using testing::Dev;
using testing::gpu_backends;

struct Case {
  MoeShape shape;
  int64_t tokens;
  bool caller_routing;
  OutputDtype y_dtype;
  int64_t stride_pad;
};

// One forward of `layer` on fresh inputs; returns y as floats and the reference.
void run_case(const MoeLayer& layer, const MoeWeights& w, const Case& c, uint64_t seed) {
  const MoeShape& s = c.shape;
  const int64_t T = c.tokens, H = s.hidden, stride = H + c.stride_pad;
  SCOPED_TRACE(std::string(backend_name(layer.backend())) + " " + testing::describe_case(s, T, testing::RouteMode::kRandom) +
               " routing=" + (c.caller_routing ? "caller" : "router") +
               " y=" + (c.y_dtype == OutputDtype::kBf16 ? "bf16" : "fp32") + " stride=H+" +
               std::to_string(c.stride_pad) + " seed=" + std::to_string(seed));
  const std::vector<float> x = round_to_bf16(random_floats(size_t(T * H), seed));
  std::vector<uint16_t> xb(size_t(T * stride), 0x7FC0);  // NaN between the rows
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) xb[size_t(t * stride + h)] = float_to_bf16(x[size_t(t * H + h)]);
  const Routing r = make_random_routing(T, s.experts, s.topk, seed + 1);
  const RoutingView rv = r.view();
  std::vector<float> ref(size_t(T * H));
  ASSERT_TRUE(reference_forward(w.view(), x.data(), T, c.caller_routing ? &rv : nullptr, ref.data(), {.fp64 = true})
                  .ok());
  const size_t ybytes = size_t(T * H) * (c.y_dtype == OutputDtype::kBf16 ? 2 : 4);
  Dev xd(xb.size() * 2), yd(ybytes), ids(r.ids.size() * 4), rw(r.weights.size() * 4);
  Dev ws(layer.workspace_bytes(T));
  ASSERT_EQ(cudaMemcpy(xd.p, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(ids.p, r.ids.data(), r.ids.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(rw.p, r.weights.data(), r.weights.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(yd.p, 0xFF, ybytes), cudaSuccess);  // NaN wherever the forward writes nothing
  // The copies and the memset above are on the legacy stream (a pageable
  // copy may return before its DMA lands, the memset is asynchronous), which
  // a non-blocking stream does not wait for.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  LayerForwardArgs a{.x = xd.as<uint16_t>(), .x_row_stride = c.stride_pad ? stride : 0, .tokens = T,
                     .y = yd.p, .y_dtype = c.y_dtype};
  if (c.caller_routing) {
    a.topk_ids = ids.as<int32_t>();
    a.topk_weights = rw.as<float>();
  }
  const Status st = layer.forward(a, ws.p, layer.workspace_bytes(T), stream);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStreamDestroy(stream);
  std::vector<float> y(size_t(T * H));
  if (c.y_dtype == OutputDtype::kFp32) {
    ASSERT_EQ(cudaMemcpy(y.data(), yd.p, ybytes, cudaMemcpyDeviceToHost), cudaSuccess);
  } else {
    std::vector<uint16_t> yb(size_t(T * H));
    ASSERT_EQ(cudaMemcpy(yb.data(), yd.p, ybytes, cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t i = 0; i < yb.size(); ++i) y[i] = bf16_to_float(yb[i]);
  }
  EXPECT_GT(l2_norm(ref), 0.0);
  EXPECT_LE(rel_l2(y, ref), 1e-2);
}

TEST(LayerGpu, MatchesTheReferenceOnEveryBackend) {
  MXMOE_SKIP_WITHOUT_GPU();
  const std::vector<MoeShape> shapes = {{8, 160, 96, 2}, {32, 2880, 736, 4}, {8, 2880, 2880, 4}};
  for (const MoeShape& s : shapes) {
    const MoeWeights w = make_random_weights(s, 31);
    for (const std::string& b : gpu_backends(s)) {
      std::unique_ptr<MoeLayer> layer;
      const Status cs = MoeLayer::create(w.view(), {.backend = b, .device = 0}, &layer);
      ASSERT_TRUE(cs.ok()) << b << ": " << cs.message();
      EXPECT_EQ(layer->device(), 0);
      for (const Case c : {Case{s, 1, false, OutputDtype::kBf16, 0}, Case{s, 3, true, OutputDtype::kFp32, 8},
                           Case{s, 37, true, OutputDtype::kBf16, 64}, Case{s, 129, false, OutputDtype::kFp32, 0},
                           Case{s, 600, true, OutputDtype::kBf16, 0}})
        run_case(*layer, w, c, uint64_t(s.hidden + c.tokens));
    }
  }
}

// Tokens whose routing names an expert outside [0, E) get NaN rows; every
// other token's row is what it is with valid routing.
TEST(LayerGpu, OutOfRangeIdsPoisonOnlyTheirTokens) {
  MXMOE_SKIP_WITHOUT_GPU();
  const MoeShape s{16, 320, 160, 4};
  const MoeWeights w = make_random_weights(s, 41);
  for (const std::string& b : gpu_backends(s))
    for (const int64_t T : {int64_t(1), int64_t(5), int64_t(300)}) {
      SCOPED_TRACE(b + " T=" + std::to_string(T));
      std::unique_ptr<MoeLayer> layer;
      ASSERT_TRUE(MoeLayer::create(w.view(), {.backend = b, .device = 0}, &layer).ok());
      const int64_t H = s.hidden;
      const std::vector<float> x = round_to_bf16(random_floats(size_t(T * H), 42));
      std::vector<uint16_t> xb(x.size());
      for (size_t i = 0; i < x.size(); ++i) xb[i] = float_to_bf16(x[i]);
      Routing r = make_random_routing(T, s.experts, s.topk, 43);
      const std::vector<float> ref_x = x;
      const RoutingView good = r.view();
      std::vector<float> ref(size_t(T * H));
      ASSERT_TRUE(reference_forward(w.view(), ref_x.data(), T, &good, ref.data(), {.fp64 = true}).ok());
      std::vector<bool> bad(size_t(T), false);
      const int32_t wrong[] = {int32_t(s.experts), -1, 1 << 30};
      for (int64_t t = 0; t < T; t += 3) {
        r.ids[size_t(t * s.topk + t % s.topk)] = wrong[t % 3];
        bad[size_t(t)] = true;
      }
      Dev xd(xb.size() * 2), yd(size_t(T * H) * 4), ids(r.ids.size() * 4), rw(r.weights.size() * 4),
          ws(layer->workspace_bytes(T));
      ASSERT_EQ(cudaMemcpy(xd.p, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(ids.p, r.ids.data(), r.ids.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(rw.p, r.weights.data(), r.weights.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
      LayerForwardArgs a{.x = xd.as<uint16_t>(), .tokens = T, .topk_ids = ids.as<int32_t>(),
                         .topk_weights = rw.as<float>(), .y = yd.p, .y_dtype = OutputDtype::kFp32};
      ASSERT_TRUE(layer->forward(a, ws.p, layer->workspace_bytes(T), nullptr).ok());
      std::vector<float> y(size_t(T * H));
      ASSERT_EQ(cudaMemcpy(y.data(), yd.p, y.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      std::vector<float> kept, kept_ref;
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h) {
          const float v = y[size_t(t * H + h)];
          if (bad[size_t(t)]) {
            ASSERT_TRUE(std::isnan(v)) << "token " << t << " column " << h << " = " << v;
          } else {
            kept.push_back(v);
            kept_ref.push_back(ref[size_t(t * H + h)]);
          }
        }
      if (!kept.empty()) {
        EXPECT_GT(l2_norm(kept_ref), 0.0);
        EXPECT_LE(rel_l2(kept, kept_ref), 1e-2);
      }
    }
}

TEST(LayerGpu, NoTokensLaunchesNothing) {
  MXMOE_SKIP_WITHOUT_GPU();
  const MoeShape s{8, 160, 96, 2};
  const MoeWeights w = make_random_weights(s, 51);
  for (const std::string& b : gpu_backends(s)) {
    std::unique_ptr<MoeLayer> layer;
    ASSERT_TRUE(MoeLayer::create(w.view(), {.backend = b, .device = 0}, &layer).ok());
    LayerForwardArgs a;  // null pointers, T = 0
    const Status st = layer->forward(a, nullptr, 0, nullptr);
    EXPECT_TRUE(st.ok()) << b << ": " << st.message();
  }
}

TEST(LayerGpu, ForwardCapturesInAGraph) {
  MXMOE_SKIP_WITHOUT_GPU();
  const MoeShape s{32, 2880, 736, 4};
  const MoeWeights w = make_random_weights(s, 61);
  for (const std::string& b : gpu_backends(s))
    for (const int64_t T : {int64_t(1), int64_t(512)}) {
      SCOPED_TRACE(b + " T=" + std::to_string(T));
      std::unique_ptr<MoeLayer> layer;
      ASSERT_TRUE(MoeLayer::create(w.view(), {.backend = b, .device = 0}, &layer).ok());
      const int64_t H = s.hidden;
      std::vector<uint16_t> xb(size_t(T * H));
      const std::vector<float> x = random_floats(xb.size(), 62);
      for (size_t i = 0; i < x.size(); ++i) xb[i] = float_to_bf16(x[i]);
      Dev xd(xb.size() * 2), y_eager(xb.size() * 2), y_graph(xb.size() * 2), ws(layer->workspace_bytes(T));
      ASSERT_EQ(cudaMemcpy(xd.p, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the legacy stream's copy, before the non-blocking stream
      cudaStream_t stream = nullptr;
      ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
      LayerForwardArgs a{.x = xd.as<uint16_t>(), .tokens = T, .y = y_eager.p};
      ASSERT_TRUE(layer->forward(a, ws.p, layer->workspace_bytes(T), stream).ok());
      a.y = y_graph.p;
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
      const Status st = layer->forward(a, ws.p, layer->workspace_bytes(T), stream);
      ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
      ASSERT_TRUE(st.ok()) << st.message();
      ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
      for (int i = 0; i < 3; ++i) ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      std::vector<uint16_t> ye(xb.size()), yg(xb.size());
      ASSERT_EQ(cudaMemcpy(ye.data(), y_eager.p, ye.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(yg.data(), y_graph.p, yg.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_EQ(ye, yg) << "the graph's replay differs from the eager forward";
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      cudaStreamDestroy(stream);
    }
}

TEST(LayerGpu, RefusesPointersOffTheDevice) {
  MXMOE_SKIP_WITHOUT_GPU();
  const MoeShape s{8, 160, 96, 2};
  const MoeWeights w = make_random_weights(s, 71);
  for (const std::string& b : gpu_backends(s)) {
    std::unique_ptr<MoeLayer> layer;
    ASSERT_TRUE(MoeLayer::create(w.view(), {.backend = b, .device = 0}, &layer).ok());
    const int64_t T = 2;
    std::vector<uint16_t> host_x(size_t(T * s.hidden), 0x3F80);
    Dev xd(host_x.size() * 2), yd(host_x.size() * 2), ws(layer->workspace_bytes(T));
    auto expect_refused = [&](LayerForwardArgs a, void* workspace, size_t bytes, const char* words) {
      const Status st = layer->forward(a, workspace, bytes, nullptr);
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << b;
      EXPECT_NE(st.message().find(words), std::string::npos) << b << ": " << st.message();
    };
    const LayerForwardArgs good{.x = xd.as<uint16_t>(), .tokens = T, .y = yd.p};
    const size_t need = layer->workspace_bytes(T);
    ASSERT_TRUE(layer->forward(good, ws.p, need, nullptr).ok());
    LayerForwardArgs a = good;
    a.x = host_x.data();
    expect_refused(a, ws.p, need, "x (");
    expect_refused(good, host_x.data(), need, "workspace (");
    expect_refused(good, ws.p, need - 256, "a forward of 2 tokens needs");
    a = good;
    a.x = xd.as<uint16_t>() + 1;
    expect_refused(a, ws.p, need, "x must be 16-byte aligned");
    a = good;
    a.x_row_stride = s.hidden + 4;
    expect_refused(a, ws.p, need, "row stride");
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "a refused forward left a CUDA error behind";
  }
}

}  // namespace
}  // namespace mxmoe
#endif
