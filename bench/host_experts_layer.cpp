// A host-memory layer's forward (backend "cpu" on a GPU: experts in host
// memory, x and y on the GPU) against what bounds it: the CPU layer's forward
// on the same threads, plus the copies it adds (x and the routing to pinned
// host memory, y back), timed alone on the stream in the same order. For each
// T: medians over `iterations` forwards whose routing rotates through 16 sets
// (so the experts touched, and the bytes read, change), in microseconds,
// eager and replayed from CUDA graphs (one per routing set), and the ratio
// host layer / (cpu + copies). Also the pinned copy rates of 64 MB.
// Usage: host_experts_layer [--experts 128] [--tokens 1,4,16,64,256]
//                           [--iterations 50] [--blocking-sync 1] [--stream 1] [--json FILE]
// The threads are OpenMP's (OMP_NUM_THREADS), for both layers.
// --blocking-sync 1: the thread that waits for the stream sleeps instead of
// spinning on a core (cudaDeviceScheduleBlockingSync), which the spin would
// otherwise take from the CPU work.
// --stream 1: the forwards that stream the experts to the GPU instead
// (host_stream_tokens = 1) against what bounds them: the PCIe time of the
// experts the routing touches (at the measured pinned rate) and the GPU
// layer's own forward; beside them the CPU layer's time, which the stream
// replaces from stream_from_tokens() on.
#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "api/host_stream_heuristics.h"
#include "mxmoe/cpu.h"
#include "mxmoe/format.h"
#include "mxmoe/layer.h"

