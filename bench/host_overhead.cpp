// The host time of one eager MoeLayer::forward at T = 1 (gpt-oss-20b's full
// layer and gpt-oss-120b's TP8 shard, router inside and caller's routing, on
// every GPU backend of the device) beside the CUDA runtime calls a forward is
// made of: a launch with and without programmatic dependent launch, the
// pointer and device queries. Host time: the wall time of the call, the GPU
// waited for between calls (outside the timed span) so the launch queue never
// fills. Medians of 2000 calls, in microseconds.
// Usage: host_overhead [--json FILE]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "mxmoe/dispatch.h"
#include "mxmoe/layer.h"

cudaError_t launch_empty_kernel(cudaStream_t stream, bool overlap, int blocks);  // empty_kernel.cu
cudaError_t launch_empty_kernel_plain(cudaStream_t stream);
const void* empty_kernel_address();

namespace {

constexpr int kCalls = 2000;

// Median host microseconds of `call`, each call followed by `settle` (untimed).
double median_us(const std::function<void()>& call, const std::function<void()>& settle) {
  std::vector<double> us;
  us.reserve(kCalls);
  for (int i = 0; i < kCalls + 200; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    const auto t1 = std::chrono::steady_clock::now();
    settle();
    if (i >= 200) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
  return us[us.size() / 2];
}

struct Row {
  std::string what;
  double us;
};

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "host_overhead: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace mxmoe;
  const char* json = argc == 3 && std::strcmp(argv[1], "--json") == 0 ? argv[2] : nullptr;
  check(cudaSetDevice(0), "cudaSetDevice");
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  const auto sync = [&] { cudaStreamSynchronize(stream); };
  const auto nothing = [] {};
  std::vector<Row> rows;

  void* probe = nullptr;
  check(cudaMalloc(&probe, 1 << 20), "cudaMalloc");
  int dev = 0, value = 0;
  rows.push_back({"cudaGetDevice", median_us([&] { cudaGetDevice(&dev); }, nothing)});
  rows.push_back({"cudaDeviceGetAttribute (SM count)",
                  median_us([&] { cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, 0); }, nothing)});
  cudaPointerAttributes attr{};
  rows.push_back({"cudaPointerGetAttributes", median_us([&] { cudaPointerGetAttributes(&attr, probe); }, nothing)});
  cudaStreamCaptureStatus capture{};
  rows.push_back({"cudaStreamIsCapturing", median_us([&] { cudaStreamIsCapturing(stream, &capture); }, nothing)});
  rows.push_back({"launch <<<>>>", median_us([&] { launch_empty_kernel_plain(stream); }, sync)});
  for (const bool pdl : {false, true})
    rows.push_back({pdl ? "cudaLaunchKernelEx, programmatic serialization" : "cudaLaunchKernelEx, no attribute",
                    median_us([&] { launch_empty_kernel(stream, pdl, 1); }, sync)});
  rows.push_back({"3 launches, programmatic serialization", median_us([&] {
                    for (int i = 0; i < 3; ++i) launch_empty_kernel(stream, true, 132);
                  }, sync)});

