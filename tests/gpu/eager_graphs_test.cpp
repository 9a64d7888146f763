// Eager forwards enqueued as CUDA graphs (src/cuda/common/eager_graphs.h):
// a layer's forwards with pointers, routing and token counts that change
// from call to call give what the fp64 reference gives and, for equal inputs,
// the same bits as the first call (made before any graph existed); graphs
// are made on a shape's second sighting and reused with new arguments; the
// least recently used is dropped past kGraphs; a caller's capture still gets
// the launches themselves; two threads on two streams share one layer.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "mxmoe/dispatch.h"
#include "mxmoe/format.h"
#include "mxmoe/layer.h"
#include "mxmoe/reference.h"
#include "support/test_support.h"

#ifndef MXMOE_WITH_CUDA
TEST(EagerGraphs, NotBuilt) { GTEST_SKIP() << "GPU test skipped: this build has no CUDA"; }
#else
#include "support/gpu_layers.h"
#include "cuda/common/eager_graphs.h"
#include "cuda/portable/portable_backend.h"
#include "mxmoe/prepare.h"

namespace mxmoe {
namespace {

using testing::random_floats;
using testing::rel_l2;
using testing::round_to_bf16;
using testing::Dev;
using testing::gpu_backends;

// One token count's inputs on the device: two x, two routings.
struct Inputs {
  int64_t tokens;
  std::vector<float> x[2];
  Routing routing[2];
  std::unique_ptr<Dev> xd[2], ids[2], weights[2];

