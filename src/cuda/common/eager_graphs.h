// A layer's eager forwards enqueued as CUDA graphs. On an H200 machine (a
// virtual machine) one cudaLaunchKernelEx costs 2.5-5 us of host time, so a
// decode step's three kernels cost 8-16 us to enqueue, as much as the GPU
// takes for a whole layer and more than for a TP shard (8-14 us); one
// cudaGraphLaunch of the same kernels costs 1.1-2 us and updating one node's
// arguments in place 0.35-0.56 us (2026-12-02, bench/host_overhead). A forward is recorded (recorded_launch.h), not
// launched; its launches then go out as the graph captured for launches of
// the same shape (kernels, grids, shared memory), with only the arguments
// that changed since its last use set on the graph's nodes.
//
// A shape gets its graph the second time it is seen (capture and
// instantiation cost a few hundred microseconds, which a one-off prefill
// length should not pay); until then, and whenever a graph cannot be used
// (the caller's stream is being captured, a CUDA graph call fails), the
// recorded launches are enqueued one by one as before. At most kGraphs graphs
// are kept, the least recently used dropped.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <cuda_runtime.h>

#include "cuda/common/recorded_launch.h"
#include "mxmoe/status.h"

namespace mxmoe::smxx {

class EagerGraphs {
 public:
  static constexpr int kGraphs = 8;
  static constexpr int kShapesSeen = 32;

  EagerGraphs();
  ~EagerGraphs();  // call on the graphs' device
  EagerGraphs(const EagerGraphs&) = delete;
  EagerGraphs& operator=(const EagerGraphs&) = delete;

  // Enqueues `list` on `stream` (of the current device, which the graphs
  // stay on). Thread-safe.
  Status enqueue(const LaunchList& list, cudaStream_t stream, const char* who);

  struct Counts {
    int64_t captured = 0;        // graphs made
    int64_t graph_launches = 0;  // forwards enqueued as a graph
    int64_t arguments_set = 0;   // node arguments updated in place
    int64_t kept = 0;            // graphs held now
  };
  Counts counts();

 private:
  struct Graph;
  // The graph for `list`'s shape, made on its second sighting; null if none.
  Graph* graph_for(const LaunchList& list);
  static Status enqueue_each(const LaunchList& list, cudaStream_t stream, const char* who);

  std::mutex mutex_;
  std::vector<std::unique_ptr<Graph>> graphs_;
  std::vector<uint64_t> seen_;  // shape hashes seen once, oldest first
  uint64_t uses_ = 0;
  Counts counts_;
  cudaStream_t capture_stream_ = nullptr;
  bool broken_ = false;  // a graph call failed: enqueue one by one from now on
};

}  // namespace mxmoe::smxx
