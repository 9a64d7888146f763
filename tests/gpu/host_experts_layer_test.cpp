// Host-memory layers (backend "cpu" on a GPU): x, the routing and y on the
// device, the experts in host memory, computed by the cpu backend. Checked
// against the CPU layer on the same bytes (bitwise: the same kernels) and the
// fp64 reference: forwards longer than the staging (several pieces), row
// strides, both y dtypes, the router, T = 0, out-of-range ids, CUDA graphs
// replayed on new inputs, two streams in an event order, the pointer and
// option checks, and load_layers' split of a checkpoint under a device budget.
// Forwards that stream the experts to the GPU: against that GPU's own layer,
// bitwise, eager and from a graph, and a stream built for the portable
// kernels against the portable layer.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "mxmoe/format.h"
#include "mxmoe/layer.h"
#include "mxmoe/load.h"
#include "mxmoe/reference.h"
#include "support/test_support.h"

#ifndef MXMOE_WITH_CUDA
TEST(HostExpertsLayer, NotBuilt) { GTEST_SKIP() << "GPU test skipped: this build has no CUDA"; }
#else
#include <cuda_runtime.h>

#include "mxmoe/allocator.h"
#include "cpu/cpu_moe.h"
#include "cuda/common/host_experts_stream.h"
#include "cuda/common/layer_device.h"
#include "support/counting_allocator.h"
#include "support/gpu_layers.h"
#include "support/safetensors_writer.h"

namespace mxmoe {
namespace {

using testing::Dev;

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess); }
  ~Stream() { cudaStreamDestroy(s); }
};

std::vector<uint16_t> random_bf16(size_t n, uint64_t seed) {
  const std::vector<float> f = testing::random_floats(n, seed);
  std::vector<uint16_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = float_to_bf16(f[i]);
  return b;
}

std::vector<float> as_floats(const std::vector<uint8_t>& y, OutputDtype dt) {
  std::vector<float> f(y.size() / (dt == OutputDtype::kFp32 ? 4 : 2));
  for (size_t i = 0; i < f.size(); ++i) {
    if (dt == OutputDtype::kFp32) {
      std::memcpy(&f[i], y.data() + 4 * i, 4);
    } else {
      uint16_t b;
      std::memcpy(&b, y.data() + 2 * i, 2);
      f[i] = bf16_to_float(b);
    }
  }
  return f;
}

// The CPU layer's y (its bytes) for dense x and the routing (null: the router).
std::vector<uint8_t> cpu_forward(const MoeLayer& cpu, const std::vector<uint16_t>& x, int64_t T, const Routing* r,
                                 OutputDtype dt) {
  std::vector<uint8_t> y(size_t(T * cpu.shape().hidden) * (dt == OutputDtype::kFp32 ? 4 : 2));
  std::vector<uint8_t> ws(cpu.workspace_bytes(T) + 1);
  LayerForwardArgs a{.x = x.data(), .tokens = T, .y = y.data(), .y_dtype = dt};
  if (r) {
    a.topk_ids = r->ids.data();
    a.topk_weights = r->weights.data();
  }
  const Status st = cpu.forward(a, ws.data(), ws.size(), nullptr);
  EXPECT_TRUE(st.ok()) << st.message();
  return y;
}