  Inputs(const MoeShape& s, int64_t T, uint64_t seed) : tokens(T) {
    for (int i = 0; i < 2; ++i) {
      x[i] = round_to_bf16(random_floats(size_t(T * s.hidden), seed + uint64_t(i)));
      routing[i] = make_random_routing(T, s.experts, s.topk, seed + 2 + uint64_t(i));
      std::vector<uint16_t> xb(x[i].size());
      for (size_t j = 0; j < xb.size(); ++j) xb[j] = float_to_bf16(x[i][j]);
      xd[i] = std::make_unique<Dev>(xb.size() * 2);
      ids[i] = std::make_unique<Dev>(routing[i].ids.size() * 4);
      weights[i] = std::make_unique<Dev>(routing[i].weights.size() * 4);
      EXPECT_EQ(cudaMemcpy(xd[i]->p, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
      EXPECT_EQ(cudaMemcpy(ids[i]->p, routing[i].ids.data(), routing[i].ids.size() * 4, cudaMemcpyHostToDevice),
                cudaSuccess);
      EXPECT_EQ(cudaMemcpy(weights[i]->p, routing[i].weights.data(), routing[i].weights.size() * 4,
                           cudaMemcpyHostToDevice),
                cudaSuccess);
    }
    // The copies ran on the legacy stream, which the tests' streams do not wait for.
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }

  // Input `xi` with the router (route < 0) or with routing `route`.
  LayerForwardArgs args(int xi, int route, void* y) const {
    LayerForwardArgs a;
    a.x = xd[xi]->as<uint16_t>();
    a.tokens = tokens;
    a.y = y;
    if (route >= 0) {
      a.topk_ids = ids[route]->as<int32_t>();
      a.topk_weights = weights[route]->as<float>();
    }
    return a;
  }

  std::vector<float> reference(const MoeWeights& w, int xi, int route) const {
    std::vector<float> ref(x[xi].size());
    const RoutingView v = route >= 0 ? routing[route].view() : RoutingView{};
    EXPECT_TRUE(reference_forward(w.view(), x[xi].data(), tokens, route >= 0 ? &v : nullptr, ref.data(),
                                  {.fp64 = true})
                    .ok());
    return ref;
  }
};

std::vector<uint16_t> read_bf16(const void* y, size_t n) {
  std::vector<uint16_t> out(n);
  EXPECT_EQ(cudaMemcpy(out.data(), y, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

std::vector<float> to_floats(const std::vector<uint16_t>& b) {
  std::vector<float> f(b.size());
  for (size_t i = 0; i < b.size(); ++i) f[i] = bf16_to_float(b[i]);
  return f;
}

// Forwards that rotate x, y, the workspace and the routing from call to
// call, at several token counts in turn, against the reference and against
// the bits of the first forward of the same inputs.
TEST(EagerGraphs, ForwardsWithChangingArgumentsMatchTheFirst) {
  MXMOE_SKIP_WITHOUT_GPU();
  const MoeShape s{16, 640, 320, 4};
  const MoeWeights w = make_random_weights(s, 51);
  for (const std::string& b : gpu_backends(s)) {
    std::unique_ptr<MoeLayer> layer;
    ASSERT_TRUE(MoeLayer::create(w.view(), {.backend = b, .device = 0}, &layer).ok());
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    for (const int64_t T : {int64_t(1), int64_t(3), int64_t(8), int64_t(40)}) {
      const uint64_t seed = 100 + uint64_t(T);
      const Inputs in(s, T, seed);
      const size_t n = size_t(T * s.hidden), wsb = layer->workspace_bytes(T);
      Dev y0(n * 2), y1(n * 2), y2(n * 2), ws0(wsb), ws1(wsb);
      void* ys[] = {y0.p, y1.p, y2.p};
      void* wss[] = {ws0.p, ws1.p};
      // (x, routing: -1 the router) -> the bits of its first forward
      std::vector<uint16_t> first[2][3];
      for (int call = 0; call < 18; ++call) {
        const int xi = call % 2, route = (call / 3) % 3 - 1;
        SCOPED_TRACE(b + " T=" + std::to_string(T) + " call " + std::to_string(call) + " seed " +
                     std::to_string(seed));
        void* y = ys[call % 3];
        ASSERT_EQ(cudaMemsetAsync(y, 0xFF, n * 2, stream), cudaSuccess);  // NaN where nothing is written
        const Status st = layer->forward(in.args(xi, route, y), wss[(call / 2) % 2], wsb, stream);
        ASSERT_TRUE(st.ok()) << st.message();
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        const std::vector<uint16_t> got = read_bf16(y, n);
        std::vector<uint16_t>& want = first[xi][route + 1];
        if (want.empty()) {
          const std::vector<float> ref = in.reference(w, xi, route);
          EXPECT_GT(testing::l2_norm(ref), 0.0);
          EXPECT_LE(rel_l2(to_floats(got), ref), 1e-2);
          want = got;
        } else {
          EXPECT_EQ(std::memcmp(got.data(), want.data(), n * 2), 0) << "differs from the first forward's bits";
        }
      }
    }
    cudaStreamDestroy(stream);
  }
}

// A forward recorded from the portable backend's DeviceForward, so the
// graphs' own counts can be read.
struct Recorded {
  std::unique_ptr<smxx::DeviceForward> forward;
  Status record(const smxx::ForwardArgs& a, void* ws, size_t wsb, smxx::LaunchList* list) const {
    *list = smxx::LaunchList{};
    smxx::LaunchRecording recording(list);
    return forward->forward(a, ws, wsb, nullptr);
  }
};

TEST(EagerGraphs, AShapeGetsItsGraphOnItsSecondSightingAndKeepsIt) {
  MXMOE_SKIP_WITHOUT_GPU();
  const MoeShape s{8, 320, 160, 2};
  const MoeWeights w = make_random_weights(s, 61);
  PreparedWeights prep;
  ASSERT_TRUE(prepare_weights(make_plan(BackendKind::kPortable, s), w.view(), &prep).ok());
  Recorded r;
  ASSERT_TRUE(portable::make_forward(prep, 0, &r.forward).ok());
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  smxx::EagerGraphs graphs;
  // Token counts 1..10: ten shapes, two more than the graphs kept.
  std::vector<std::unique_ptr<Inputs>> in;
  for (int64_t T = 1; T <= 10; ++T) in.push_back(std::make_unique<Inputs>(s, T, 200 + uint64_t(T)));
  size_t wsb = 0;
  for (int64_t T = 1; T <= 10; ++T) wsb = std::max(wsb, r.forward->workspace_bytes(T));
  Dev ws(wsb), y(size_t(10 * s.hidden) * 4);
  smxx::LaunchList list;
  auto forward = [&](int64_t T, int xi) {
    smxx::ForwardArgs a;
    a.x = in[size_t(T - 1)]->xd[xi]->as<uint16_t>();
    a.tokens = T;
    a.topk_ids = in[size_t(T - 1)]->ids[xi]->as<int32_t>();
    a.topk_weights = in[size_t(T - 1)]->weights[xi]->as<float>();
    a.y_bf16 = y.as<uint16_t>();
    ASSERT_TRUE(r.record(a, ws.p, wsb, &list).ok());
    ASSERT_GT(list.count, 0);
    const Status st = graphs.enqueue(list, stream, "test");
    ASSERT_TRUE(st.ok()) << st.message();
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    const size_t n = size_t(T * s.hidden);
    EXPECT_LE(rel_l2(to_floats(read_bf16(y.p, n)), in[size_t(T - 1)]->reference(w, xi, xi)), 1e-2)
        << "T=" << T << " x " << xi;
  };
  forward(1, 0);
  EXPECT_EQ(graphs.counts().captured, 0) << "a shape seen once has no graph";
  forward(1, 1);
  EXPECT_EQ(graphs.counts().captured, 1);
  EXPECT_EQ(graphs.counts().graph_launches, 1);
  forward(1, 0);  // new arguments on the same graph
  EXPECT_EQ(graphs.counts().captured, 1);
  EXPECT_EQ(graphs.counts().graph_launches, 2);
  EXPECT_GT(graphs.counts().arguments_set, 0);
  for (int64_t T = 2; T <= 10; ++T) {
    forward(T, 0);
    forward(T, 1);
  }
  EXPECT_EQ(graphs.counts().captured, 10);
  EXPECT_EQ(graphs.counts().kept, smxx::EagerGraphs::kGraphs);
  forward(1, 1);  // T = 1 was the least recently used: dropped, seen again
  EXPECT_EQ(graphs.counts().captured, 10);
  forward(1, 0);
  EXPECT_EQ(graphs.counts().captured, 11);
  forward(10, 0);  // still kept
  EXPECT_EQ(graphs.counts().captured, 11);

  // Into a caller's capture the launches go themselves, and run when it is replayed.
  const smxx::EagerGraphs::Counts before = graphs.counts();
  cudaGraph_t g = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  smxx::ForwardArgs a;
  a.x = in[3]->xd[1]->as<uint16_t>();
  a.tokens = 4;
  a.topk_ids = in[3]->ids[1]->as<int32_t>();
  a.topk_weights = in[3]->weights[1]->as<float>();
  a.y_bf16 = y.as<uint16_t>();
  ASSERT_TRUE(r.record(a, ws.p, wsb, &list).ok());
  const Status st = graphs.enqueue(list, stream, "test");
  ASSERT_EQ(cudaStreamEndCapture(stream, &g), cudaSuccess);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(graphs.counts().graph_launches, before.graph_launches);
  ASSERT_EQ(cudaMemset(y.p, 0xFF, size_t(4 * s.hidden) * 2), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_LE(rel_l2(to_floats(read_bf16(y.p, size_t(4 * s.hidden))), in[3]->reference(w, 1, 1)), 1e-2);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
  cudaStreamDestroy(stream);
}

// Two threads, each on its own stream with its own buffers, on one layer:
// every forward gives the bits a lone forward of its inputs gives.
TEST(EagerGraphs, TwoThreadsOnTwoStreamsShareALayer) {
  MXMOE_SKIP_WITHOUT_GPU();
  const MoeShape s{16, 640, 320, 4};
  const MoeWeights w = make_random_weights(s, 71);
  for (const std::string& b : gpu_backends(s)) {
    SCOPED_TRACE(b);
    std::unique_ptr<MoeLayer> layer;
    ASSERT_TRUE(MoeLayer::create(w.view(), {.backend = b, .device = 0}, &layer).ok());
    const int64_t T = 2;
    const Inputs in(s, T, 300);
    const size_t n = size_t(T * s.hidden), wsb = layer->workspace_bytes(T);
    std::vector<uint16_t> want[2];
    {
      Dev y(n * 2), ws(wsb);
      for (int t = 0; t < 2; ++t) {
        ASSERT_TRUE(layer->forward(in.args(t, t, y.p), ws.p, wsb, nullptr).ok());
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        want[t] = read_bf16(y.p, n);
        EXPECT_LE(rel_l2(to_floats(want[t]), in.reference(w, t, t)), 1e-2);
      }
    }
    int mismatches[2] = {0, 0};
    auto run = [&](int t) {
      cudaSetDevice(0);
      cudaStream_t stream = nullptr;
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      Dev y(n * 2), ws(wsb);
      for (int call = 0; call < 40; ++call) {
        cudaMemsetAsync(y.p, 0xFF, n * 2, stream);
        if (!layer->forward(in.args(t, t, y.p), ws.p, wsb, stream).ok()) ++mismatches[t];
        std::vector<uint16_t> got(n);
        cudaMemcpyAsync(got.data(), y.p, n * 2, cudaMemcpyDeviceToHost, stream);
        cudaStreamSynchronize(stream);
        if (std::memcmp(got.data(), want[t].data(), n * 2) != 0) ++mismatches[t];
      }
      cudaStreamDestroy(stream);
    };
    std::thread a(run, 0), c(run, 1);
    a.join();
    c.join();
    EXPECT_EQ(mismatches[0], 0);
    EXPECT_EQ(mismatches[1], 0);
  }
}

}  // namespace
}  // namespace mxmoe
#endif
