// Two forwards back to back on one stream and one workspace (back_to_back.h).
#include "support/back_to_back.h"

#ifdef MXMOE_WITH_CUDA
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "mxmoe/format.h"
#include "mxmoe/reference.h"
#include "support/test_support.h"

namespace mxmoe::testing {

void expect_back_to_back_forwards(const smxx::DeviceForward& fwd, const MoeWeights& w, int64_t tokens,
                                  uint64_t seed) {
  SCOPED_TRACE("back to back: T " + std::to_string(tokens) + ", seeds " + std::to_string(seed) + " to " +
               std::to_string(seed + 3));
  const MoeShape& s = w.shape;
  const size_t nx = size_t(tokens * s.hidden), nr = size_t(tokens * s.topk);
  std::vector<float> x[2], ref[2];
  Routing r[2];
  smxx::DeviceBuffer xd[2], yd[2], ids[2], rw[2], ws;
  smxx::ForwardArgs a[2];
  for (int f = 0; f < 2; ++f) {
    x[f] = round_to_bf16(random_floats(nx, seed + uint64_t(f)));
    r[f] = make_random_routing(tokens, s.experts, s.topk, seed + 2 + uint64_t(f));
    const RoutingView v = r[f].view();
    ref[f].resize(nx);
    ASSERT_TRUE(reference_forward(w.view(), x[f].data(), tokens, &v, ref[f].data()).ok());
    std::vector<uint16_t> xb(nx);
    for (size_t i = 0; i < nx; ++i) xb[i] = float_to_bf16(x[f][i]);
    ASSERT_TRUE(xd[f].reserve(nx * 2).ok() && yd[f].reserve(nx * 4).ok() && ids[f].reserve(nr * 4).ok() &&
                rw[f].reserve(nr * 4).ok());
    ASSERT_EQ(cudaMemcpy(xd[f].get(), xb.data(), nx * 2, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(ids[f].get(), r[f].ids.data(), nr * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(rw[f].get(), r[f].weights.data(), nr * 4, cudaMemcpyHostToDevice), cudaSuccess);
    a[f] = {.x = xd[f].as<uint16_t>(), .tokens = tokens, .topk_ids = ids[f].as<int32_t>(),
            .topk_weights = rw[f].as<float>(), .y = yd[f].as<float>()};
  }
  const size_t wsb = fwd.workspace_bytes(tokens);
  ASSERT_TRUE(ws.reserve(wsb).ok());
  // The uploads are on the legacy stream (a pageable copy may return before
  // its DMA lands), which a non-blocking stream does not wait for.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  auto enqueue_both = [&] {
    for (int f = 0; f < 2; ++f) {
      const Status st = fwd.forward(a[f], ws.get(), wsb, stream);
      if (!st.ok()) return st;
    }
    return Status::Ok();
  };
  auto expect_outputs = [&](const char* how) {
    SCOPED_TRACE(how);
    for (int f = 0; f < 2; ++f) {
      std::vector<float> y(nx);
      ASSERT_EQ(cudaMemcpy(y.data(), yd[f].get(), nx * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_LE(rel_l2(y, ref[f]), 1e-2) << "forward " << f;
      EXPECT_GT(l2_norm(y), 0.0) << "forward " << f;
      ASSERT_EQ(cudaMemset(yd[f].get(), 0xFF, nx * 4), cudaSuccess);  // NaN until written again
    }
  };
  ASSERT_EQ(cudaMemset(ws.get(), 0xFF, wsb), cudaSuccess);
  for (int f = 0; f < 2; ++f) ASSERT_EQ(cudaMemset(yd[f].get(), 0xFF, nx * 4), cudaSuccess);
  ASSERT_TRUE(enqueue_both().ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  expect_outputs("on the stream");
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const Status captured = enqueue_both();
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_TRUE(captured.ok()) << captured.message();
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 2; ++replay) {
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    expect_outputs(replay == 0 ? "graph, first replay" : "graph, second replay");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace mxmoe::testing
#endif