// A forward's device buffers: x with `pad` elements after each row (NaN),
// the routing and y (NaN before the forward).
struct DeviceCall {
  int64_t T, H, stride;
  OutputDtype dt;
  Dev x, ids, weights, y;
  DeviceCall(int64_t tokens, const MoeShape& s, int64_t pad, OutputDtype y_dtype)
      : T(tokens), H(s.hidden), stride(s.hidden + pad), dt(y_dtype), x(size_t(T * stride) * 2),
        ids(size_t(T * s.topk) * 4), weights(size_t(T * s.topk) * 4), y(y_bytes()) {}
  size_t y_bytes() const { return size_t(T * H) * (dt == OutputDtype::kFp32 ? 4 : 2); }
  // Writes the inputs in `stream`'s order (so a graph replayed after it sees them).
  void put(const std::vector<uint16_t>& dense_x, const Routing* r, cudaStream_t stream) {
    std::vector<uint16_t> xs(size_t(T * stride), 0x7FC0);
    for (int64_t t = 0; t < T; ++t) std::memcpy(&xs[size_t(t * stride)], &dense_x[size_t(t * H)], size_t(H) * 2);
    ASSERT_EQ(cudaMemcpyAsync(x.p, xs.data(), xs.size() * 2, cudaMemcpyHostToDevice, stream), cudaSuccess);
    if (r) {
      ASSERT_EQ(cudaMemcpyAsync(ids.p, r->ids.data(), r->ids.size() * 4, cudaMemcpyHostToDevice, stream), cudaSuccess);
      ASSERT_EQ(cudaMemcpyAsync(weights.p, r->weights.data(), r->weights.size() * 4, cudaMemcpyHostToDevice, stream),
                cudaSuccess);
    }
    ASSERT_EQ(cudaMemsetAsync(y.p, 0xFF, y_bytes(), stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);  // the pageable sources above
  }
  LayerForwardArgs args(bool routed) const {
    LayerForwardArgs a{.x = x.as<uint16_t>(), .x_row_stride = stride, .tokens = T, .y = y.p, .y_dtype = dt};
    if (routed) {
      a.topk_ids = ids.as<int32_t>();
      a.topk_weights = weights.as<float>();
    }
    return a;
  }
  std::vector<uint8_t> get(cudaStream_t stream) const {
    std::vector<uint8_t> out(y_bytes());
    EXPECT_EQ(cudaMemcpyAsync(out.data(), y.p, out.size(), cudaMemcpyDeviceToHost, stream), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    return out;
  }
};

// `a` recorded into a graph on `stream` and instantiated (null on failure).
cudaGraphExec_t record_forward(const MoeLayer& layer, const LayerForwardArgs& a, void* ws, size_t bytes,
                               cudaStream_t stream) {
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  const Status st = layer.forward(a, ws, bytes, stream);
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  EXPECT_TRUE(st.ok()) << st.message();
  cudaGraphExec_t exec = nullptr;
  if (graph && st.ok()) EXPECT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  if (graph) cudaGraphDestroy(graph);
  return exec;
}

// Backend cpu on `device`: a CPU layer for -1, a host-memory layer for a GPU
// (computed by the CPU unless `stream_tokens` says from when it streams).
std::unique_ptr<MoeLayer> make_layer(const MoeWeights& w, int device, int64_t chunk = 256, int64_t stream_tokens = -1) {
  std::unique_ptr<MoeLayer> layer;
  const Status st = MoeLayer::create(
      w.view(), {.backend = "cpu", .device = device, .host_chunk_tokens = chunk, .host_stream_tokens = stream_tokens},
      &layer);
  EXPECT_TRUE(st.ok()) << st.message();
  return layer;
}

TEST(HostExpertsLayer, MatchesTheCpuLayerBitwiseAndTheReference) {
  MXMOE_SKIP_WITHOUT_GPU();
  struct Case {
    int64_t T, pad;
    bool routed;
    OutputDtype dt;
  };
  const std::vector<Case> cases = {{1, 0, true, OutputDtype::kBf16},   {2, 8, true, OutputDtype::kFp32},
                                   {3, 0, false, OutputDtype::kBf16},  {17, 64, true, OutputDtype::kBf16},
                                   {33, 0, false, OutputDtype::kFp32}, {129, 0, true, OutputDtype::kBf16}};
  for (const MoeShape& s : {MoeShape{8, 160, 96, 2}, MoeShape{32, 2880, 384, 4}}) {
    const MoeWeights w = make_random_weights(s, 51);
    const std::unique_ptr<MoeLayer> cpu = make_layer(w, -1);
    ASSERT_NE(cpu, nullptr);
    for (const int64_t chunk : {int64_t(256), int64_t(16)}) {
      const std::unique_ptr<MoeLayer> layer = make_layer(w, 0, chunk);
      ASSERT_NE(layer, nullptr);
      EXPECT_TRUE(layer->host_experts());
      EXPECT_EQ(layer->backend(), BackendKind::kCpu);
      EXPECT_EQ(layer->device(), 0);
      EXPECT_EQ(layer->device_bytes(), 0u);
      EXPECT_EQ(layer->workspace_bytes(4096), 0u);
      EXPECT_NE(layer->backend_reason().find("host memory"), std::string::npos) << layer->backend_reason();
      Stream stream;
      for (const Case& c : cases) {
        const uint64_t seed = uint64_t(s.hidden * 1000 + c.T);
        SCOPED_TRACE(testing::describe_case(s, c.T, testing::RouteMode::kRandom) + " chunk=" + std::to_string(chunk) +
                     " pad=" + std::to_string(c.pad) + (c.routed ? " caller routing" : " router") +
                     " seed=" + std::to_string(seed));
        const std::vector<uint16_t> x = random_bf16(size_t(c.T * s.hidden), seed);
        const Routing r = make_random_routing(c.T, s.experts, s.topk, seed + 1);
        DeviceCall call(c.T, s, c.pad, c.dt);
        call.put(x, &r, stream.s);
        const Status st = layer->forward(call.args(c.routed), nullptr, 0, stream.s);
        ASSERT_TRUE(st.ok()) << st.message();
        const std::vector<uint8_t> got = call.get(stream.s);
        EXPECT_EQ(got, cpu_forward(*cpu, x, c.T, c.routed ? &r : nullptr, c.dt));
        std::vector<float> xf(x.size()), ref(size_t(c.T * s.hidden));
        for (size_t i = 0; i < x.size(); ++i) xf[i] = bf16_to_float(x[i]);
        const RoutingView rv = r.view();
        ASSERT_TRUE(reference_forward(w.view(), xf.data(), c.T, c.routed ? &rv : nullptr, ref.data(), {.fp64 = true})
                        .ok());
        EXPECT_GT(testing::l2_norm(ref), 0.0);
        EXPECT_LE(testing::rel_l2(as_floats(got, c.dt), ref), 1e-2);
      }
    }
  }
}

TEST(HostExpertsLayer, EmptyBatchesAndTheChecks) {
  MXMOE_SKIP_WITHOUT_GPU();
  const MoeShape s{8, 160, 96, 2};
  const MoeWeights w = make_random_weights(s, 61);
  const std::unique_ptr<MoeLayer> layer = make_layer(w, 0);
  ASSERT_NE(layer, nullptr);
  Stream stream;
  // T = 0: nothing is enqueued, null pointers included.
  EXPECT_TRUE(layer->forward({.tokens = 0}, nullptr, 0, stream.s).ok());
  DeviceCall call(2, s, 0, OutputDtype::kBf16);
  std::vector<uint16_t> host_x(size_t(2 * s.hidden));
  LayerForwardArgs a = call.args(false);
  a.x = host_x.data();
  Status st = layer->forward(a, nullptr, 0, stream.s);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("x"), std::string::npos) << st.message();
  a = call.args(true);
  std::vector<int32_t> host_ids(4);
  a.topk_ids = host_ids.data();
  st = layer->forward(a, nullptr, 0, stream.s);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("topk_ids"), std::string::npos) << st.message();
  a = call.args(false);
  a.x_row_stride = s.hidden - 8;
  EXPECT_EQ(layer->forward(a, nullptr, 0, stream.s).code(), StatusCode::kInvalidArgument);