namespace {

using namespace mxmoe;
using Clock = std::chrono::steady_clock;

constexpr int kRoutingSets = 16;

#define CHECK_CUDA(x)                                                                  \
  do {                                                                                 \
    const cudaError_t e_ = (x);                                                        \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                    \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

void check(const Status& st) {
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.message().c_str());
    std::exit(1);
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median wall microseconds of call(i) over `n` calls after `warm` untimed ones.
double median_us(int n, int warm, const std::function<void(int)>& call) {
  for (int i = 0; i < warm; ++i) call(i);
  std::vector<double> us;
  for (int i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    call(i);
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return median(us);
}

// GB/s of a 64 MB copy between pinned host memory and the device.
double copy_rate(cudaMemcpyKind kind, cudaStream_t stream) {
  const size_t bytes = size_t(64) << 20;
  void *host = nullptr, *dev = nullptr;
  CHECK_CUDA(cudaHostAlloc(&host, bytes, cudaHostAllocDefault));
  CHECK_CUDA(cudaMalloc(&dev, bytes));
  const bool down = kind == cudaMemcpyDeviceToHost;
  const double us = median_us(9, 2, [&](int) {
    CHECK_CUDA(cudaMemcpyAsync(down ? host : dev, down ? dev : host, bytes, kind, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
  });
  cudaFreeHost(host);
  cudaFree(dev);
  return double(bytes) / us / 1e3;
}

std::vector<int64_t> parse_list(const char* s) {
  std::vector<int64_t> v;
  for (const char* p = s; *p;) {
    v.push_back(std::strtoll(p, const_cast<char**>(&p), 10));
    if (*p == ',') ++p;
  }
  return v;
}

// Device copies of each routing set of T tokens, and x and y.
struct DeviceInputs {
  void *x = nullptr, *y = nullptr;
  std::vector<void*> ids, weights;
  DeviceInputs(const std::vector<uint16_t>& xh, const std::vector<Routing>& routes, int64_t T, int64_t k) {
    CHECK_CUDA(cudaMalloc(&x, xh.size() * 2));
    CHECK_CUDA(cudaMalloc(&y, xh.size() * 2));
    CHECK_CUDA(cudaMemcpy(x, xh.data(), xh.size() * 2, cudaMemcpyHostToDevice));
    for (const Routing& r : routes) {
      ids.push_back(nullptr);
      weights.push_back(nullptr);
      CHECK_CUDA(cudaMalloc(&ids.back(), size_t(T * k) * 4));
      CHECK_CUDA(cudaMalloc(&weights.back(), size_t(T * k) * 4));
      CHECK_CUDA(cudaMemcpy(ids.back(), r.ids.data(), size_t(T * k) * 4, cudaMemcpyHostToDevice));
      CHECK_CUDA(cudaMemcpy(weights.back(), r.weights.data(), size_t(T * k) * 4, cudaMemcpyHostToDevice));
    }
  }
  ~DeviceInputs() {
    for (void* p : ids) cudaFree(p);
    for (void* p : weights) cudaFree(p);
    cudaFree(x);
    cudaFree(y);
  }
  LayerForwardArgs args(int64_t T, int r) const {
    return {.x = static_cast<uint16_t*>(x), .tokens = T, .topk_ids = static_cast<int32_t*>(ids[size_t(r)]),
            .topk_weights = static_cast<float*>(weights[size_t(r)]), .y = y};
  }
};

// Bench inputs of T tokens: x (deterministic, O(1) values) and the routing sets.
std::vector<uint16_t> bench_x(int64_t T, int64_t H) {
  std::vector<uint16_t> x(size_t(T * H));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float_to_bf16(float(int64_t(i * 2654435761u % 2001) - 1000) / 500.0f);
  return x;
}

// The experts a routing set touches.
int64_t touched_experts(const Routing& r, int64_t experts) {
  std::vector<char> hit(size_t(experts), 0);
  for (int32_t id : r.ids) hit[size_t(id)] = 1;
  return std::count(hit.begin(), hit.end(), 1);
}

// --stream 1: streamed forwards (eager and from graphs) against the PCIe time
// of the touched experts and the GPU layer's forward.
void stream_rows(const MoeShape& s, const MoeWeights& w, const std::vector<int64_t>& tokens, int iterations,
                 cudaStream_t stream, double h2d_gbs, nlohmann::json* report) {
  std::unique_ptr<MoeLayer> cpu, host, gpu;
  check(MoeLayer::create(w.view(), {.backend = "cpu", .device = -1}, &cpu));
  const auto t0 = Clock::now();
  check(MoeLayer::create(w.view(), {.backend = "cpu", .device = 0, .host_stream_tokens = 1}, &host));
  const double create_s = std::chrono::duration<double>(Clock::now() - t0).count();
  check(MoeLayer::create(w.view(), {.device = 0}, &gpu));
  const int threads = omp_get_max_threads();
  fmt::print("host layer created (pack + pin) in {:.2f} s; {}\n", create_s, host->backend_reason());
  fmt::print("stream_from_tokens at {} threads: {}\n", threads, stream_from_tokens(s, threads));
  (*report)["create_s"] = create_s;
  (*report)["stream_from_tokens"] = stream_from_tokens(s, threads);
  fmt::print("{:>6} {:>10} {:>10} {:>10} {:>10} {:>8} {:>10} {:>8}\n", "T", "cpu_us", "stream_us", "graph_us",
             "gpu_us", "touched", "pcie_us", "x_bound");
  const double expert_bytes = host_expert_bytes(s);
  for (const int64_t T : tokens) {
    const std::vector<uint16_t> x = bench_x(T, s.hidden);
    std::vector<Routing> routes;
    for (int r = 0; r < kRoutingSets; ++r) routes.push_back(make_random_routing(T, s.experts, s.topk, 100 + r));
    double touched = 0;
    for (const Routing& r : routes) touched += double(touched_experts(r, s.experts)) / kRoutingSets;
    std::vector<uint16_t> y_host(x.size());
    std::vector<uint8_t> cws(cpu->workspace_bytes(T));
    const double cpu_us = median_us(std::min(iterations, 5), 1, [&](int i) {
      const Routing& r = routes[size_t(i % kRoutingSets)];
      check(cpu->forward({.x = x.data(), .tokens = T, .topk_ids = r.ids.data(), .topk_weights = r.weights.data(),
                          .y = y_host.data()},
                         cws.data(), cws.size(), nullptr));
    });
    const DeviceInputs in(x, routes, T, s.topk);
    const size_t ws_bytes = std::max(host->forward_workspace_bytes(T), gpu->forward_workspace_bytes(T));
    void* ws = nullptr;
    CHECK_CUDA(cudaMalloc(&ws, std::max<size_t>(ws_bytes, 256)));
    auto timed = [&](const MoeLayer& layer) {
      return median_us(iterations, 3, [&](int i) {
        check(layer.forward(in.args(T, i % kRoutingSets), ws, ws_bytes, stream));
        CHECK_CUDA(cudaStreamSynchronize(stream));
      });
    };
    const double stream_us = timed(*host), gpu_us = timed(*gpu);
    std::vector<cudaGraphExec_t> graphs(kRoutingSets);
    for (int r = 0; r < kRoutingSets; ++r) {
      cudaGraph_t g;
      CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
      check(host->forward(in.args(T, r), ws, ws_bytes, stream));
      CHECK_CUDA(cudaStreamEndCapture(stream, &g));
      CHECK_CUDA(cudaGraphInstantiate(&graphs[size_t(r)], g, 0));
      cudaGraphDestroy(g);
    }
    const double graph_us = median_us(iterations, 3, [&](int i) {
      CHECK_CUDA(cudaGraphLaunch(graphs[size_t(i % kRoutingSets)], stream));
      CHECK_CUDA(cudaStreamSynchronize(stream));
    });
    for (cudaGraphExec_t g : graphs) cudaGraphExecDestroy(g);
    cudaFree(ws);
    const double pcie_us = touched * expert_bytes / (h2d_gbs * 1e3), bound = std::max(pcie_us, gpu_us);
    fmt::print("{:>6} {:>10.1f} {:>10.1f} {:>10.1f} {:>10.1f} {:>8.1f} {:>10.1f} {:>8.2f}\n", T, cpu_us, stream_us,
               graph_us, gpu_us, touched, pcie_us, stream_us / bound);
    (*report)["rows"].push_back({{"tokens", T},
                                 {"cpu_us", cpu_us},
                                 {"stream_us", stream_us},
                                 {"graph_us", graph_us},
                                 {"gpu_us", gpu_us},
                                 {"touched_experts", touched},
                                 {"pcie_us", pcie_us},
                                 {"x_bound", stream_us / bound},
                                 {"graph_x_bound", graph_us / bound}});
  }
}

}  // namespace

int main(int argc, char** argv) {
  int64_t experts = 128;
  int iterations = 50;
  std::vector<int64_t> tokens = {1, 4, 16, 64, 256};
  std::string json_path;
  bool blocking = false, streamed = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--experts")) experts = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--tokens")) tokens = parse_list(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--iterations")) iterations = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--json")) json_path = argv[i + 1];
    else if (!std::strcmp(argv[i], "--blocking-sync")) blocking = std::atoi(argv[i + 1]) != 0;
    else if (!std::strcmp(argv[i], "--stream")) streamed = std::atoi(argv[i + 1]) != 0;
  }
  if (blocking) CHECK_CUDA(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
  const MoeShape s{experts, 2880, 2880, 4};
  const int threads = omp_get_max_threads();
  const int64_t H = s.hidden, k = s.topk, max_t = *std::max_element(tokens.begin(), tokens.end());
  fmt::print("E={} H={} I={} top-{}; {} threads of {}; {}; {} sync\n", s.experts, s.hidden, s.intermediate, s.topk,
             threads, cpu_model_name(), describe_cpu(), blocking ? "blocking" : "spinning");
  const MoeWeights w = make_random_weights(s, 7);
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  const double d2h = copy_rate(cudaMemcpyDeviceToHost, stream), h2d = copy_rate(cudaMemcpyHostToDevice, stream);
  fmt::print("{}: pinned copies of 64 MB: device to host {:.1f} GB/s, host to device {:.1f} GB/s\n", prop.name, d2h,
             h2d);
  // The cores CUDA's host-function thread may run on: the OpenMP team it
  // starts inherits them.
  int callback_cpus = 0;
  CHECK_CUDA(cudaLaunchHostFunc(
      stream,
      [](void* out) {
        cpu_set_t set;
        *static_cast<int*>(out) = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : -1;
      },
      &callback_cpus));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  cpu_set_t mine;
  fmt::print("cores allowed: this thread {}, CUDA's host-function thread {}\n",
             sched_getaffinity(0, sizeof mine, &mine) == 0 ? CPU_COUNT(&mine) : -1, callback_cpus);
  nlohmann::json report = {{"shape", {s.experts, s.hidden, s.intermediate, s.topk}},
                           {"threads", threads},
                           {"blocking_sync", blocking},
                           {"callback_cpus", callback_cpus},
                           {"cpu", cpu_model_name()},
                           {"gpu", prop.name},
                           {"d2h_gbs", d2h},
                           {"h2d_gbs", h2d},
                           {"rows", nlohmann::json::array()}};
  if (streamed) {
    stream_rows(s, w, tokens, iterations, stream, h2d, &report);
    if (!json_path.empty()) std::ofstream(json_path) << report.dump(2) << "\n";
    return 0;
  }
  std::unique_ptr<MoeLayer> cpu, host;
  check(MoeLayer::create(w.view(), {.backend = "cpu", .device = -1}, &cpu));
  check(MoeLayer::create(w.view(), {.backend = "cpu", .device = 0, .host_threads = threads, .host_chunk_tokens = max_t,
                                    .host_stream_tokens = -1},
                         &host));
  fmt::print("{:>6} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8}\n", "T", "cpu_us", "copies_us", "host_us", "graph_us",
             "x_bound", "graph_x");
  for (const int64_t T : tokens) {
    const std::vector<uint16_t> x = bench_x(T, H);
    std::vector<Routing> routes;
    for (int r = 0; r < kRoutingSets; ++r) routes.push_back(make_random_routing(T, s.experts, k, 100 + r));
    // The CPU layer on host pointers.
    std::vector<uint16_t> y_host(size_t(T * H));
    std::vector<uint8_t> ws(cpu->workspace_bytes(T));
    const double cpu_us = median_us(iterations, 5, [&](int i) {
      const Routing& r = routes[size_t(i % kRoutingSets)];
      check(cpu->forward({.x = x.data(), .tokens = T, .topk_ids = r.ids.data(), .topk_weights = r.weights.data(),
                          .y = y_host.data()},
                         ws.data(), ws.size(), nullptr));
    });
    const DeviceInputs in(x, routes, T, k);
    void* xd = in.x;
    void* yd = in.y;
    const std::vector<void*>&ids = in.ids, &wts = in.weights;
    void* pinned = nullptr;
    CHECK_CUDA(cudaHostAlloc(&pinned, x.size() * 2 + size_t(T * k) * 8 + x.size() * 2, cudaHostAllocDefault));
    uint8_t* p = static_cast<uint8_t*>(pinned);
    // The copies alone, in the layer's order.
    const double copies_us = median_us(iterations, 5, [&](int i) {
      CHECK_CUDA(cudaMemcpyAsync(p, xd, x.size() * 2, cudaMemcpyDeviceToHost, stream));
      CHECK_CUDA(cudaMemcpyAsync(p + x.size() * 2, ids[i % kRoutingSets], size_t(T * k) * 4, cudaMemcpyDeviceToHost,
                                 stream));
      CHECK_CUDA(cudaMemcpyAsync(p + x.size() * 2 + T * k * 4, wts[i % kRoutingSets], size_t(T * k) * 4,
                                 cudaMemcpyDeviceToHost, stream));
      CHECK_CUDA(cudaMemcpyAsync(yd, p + x.size() * 2 + T * k * 8, x.size() * 2, cudaMemcpyHostToDevice, stream));
      CHECK_CUDA(cudaStreamSynchronize(stream));
    });
    auto args = [&](int r) { return in.args(T, r); };
    const double host_us = median_us(iterations, 10, [&](int i) {
      check(host->forward(args(i % kRoutingSets), nullptr, 0, stream));
      CHECK_CUDA(cudaStreamSynchronize(stream));
    });
    std::vector<cudaGraphExec_t> graphs(kRoutingSets);
    for (int r = 0; r < kRoutingSets; ++r) {
      cudaGraph_t g;
      CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
      check(host->forward(args(r), nullptr, 0, stream));
      CHECK_CUDA(cudaStreamEndCapture(stream, &g));
      CHECK_CUDA(cudaGraphInstantiate(&graphs[r], g, 0));
      cudaGraphDestroy(g);
    }
    const double graph_us = median_us(iterations, 10, [&](int i) {
      CHECK_CUDA(cudaGraphLaunch(graphs[size_t(i % kRoutingSets)], stream));
      CHECK_CUDA(cudaStreamSynchronize(stream));
    });
    const double bound = cpu_us + copies_us;
    fmt::print("{:>6} {:>10.1f} {:>10.1f} {:>10.1f} {:>10.1f} {:>8.2f} {:>8.2f}\n", T, cpu_us, copies_us, host_us,
               graph_us, host_us / bound, graph_us / bound);
    report["rows"].push_back({{"tokens", T},
                              {"cpu_us", cpu_us},
                              {"copies_us", copies_us},
                              {"host_us", host_us},
                              {"graph_us", graph_us},
                              {"x_bound", host_us / bound},
                              {"graph_x_bound", graph_us / bound}});
    for (cudaGraphExec_t g : graphs) cudaGraphExecDestroy(g);
    cudaFreeHost(pinned);
  }
  if (!json_path.empty()) std::ofstream(json_path) << report.dump(2) << "\n";
  return 0;
}
