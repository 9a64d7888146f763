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

namespace {

// Forward f's inputs (x, routing from seeds seed + f and seed + 2 + f), its
// fp64 reference and its device buffers.
struct ForwardInputs {
  std::vector<float> x[2], ref[2];
  Routing r[2];
  smxx::DeviceBuffer xd[2], yd[2], ids[2], rw[2];
  smxx::ForwardArgs a[2];
  size_t nx = 0;
};

void make_inputs(const MoeWeights& w, int64_t tokens, uint64_t seed, ForwardInputs& in) {
  const MoeShape& s = w.shape;
  const size_t nx = size_t(tokens * s.hidden), nr = size_t(tokens * s.topk);
  in.nx = nx;
  for (int f = 0; f < 2; ++f) {
    in.x[f] = round_to_bf16(random_floats(nx, seed + uint64_t(f)));
    in.r[f] = make_random_routing(tokens, s.experts, s.topk, seed + 2 + uint64_t(f));
    const RoutingView v = in.r[f].view();
    in.ref[f].resize(nx);
    ASSERT_TRUE(reference_forward(w.view(), in.x[f].data(), tokens, &v, in.ref[f].data()).ok());
    std::vector<uint16_t> xb(nx);
    for (size_t i = 0; i < nx; ++i) xb[i] = float_to_bf16(in.x[f][i]);
    ASSERT_TRUE(in.xd[f].reserve(nx * 2).ok() && in.yd[f].reserve(nx * 4).ok() && in.ids[f].reserve(nr * 4).ok() &&
                in.rw[f].reserve(nr * 4).ok());
    ASSERT_EQ(cudaMemcpy(in.xd[f].get(), xb.data(), nx * 2, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(in.ids[f].get(), in.r[f].ids.data(), nr * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(in.rw[f].get(), in.r[f].weights.data(), nr * 4, cudaMemcpyHostToDevice), cudaSuccess);
    in.a[f] = {.x = in.xd[f].as<uint16_t>(), .tokens = tokens, .topk_ids = in.ids[f].as<int32_t>(),
               .topk_weights = in.rw[f].as<float>(), .y = in.yd[f].as<float>()};
  }
  // The uploads are on the legacy stream (a pageable copy may return before
  // its DMA lands), which a non-blocking stream does not wait for.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// Expects each forward's y within 1e-2 (relative L2) of its reference and
// non-zero, then sets it to NaN until written again.
void expect_outputs(ForwardInputs& in, const char* how) {
  SCOPED_TRACE(how);
  for (int f = 0; f < 2; ++f) {
    std::vector<float> y(in.nx);
    ASSERT_EQ(cudaMemcpy(y.data(), in.yd[f].get(), in.nx * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_LE(rel_l2(y, in.ref[f]), 1e-2) << "forward " << f;
    EXPECT_GT(l2_norm(y), 0.0) << "forward " << f;
    ASSERT_EQ(cudaMemset(in.yd[f].get(), 0xFF, in.nx * 4), cudaSuccess);
  }
  // The memsets are on the legacy stream, which the forwards' non-blocking
  // streams do not wait for: a late one would overwrite the next output.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace

void expect_back_to_back_forwards(const smxx::DeviceForward& fwd, const MoeWeights& w, int64_t tokens,
                                  uint64_t seed) {
  SCOPED_TRACE("back to back: T " + std::to_string(tokens) + ", seeds " + std::to_string(seed) + " to " +
               std::to_string(seed + 3));
  ForwardInputs in;
  make_inputs(w, tokens, seed, in);
  if (::testing::Test::HasFatalFailure()) return;
  smxx::DeviceBuffer ws;
  const size_t wsb = fwd.workspace_bytes(tokens);
  ASSERT_TRUE(ws.reserve(wsb).ok());
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  auto enqueue_both = [&] {
    for (int f = 0; f < 2; ++f) {
      const Status st = fwd.forward(in.a[f], ws.get(), wsb, stream);
      if (!st.ok()) return st;
    }
    return Status::Ok();
  };
  ASSERT_EQ(cudaMemset(ws.get(), 0xFF, wsb), cudaSuccess);
  for (int f = 0; f < 2; ++f) ASSERT_EQ(cudaMemset(in.yd[f].get(), 0xFF, in.nx * 4), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the legacy stream's memsets, before the forwards' stream
  ASSERT_TRUE(enqueue_both().ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  expect_outputs(in, "on the stream");
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
    expect_outputs(in, replay == 0 ? "graph, first replay" : "graph, second replay");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

void expect_concurrent_forwards(const smxx::DeviceForward& fwd, const MoeWeights& w, int64_t tokens, uint64_t seed,
                                int rounds) {
  SCOPED_TRACE("two streams: T " + std::to_string(tokens) + ", seeds " + std::to_string(seed) + " to " +
               std::to_string(seed + 3));
  ForwardInputs in;
  make_inputs(w, tokens, seed, in);
  if (::testing::Test::HasFatalFailure()) return;
  const size_t wsb = fwd.workspace_bytes(tokens);
  smxx::DeviceBuffer ws[2];
  cudaStream_t streams[2] = {};
  for (int f = 0; f < 2; ++f) {
    ASSERT_TRUE(ws[f].reserve(wsb).ok());
    ASSERT_EQ(cudaMemset(ws[f].get(), 0xFF, wsb), cudaSuccess);
    ASSERT_EQ(cudaMemset(in.yd[f].get(), 0xFF, in.nx * 4), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&streams[f], cudaStreamNonBlocking), cudaSuccess);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the legacy stream's memsets, before the forwards' streams
  for (int i = 0; i < rounds; ++i)
    for (int f = 0; f < 2; ++f) {
      const Status st = fwd.forward(in.a[f], ws[f].get(), wsb, streams[f]);
      ASSERT_TRUE(st.ok()) << st.message();
    }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_outputs(in, "after the last round");
  for (cudaStream_t st : streams) cudaStreamDestroy(st);
}

}  // namespace mxmoe::testing
#endif