  std::unique_ptr<MoeLayer> other;
  st = MoeLayer::create(w.view(), {.backend = "cpu", .device = 0, .host_chunk_tokens = 0}, &other);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
  st = MoeLayer::create(w.view(), {.backend = "cpu", .device = 0, .host_threads = -1}, &other);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
  st = MoeLayer::create(w.view(), {.backend = "cpu", .device = 0, .host_stream_tokens = -2}, &other);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
  EXPECT_NE(st.message().find("host_stream_tokens"), std::string::npos) << st.message();
  const testing::DeviceWeights on_gpu(w);
  st = MoeLayer::create(on_gpu.view, {.backend = "cpu", .device = 0}, &other);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
  EXPECT_NE(st.message().find("host memory"), std::string::npos) << st.message();
  EXPECT_EQ(other, nullptr);
}

// A token with an id outside [0, E) gets a NaN row; every other token's row
// is the CPU layer's for the same routing with that token sent nowhere
// (expert 0 at weight 0), across the staging's pieces.
TEST(HostExpertsLayer, OutOfRangeIdsPoisonOnlyTheirTokens) {
  MXMOE_SKIP_WITHOUT_GPU();
  const MoeShape s{16, 320, 160, 4};
  const MoeWeights w = make_random_weights(s, 71);
  const std::unique_ptr<MoeLayer> cpu = make_layer(w, -1), layer = make_layer(w, 0, 2);
  ASSERT_TRUE(cpu && layer);
  Stream stream;
  const int64_t T = 7, H = s.hidden;
  const std::vector<uint16_t> x = random_bf16(size_t(T * H), 72);
  Routing r = make_random_routing(T, s.experts, s.topk, 73);
  Routing sent_nowhere = r;
  const int32_t wrong[] = {int32_t(s.experts), -1, 1 << 30};
  for (int64_t t = 0; t < T; t += 3) {
    r.ids[size_t(t * s.topk + t % s.topk)] = wrong[(t / 3) % 3];
    for (int64_t j = 0; j < s.topk; ++j) {
      sent_nowhere.ids[size_t(t * s.topk + j)] = 0;
      sent_nowhere.weights[size_t(t * s.topk + j)] = 0.0f;
    }
  }
  DeviceCall call(T, s, 0, OutputDtype::kFp32);
  call.put(x, &r, stream.s);
  ASSERT_TRUE(layer->forward(call.args(true), nullptr, 0, stream.s).ok());
  const std::vector<float> got = as_floats(call.get(stream.s), OutputDtype::kFp32);
  const std::vector<float> want = as_floats(cpu_forward(*cpu, x, T, &sent_nowhere, OutputDtype::kFp32),
                                            OutputDtype::kFp32);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const size_t i = size_t(t * H + h);
      if (t % 3 == 0) {
        ASSERT_TRUE(std::isnan(got[i])) << "token " << t;
      } else {
        ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0) << "token " << t << " h " << h;
      }
    }
}

