#include "cuda/common/eager_graphs.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace mxmoe::smxx {
namespace {

bool same_shape(const LaunchList& a, const LaunchList& b) {
  if (a.count != b.count) return false;
  for (int i = 0; i < a.count; ++i)
    if (!a.launches[i].same_shape(b.launches[i])) return false;
  return true;
}

uint64_t shape_hash(const LaunchList& list) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i, v >>= 8) h = (h ^ (v & 0xFF)) * 1099511628211ull;
  };
  mix(uint64_t(list.count));
  for (int i = 0; i < list.count; ++i) {
    const RecordedLaunch& l = list.launches[i];
    mix(reinterpret_cast<uintptr_t>(l.func));
    mix(l.grid.x | uint64_t(l.grid.y) << 32);
    mix(l.grid.z | uint64_t(l.block.x) << 32);
    mix(l.block.y | uint64_t(l.block.z) << 32);
    mix(l.smem);
    mix(uint64_t(l.overlap) | uint64_t(l.cooperative) << 1 | uint64_t(l.cluster_x) << 2 | uint64_t(l.args) << 34);
    mix(l.used);
  }
  return h;
}

// Whether kernel node `p` runs launch `l`: the same kernel with the same argument bytes.
bool node_runs(const cudaKernelNodeParams& p, const RecordedLaunch& l) {
  if (p.func != l.func || p.kernelParams == nullptr) return false;
  for (int i = 0; i < l.args; ++i)
    if (std::memcmp(p.kernelParams[i], l.bytes + l.offset[i], l.size[i]) != 0) return false;
  return true;
}

}  // namespace

struct EagerGraphs::Graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaGraphNode_t nodes[LaunchList::kMaxLaunches] = {};  // node i runs launches.launches[i]
  LaunchList launches;                                   // the arguments the nodes hold now
  uint64_t last_use = 0;

  ~Graph() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }

  // Captures `list` on `stream` (not run: a capture only records) and
  // instantiates it; false if any step fails.
  bool capture(const LaunchList& list, cudaStream_t stream) {
    if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return false;
    cudaError_t err = cudaSuccess;
    for (int i = 0; i < list.count && err == cudaSuccess; ++i) err = list.launches[i].enqueue(stream);
    const cudaError_t end = cudaStreamEndCapture(stream, &graph);  // ends the capture whatever happened
    if (err != cudaSuccess || end != cudaSuccess) return false;
    size_t n = 0;
    if (cudaGraphGetNodes(graph, nullptr, &n) != cudaSuccess || n != size_t(list.count)) return false;
    cudaGraphNode_t found[LaunchList::kMaxLaunches];
    if (cudaGraphGetNodes(graph, found, &n) != cudaSuccess) return false;
    // Each node to the launch it runs (the list's launches are distinct or
    // interchangeable: equal kernels with equal arguments).
    bool taken[LaunchList::kMaxLaunches] = {};
    for (int i = 0; i < list.count; ++i) {
      for (size_t j = 0; j < n && !nodes[i]; ++j) {
        cudaGraphNodeType type{};
        cudaKernelNodeParams p{};
        if (taken[j] || cudaGraphNodeGetType(found[j], &type) != cudaSuccess || type != cudaGraphNodeTypeKernel ||
            cudaGraphKernelNodeGetParams(found[j], &p) != cudaSuccess || !node_runs(p, list.launches[i]))
          continue;
        nodes[i] = found[j];
        taken[j] = true;
      }
      if (!nodes[i]) return false;
    }
    if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) return false;
    launches = list;
    return true;
  }

  // Sets the arguments that differ from what the nodes hold and launches.
  bool launch(const LaunchList& list, cudaStream_t stream, int64_t* arguments_set) {
    for (int i = 0; i < list.count; ++i) {
      const RecordedLaunch& l = list.launches[i];
      if (l.same_arguments(launches.launches[i])) continue;
      void* params[RecordedLaunch::kMaxArgs];
      l.arguments(params);
      cudaKernelNodeParams p{};
      p.func = const_cast<void*>(l.func);
      p.gridDim = l.grid;
      p.blockDim = l.block;
      p.sharedMemBytes = unsigned(l.smem);
      p.kernelParams = params;
      // Affects later launches of the graph only, not one already enqueued.
      if (cudaGraphExecKernelNodeSetParams(exec, nodes[i], &p) != cudaSuccess) return false;
      launches.launches[i] = l;
      ++*arguments_set;
    }
    return cudaGraphLaunch(exec, stream) == cudaSuccess;
  }
};