  // A captured graph of n empty kernels (programmatic edges between them),
  // its launch, and the update of one kernel node's parameters in place.
  for (const int n : {1, 3}) {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
    for (int i = 0; i < n; ++i) launch_empty_kernel(stream, true, 132);
    check(cudaStreamEndCapture(stream, &graph), "end capture");
    check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
    rows.push_back({fmt::format("cudaGraphLaunch, {} kernel(s)", n),
                    median_us([&] { cudaGraphLaunch(exec, stream); }, sync)});
    if (n == 3) {
      size_t count = 0;
      check(cudaGraphGetNodes(graph, nullptr, &count), "nodes");
      std::vector<cudaGraphNode_t> nodes(count);
      check(cudaGraphGetNodes(graph, nodes.data(), &count), "nodes");
      int arg = 7;
      void* args[] = {&arg};
      cudaKernelNodeParams p{};
      p.func = const_cast<void*>(empty_kernel_address());
      p.gridDim = dim3(132);
      p.blockDim = dim3(256);
      p.kernelParams = args;
      rows.push_back({"cudaGraphExecKernelNodeSetParams, one node",
                      median_us([&] { check(cudaGraphExecKernelNodeSetParams(exec, nodes[0], &p), "set"); }, nothing)});
      rows.push_back({"3 node updates + cudaGraphLaunch", median_us([&] {
                        for (cudaGraphNode_t node : nodes) cudaGraphExecKernelNodeSetParams(exec, node, &p);
                        cudaGraphLaunch(exec, stream);
                      }, sync)});
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }

  struct Shape {
    const char* name;
    MoeShape shape;
  };
  for (const Shape& sh : {Shape{"gpt-oss-20b", {32, 2880, 2880, 4}}, Shape{"gpt-oss-120b TP8", {128, 2880, 384, 4}}}) {
    const MoeWeights w = make_random_weights(sh.shape, 1);
    const Routing r = make_random_routing(1, sh.shape.experts, sh.shape.topk, 2);
    for (const char* backend : {"portable", "sm90"}) {
      std::string why;
      if (!backend_available(*parse_backend_name(backend),
                             dispatch_input_for_device(backend, sh.shape, 0), &why)) {
        std::printf("%s %s: skipped (%s)\n", sh.name, backend, why.c_str());
        continue;
      }
      std::unique_ptr<MoeLayer> layer;
      LayerOptions options;
      options.backend = backend;
      options.device = 0;
      const Status st = MoeLayer::create(w.view(), options, &layer);
      if (!st.ok()) {
        std::fprintf(stderr, "host_overhead: %s\n", st.message().c_str());
        return 1;
      }
      const size_t wsb = layer->workspace_bytes(1);
      void *x = nullptr, *y = nullptr, *ws = nullptr, *ids = nullptr, *rw = nullptr;
      check(cudaMalloc(&x, size_t(sh.shape.hidden) * 2), "x");
      check(cudaMemset(x, 0x3C, size_t(sh.shape.hidden) * 2), "x");  // 0x3C3C: bf16 0.0115
      check(cudaMalloc(&y, size_t(sh.shape.hidden) * 2), "y");
      check(cudaMalloc(&ws, wsb), "workspace");
      check(cudaMalloc(&ids, r.ids.size() * 4), "ids");
      check(cudaMalloc(&rw, r.weights.size() * 4), "weights");
      check(cudaMemcpy(ids, r.ids.data(), r.ids.size() * 4, cudaMemcpyHostToDevice), "ids");
      check(cudaMemcpy(rw, r.weights.data(), r.weights.size() * 4, cudaMemcpyHostToDevice), "weights");
      check(cudaDeviceSynchronize(), "upload");
      for (const bool routed : {false, true}) {
        LayerForwardArgs a;
        a.x = static_cast<const uint16_t*>(x);
        a.tokens = 1;
        a.y = y;
        if (routed) {
          a.topk_ids = static_cast<const int32_t*>(ids);
          a.topk_weights = static_cast<const float*>(rw);
        }
        Status last = Status::Ok();
        const double us = median_us([&] { last = layer->forward(a, ws, wsb, stream); }, sync);
        if (!last.ok()) {
          std::fprintf(stderr, "host_overhead: %s\n", last.message().c_str());
          return 1;
        }
        rows.push_back({fmt::format("MoeLayer::forward T=1 {} {} ({})", sh.name, backend,
                                    routed ? "caller's routing" : "router"),
                        us});
      }
      {  // the same forward captured once and replayed
        LayerForwardArgs a;
        a.x = static_cast<const uint16_t*>(x);
        a.tokens = 1;
        a.y = y;
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
        const Status st2 = layer->forward(a, ws, wsb, stream);
        check(cudaStreamEndCapture(stream, &graph), "end capture");
        if (!st2.ok()) return 1;
        check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
        rows.push_back({fmt::format("cudaGraphLaunch of MoeLayer::forward T=1 {} {} (router)", sh.name, backend),
                        median_us([&] { cudaGraphLaunch(exec, stream); }, sync)});
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
      }
      for (void* p : {x, y, ws, ids, rw}) cudaFree(p);
    }
  }
  std::string out = "[";
  for (const Row& r : rows) {
    std::printf("%-64s %8.2f us\n", r.what.c_str(), r.us);
    out += fmt::format("{}{{\"what\": \"{}\", \"host_us\": {:.3f}}}", out.size() > 1 ? ", " : "", r.what, r.us);
  }
  out += "]\n";
  if (json)
    if (FILE* f = std::fopen(json, "w")) {
      std::fputs(out.c_str(), f);
      std::fclose(f);
    }
  cudaFree(probe);
  cudaStreamDestroy(stream);
  return 0;
}