// A graph recorded once (several pieces: copy and host nodes) and replayed on
// new inputs written into the same buffers gives the CPU layer's bits each time.
TEST(HostExpertsLayer, GraphsReplayOnNewInputs) {
  MXMOE_SKIP_WITHOUT_GPU();
  const MoeShape s{8, 320, 224, 2};
  const MoeWeights w = make_random_weights(s, 81);
  const std::unique_ptr<MoeLayer> cpu = make_layer(w, -1), layer = make_layer(w, 0, 2);
  ASSERT_TRUE(cpu && layer);
  Stream stream;
  const int64_t T = 5;
  DeviceCall call(T, s, 16, OutputDtype::kBf16);
  for (const bool routed : {true, false}) {
    SCOPED_TRACE(routed ? "caller routing" : "router");
    cudaGraphExec_t exec = record_forward(*layer, call.args(routed), nullptr, 0, stream.s);
    ASSERT_NE(exec, nullptr);
    for (uint64_t replay = 0; replay < 3; ++replay) {
      const uint64_t seed = 90 + replay;
      SCOPED_TRACE("replay " + std::to_string(replay) + " seed=" + std::to_string(seed));
      const std::vector<uint16_t> x = random_bf16(size_t(T * s.hidden), seed);
      const Routing r = make_random_routing(T, s.experts, s.topk, seed + 10);
      call.put(x, &r, stream.s);
      ASSERT_EQ(cudaGraphLaunch(exec, stream.s), cudaSuccess);
      const std::vector<uint8_t> got = call.get(stream.s);
      EXPECT_EQ(got, cpu_forward(*cpu, x, T, routed ? &r : nullptr, OutputDtype::kBf16));
      EXPECT_GT(testing::l2_norm(as_floats(got, OutputDtype::kBf16)), 0.0);
    }
    cudaGraphExecDestroy(exec);
  }
}