EagerGraphs::EagerGraphs() = default;

EagerGraphs::~EagerGraphs() {
  graphs_.clear();
  if (capture_stream_) cudaStreamDestroy(capture_stream_);
}

Status EagerGraphs::enqueue_each(const LaunchList& list, cudaStream_t stream, const char* who) {
  for (int i = 0; i < list.count; ++i)
    if (const cudaError_t err = list.launches[i].enqueue(stream); err != cudaSuccess)
      return Status::CudaError(fmt::format("{}: launch {} of the forward: {}", who, i + 1, cudaGetErrorString(err)));
  return Status::Ok();
}

EagerGraphs::Graph* EagerGraphs::graph_for(const LaunchList& list) {
  for (const auto& g : graphs_)
    if (same_shape(g->launches, list)) return g.get();
  const uint64_t h = shape_hash(list);
  const auto seen = std::find(seen_.begin(), seen_.end(), h);
  if (seen == seen_.end()) {
    if (seen_.size() == size_t(kShapesSeen)) seen_.erase(seen_.begin());
    seen_.push_back(h);
    return nullptr;
  }
  seen_.erase(seen);
  if (!capture_stream_ && cudaStreamCreateWithFlags(&capture_stream_, cudaStreamNonBlocking) != cudaSuccess) {
    capture_stream_ = nullptr;
    broken_ = true;
    return nullptr;
  }
  auto g = std::make_unique<Graph>();
  if (!g->capture(list, capture_stream_)) {
    broken_ = true;
    return nullptr;
  }
  if (graphs_.size() == size_t(kGraphs))
    graphs_.erase(std::min_element(graphs_.begin(), graphs_.end(),
                                   [](const auto& a, const auto& b) { return a->last_use < b->last_use; }));
  graphs_.push_back(std::move(g));
  ++counts_.captured;
  return graphs_.back().get();
}

EagerGraphs::Counts EagerGraphs::counts() {
  std::lock_guard<std::mutex> lock(mutex_);
  Counts c = counts_;
  c.kept = int64_t(graphs_.size());
  return c;
}

Status EagerGraphs::enqueue(const LaunchList& list, cudaStream_t stream, const char* who) {
  if (list.overflow)
    return Status::CudaError(fmt::format("{}: the forward made more launches than a recording holds ({})", who,
                                         LaunchList::kMaxLaunches));
  if (list.count == 0) return Status::Ok();
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capturing) != cudaSuccess) {
    cudaGetLastError();  // not sticky; the launches say what is wrong with the stream
    return enqueue_each(list, stream, who);
  }
  // Into a capture the launches go as they are: they become the caller's graph's nodes.
  if (capturing != cudaStreamCaptureStatusNone) return enqueue_each(list, stream, who);
  std::lock_guard<std::mutex> lock(mutex_);
  if (!broken_)
    if (Graph* g = graph_for(list)) {
      if (g->launch(list, stream, &counts_.arguments_set)) {
        g->last_use = ++uses_;
        ++counts_.graph_launches;
        return Status::Ok();
      }
      broken_ = true;
    }
  if (broken_) {
    cudaGetLastError();  // a graph call's error is not the caller's
    graphs_.clear();
  }
  return enqueue_each(list, stream, who);
}

}  // namespace mxmoe::smxx