// What the layer's header asks of a caller with two streams: an order
// between their forwards (here an event), since they share the staging.
TEST(HostExpertsLayer, TwoStreamsInAnEventOrder) {
  MXMOE_SKIP_WITHOUT_GPU();
  const MoeShape s{8, 160, 96, 2};
  const MoeWeights w = make_random_weights(s, 101);
  const std::unique_ptr<MoeLayer> cpu = make_layer(w, -1), layer = make_layer(w, 0, 4);
  ASSERT_TRUE(cpu && layer);
  Stream a, b;
  cudaEvent_t done = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), cudaSuccess);
  const int64_t T = 9;
  const std::vector<uint16_t> xa = random_bf16(size_t(T * s.hidden), 102), xb = random_bf16(size_t(T * s.hidden), 103);
  const Routing ra = make_random_routing(T, s.experts, s.topk, 104), rb = make_random_routing(T, s.experts, s.topk, 105);
  DeviceCall ca(T, s, 0, OutputDtype::kBf16), cb(T, s, 0, OutputDtype::kBf16);
  ca.put(xa, &ra, a.s);
  cb.put(xb, &rb, b.s);
  for (int round = 0; round < 4; ++round) {
    ASSERT_TRUE(layer->forward(ca.args(true), nullptr, 0, a.s).ok());
    ASSERT_EQ(cudaEventRecord(done, a.s), cudaSuccess);
    ASSERT_EQ(cudaStreamWaitEvent(b.s, done, 0), cudaSuccess);
    ASSERT_TRUE(layer->forward(cb.args(true), nullptr, 0, b.s).ok());
    ASSERT_EQ(cudaEventRecord(done, b.s), cudaSuccess);
    ASSERT_EQ(cudaStreamWaitEvent(a.s, done, 0), cudaSuccess);
  }
  EXPECT_EQ(ca.get(a.s), cpu_forward(*cpu, xa, T, &ra, OutputDtype::kBf16));
  EXPECT_EQ(cb.get(b.s), cpu_forward(*cpu, xb, T, &rb, OutputDtype::kBf16));
  cudaEventDestroy(done);
}

// From host_stream_tokens on, the experts stream to the GPU and its kernels
// run on them: the bits of that backend's own device layer, through the
// caller's routing or the router, both y dtypes, several chunks of experts
// (13 MB an expert at H = I = 2880, 64 MB a chunk) and an odd expert count;
// replayed from a graph on new inputs; below it the CPU computes.
// The same inputs (x, r) through `gpu`'s own forward give `got`'s bits.
void expect_gpu_layer_bits(const MoeLayer& gpu, DeviceCall& call, const std::vector<uint16_t>& x, const Routing& r,
                           bool routed, const std::vector<uint8_t>& got, cudaStream_t stream) {
  call.put(x, &r, stream);
  Dev ws(std::max<size_t>(gpu.forward_workspace_bytes(call.T), 1));
  ASSERT_TRUE(gpu.forward(call.args(routed), ws.p, gpu.forward_workspace_bytes(call.T), stream).ok());
  EXPECT_EQ(got, call.get(stream));
}

TEST(HostExpertsLayer, StreamedForwardsHaveTheGpuLayersBits) {
  MXMOE_SKIP_WITHOUT_GPU();
  for (const MoeShape& s : {MoeShape{8, 160, 96, 2}, MoeShape{32, 2880, 384, 4}, MoeShape{8, 2880, 2880, 4},
                            MoeShape{5, 2880, 2880, 2}}) {
    const MoeWeights w = make_random_weights(s, 151);
    std::unique_ptr<MoeLayer> gpu;
    Status st = MoeLayer::create(w.view(), {.device = 0}, &gpu);
    ASSERT_TRUE(st.ok()) << st.message();
    const std::unique_ptr<MoeLayer> host = make_layer(w, 0, 256, 2), cpu = make_layer(w, -1);
    ASSERT_TRUE(host && cpu);
    EXPECT_NE(host->backend_reason().find(std::string("from T = 2 (host_stream_tokens) the experts stream over PCIe "
                                                      "to the ") + backend_name(gpu->backend())),
              std::string::npos)
        << host->backend_reason();
    EXPECT_EQ(host->host_stream_from(), 2);
    EXPECT_EQ(gpu->host_stream_from(), 0);
    EXPECT_EQ(cpu->host_stream_from(), 0);
    EXPECT_EQ(host->forward_workspace_bytes(1), 0u);
    EXPECT_GT(host->forward_workspace_bytes(2), 0u);
    EXPECT_EQ(host->device_bytes(), 0u);
    Stream stream;
    for (const int64_t T : {int64_t(1), int64_t(3), int64_t(129)})
      for (const bool routed : {true, false}) {
        const OutputDtype dt = T == 3 ? OutputDtype::kFp32 : OutputDtype::kBf16;
        const uint64_t seed = uint64_t(s.experts * 100 + T);
        SCOPED_TRACE(testing::describe_case(s, T, testing::RouteMode::kRandom) +
                     (routed ? " caller routing" : " router") + " seed=" + std::to_string(seed));
        const std::vector<uint16_t> x = random_bf16(size_t(T * s.hidden), seed);
        const Routing r = make_random_routing(T, s.experts, s.topk, seed + 1);
        DeviceCall call(T, s, T == 129 ? 8 : 0, dt);
        call.put(x, &r, stream.s);
        Dev ws(std::max<size_t>(host->forward_workspace_bytes(T), 1));
        st = host->forward(call.args(routed), ws.p, host->forward_workspace_bytes(T), stream.s);
        ASSERT_TRUE(st.ok()) << st.message();
        const std::vector<uint8_t> got = call.get(stream.s);
        EXPECT_GT(testing::l2_norm(as_floats(got, dt)), 0.0);
        if (T < 2) {
          EXPECT_EQ(got, cpu_forward(*cpu, x, T, routed ? &r : nullptr, dt));
          continue;
        }
        expect_gpu_layer_bits(*gpu, call, x, r, routed, got, stream.s);
      }
  }
}

// Streams feed the portable kernels too (what SM80-89 take, where dispatch
// picks them, and what an SM90 layer never streams to): a stream built for
// them gives the portable device layer's bits.
TEST(HostExpertsLayer, StreamedToThePortableKernelsHasThePortableLayersBits) {
  MXMOE_SKIP_WITHOUT_GPU();
  for (const MoeShape& s : {MoeShape{8, 160, 96, 2}, MoeShape{32, 2880, 384, 4}, MoeShape{5, 2880, 2880, 2}}) {
    const MoeWeights w = make_random_weights(s, 181);
    std::unique_ptr<MoeLayer> gpu;
    Status st = MoeLayer::create(w.view(), {.backend = "portable", .device = 0}, &gpu);
    ASSERT_TRUE(st.ok()) << st.message();
    std::unique_ptr<cpu::CpuMoe> moe;
    ASSERT_TRUE(cpu::CpuMoe::create(w.view(), &moe).ok());
    std::unique_ptr<smxx::ExpertStream> experts;
    st = smxx::ExpertStream::create(BackendKind::kPortable, *moe, &experts);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(experts->backend(), BackendKind::kPortable);
    Stream stream;
    for (const int64_t T : {int64_t(1), int64_t(3), int64_t(129)})
      for (const bool routed : {true, false}) {
        const OutputDtype dt = T == 3 ? OutputDtype::kFp32 : OutputDtype::kBf16;
        const uint64_t seed = uint64_t(s.experts * 100 + T + 7);
        SCOPED_TRACE(testing::describe_case(s, T, testing::RouteMode::kRandom) +
                     (routed ? " caller routing" : " router") + " seed=" + std::to_string(seed));
        const std::vector<uint16_t> x = random_bf16(size_t(T * s.hidden), seed);
        const Routing r = make_random_routing(T, s.experts, s.topk, seed + 1);
        DeviceCall call(T, s, T == 129 ? 8 : 0, dt);
        call.put(x, &r, stream.s);
        const size_t bytes = experts->workspace_bytes(T);
        Dev ws(bytes);
        st = experts->forward(smxx::forward_args_of(call.args(routed)), ws.p, bytes, stream.s);
        ASSERT_TRUE(st.ok()) << st.message();
        const std::vector<uint8_t> got = call.get(stream.s);
        EXPECT_GT(testing::l2_norm(as_floats(got, dt)), 0.0);
        expect_gpu_layer_bits(*gpu, call, x, r, routed, got, stream.s);
      }
  }
}

TEST(HostExpertsLayer, StreamedForwardsReplayFromAGraphAndCheckTheirWorkspace) {
  MXMOE_SKIP_WITHOUT_GPU();
  const MoeShape s{6, 2880, 2880, 2};
  const MoeWeights w = make_random_weights(s, 161);
  std::unique_ptr<MoeLayer> gpu;
  ASSERT_TRUE(MoeLayer::create(w.view(), {.device = 0}, &gpu).ok());
  const std::unique_ptr<MoeLayer> host = make_layer(w, 0, 256, 1);
  ASSERT_TRUE(host);
  Stream stream;
  const int64_t T = 33;
  DeviceCall call(T, s, 0, OutputDtype::kBf16);
  const size_t bytes = host->forward_workspace_bytes(T);
  Dev ws(bytes);
  // Too small, or host memory: refused before anything is enqueued.
  Status st = host->forward(call.args(true), ws.p, bytes - 256, stream.s);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
  std::vector<uint8_t> host_ws(bytes);
  st = host->forward(call.args(true), host_ws.data(), bytes, stream.s);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
  EXPECT_NE(st.message().find("workspace"), std::string::npos) << st.message();

  cudaGraphExec_t exec = record_forward(*host, call.args(true), ws.p, bytes, stream.s);
  ASSERT_NE(exec, nullptr);
  for (uint64_t replay = 0; replay < 2; ++replay) {
    const uint64_t seed = 170 + replay;
    SCOPED_TRACE("replay " + std::to_string(replay) + " seed=" + std::to_string(seed));
    const std::vector<uint16_t> x = random_bf16(size_t(T * s.hidden), seed);
    const Routing r = make_random_routing(T, s.experts, s.topk, seed + 10);
    call.put(x, &r, stream.s);
    ASSERT_EQ(cudaMemsetAsync(ws.p, 0xFF, bytes, stream.s), cudaSuccess);  // nothing is kept between forwards
    ASSERT_EQ(cudaGraphLaunch(exec, stream.s), cudaSuccess);
    const std::vector<uint8_t> got = call.get(stream.s);
    EXPECT_GT(testing::l2_norm(as_floats(got, OutputDtype::kBf16)), 0.0);
    expect_gpu_layer_bits(*gpu, call, x, r, true, got, stream.s);
  }
  cudaGraphExecDestroy(exec);
}

// load_layers under a budget: the first layers that fit on the GPU (each
// holding exactly what the placement counted), the rest host-memory layers
// that compute what the CPU layers of the same checkpoint compute.
TEST(HostExpertsLayer, LoadLayersSplitsUnderADeviceBudget) {
  MXMOE_SKIP_WITHOUT_GPU();
  const MoeShape s{8, 320, 224, 2};
  testing::TempDir dir;
  std::vector<MoeWeights> weights;
  for (uint64_t i = 0; i < 3; ++i) weights.push_back(make_random_weights(s, 111 + i));
  testing::write_hf_checkpoint(dir.path, weights);
  std::vector<std::unique_ptr<MoeLayer>> on_cpu;
  ASSERT_TRUE(load_layers(dir.path.string(), {}, {.device = -1}, &on_cpu).ok());

  BackendKind gpu_kind = BackendKind::kCpu;
  {
    DispatchResult pick;
    ASSERT_TRUE(choose_backend(dispatch_input_for_device("auto", s, 0), &pick).ok());
    gpu_kind = pick.backend;
  }
  LayerPlacement one;
  ASSERT_TRUE(plan_placement(gpu_kind, s, true, 1, std::nullopt, &one).ok());
  for (const auto& [budget, on_gpu] : std::vector<std::pair<std::optional<int64_t>, int64_t>>{
           {std::nullopt, 3}, {one.bytes_per_device_layer * 3 / 2, 1}, {int64_t(0), 0}}) {
    SCOPED_TRACE("budget " + (budget ? std::to_string(*budget) : std::string("none")));
    LoadOptions o;
    o.device = 0;
    o.max_device_bytes = budget;
    o.host_chunk_tokens = 3;
    o.host_stream_tokens = -1;
    std::vector<std::pair<int64_t, int64_t>> seen;
    o.progress = [&](int64_t done, int64_t total) { seen.emplace_back(done, total); };
    std::vector<std::unique_ptr<MoeLayer>> loaded;
    LoadStats stats;
    const Status st = load_layers(dir.path.string(), {}, o, &loaded, &stats);
    ASSERT_TRUE(st.ok()) << st.message();
    ASSERT_EQ(loaded.size(), 3u);
    EXPECT_EQ(stats.device_layers, on_gpu);
    EXPECT_EQ(stats.host_layers, 3 - on_gpu);
    EXPECT_EQ(seen, (std::vector<std::pair<int64_t, int64_t>>{{1, 3}, {2, 3}, {3, 3}}));
    Stream stream;
    const int64_t T = 7;
    for (size_t l = 0; l < loaded.size(); ++l) {
      SCOPED_TRACE("layer " + std::to_string(l));
      const MoeLayer& layer = *loaded[l];
      EXPECT_EQ(layer.device(), 0);
      EXPECT_EQ(layer.host_experts(), int64_t(l) >= on_gpu);
      EXPECT_EQ(layer.device_bytes(), layer.host_experts() ? 0u : size_t(one.bytes_per_device_layer));
      const std::vector<uint16_t> x = random_bf16(size_t(T * s.hidden), 120 + l);
      const Routing r = make_random_routing(T, s.experts, s.topk, 130 + l);
      DeviceCall call(T, s, 0, OutputDtype::kFp32);
      call.put(x, &r, stream.s);
      Dev ws(layer.workspace_bytes(T));
      ASSERT_TRUE(layer.forward(call.args(true), ws.p, layer.workspace_bytes(T), stream.s).ok());
      const std::vector<uint8_t> got = call.get(stream.s);
      const std::vector<uint8_t> want = cpu_forward(*on_cpu[l], x, T, &r, OutputDtype::kFp32);
      if (layer.host_experts()) {
        EXPECT_EQ(got, want);
      } else {
        EXPECT_GT(testing::l2_norm(as_floats(want, OutputDtype::kFp32)), 0.0);
        EXPECT_LE(testing::rel_l2(as_floats(got, OutputDtype::kFp32), as_floats(want, OutputDtype::kFp32)), 1e-2);
      }
    }
  }
}

// A split load that fails in a host-memory layer (a NaN scale in layer 2)
// after the device layers were built: the error names the layer, and no
// layer and no byte of device memory is left.
TEST(HostExpertsLayer, ASplitLoadThatFailsHalfwayLeavesNothing) {
  MXMOE_SKIP_WITHOUT_GPU();
  const MoeShape s{8, 320, 224, 2};
  testing::TempDir dir;
  std::vector<MoeWeights> weights;
  for (uint64_t i = 0; i < 3; ++i) weights.push_back(make_random_weights(s, 141 + i));
  weights[2].w2_scales[5] = 0xFF;
  testing::write_hf_checkpoint(dir.path, weights);
  DispatchResult pick;
  ASSERT_TRUE(choose_backend(dispatch_input_for_device("auto", s, 0), &pick).ok());
  LayerPlacement one;
  ASSERT_TRUE(plan_placement(pick.backend, s, true, 1, std::nullopt, &one).ok());
  auto counting = std::make_shared<testing::CountingAllocator>(cuda_malloc_allocator());
  LoadOptions o;
  o.device = 0;
  o.allocator = counting;
  o.max_device_bytes = one.bytes_per_device_layer;
  std::vector<std::unique_ptr<MoeLayer>> loaded;
  const Status st = load_layers(dir.path.string(), {}, o, &loaded);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
  EXPECT_NE(st.message().find("layer 2"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("0xFF"), std::string::npos) << st.message();
  EXPECT_TRUE(loaded.empty());
  EXPECT_GT(counting->allocations(), 0);  // the device layer was built before the failure
  EXPECT_EQ(counting->live_bytes(), 0u);
}

}  // namespace
}  // namespace mxmoe
#endif
