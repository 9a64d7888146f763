// Pieces the tensor- and expert-parallel layers share: argument checks, host
// inputs, events, and the all-reduce that lines the ranks up before timing.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <cuda_runtime.h>
#include <nccl.h>

#include "cuda/common/device_memory.h"
#include "mxmoe/moe.h"
#include "mxmoe/parallel.h"
#include "mxmoe/status.h"

namespace mxmoe::parallel {

// forward_host's arguments against the layer's shape; without a router the
// routing is mandatory. Checked before any rank starts, so a bad call never
// reaches NCCL.
Status check_forward_args(const char* mode, const MoeShape& shape, bool has_router, const float* x,
                          int64_t tokens, const RoutingView* routing, const float* y);

// The portable pipeline's limits (experts, top-k), checked when a layer is
// created so that no forward stops on them once NCCL operations are queued.
Status check_portable_limits(const char* mode, const MoeShape& shape);

// A rank's non-blocking stream, destroyed with its owner.
class RankStream {
 public:
  RankStream() = default;
  RankStream(RankStream&& o) noexcept : stream_(o.stream_) { o.stream_ = nullptr; }
  RankStream& operator=(RankStream&&) = delete;
  ~RankStream();
  Status create();  // on the current device
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// What a rank holds first: its stream, and where its buffers come from (the
// layer's allocator on the rank's device, in the order of that stream). As
// the ranks' base it is destroyed after their buffers, so the stream outlives
// every buffer given back in its order.
struct RankBase {
  RankBase(RankStream s, std::shared_ptr<DeviceAllocator> allocator, int device)
      : owned_stream(std::move(s)), stream(owned_stream.get()), memory{std::move(allocator), device, stream} {}
  RankStream owned_stream;
  cudaStream_t stream;
  smxx::MemorySource memory;
};

// x rounded to bf16 (the activations the portable kernels read).
std::vector<uint16_t> to_bf16(const float* x, size_t n);

// Timing inputs, drawn as the single-GPU backend draws them: x [T, H] N(0, 1)
// in bf16 from `seed`, routing set i from make_random_routing(seed + i).
struct TimingInputs {
  std::vector<uint16_t> x;
  std::vector<Routing> sets;
};
TimingInputs make_timing_inputs(const MoeShape& shape, int64_t tokens, int sets, uint64_t seed);

// Events on the current device, destroyed with the set.
class EventSet {
 public:
  EventSet() = default;
  EventSet(const EventSet&) = delete;
  EventSet& operator=(const EventSet&) = delete;
  ~EventSet();
  Status create(size_t count);
  cudaEvent_t operator[](size_t i) const { return events_[i]; }

 private:
  std::vector<cudaEvent_t> events_;
};

// Microseconds from event `a` to event `b` (both completed).
Status elapsed_us(cudaEvent_t a, cudaEvent_t b, double* us);

// A one-float all-reduce: no rank's GPU passes it before every rank's has
// reached it, so events recorded right after it start the ranks together.
Status start_together(float* scratch, ncclComm_t comm, cudaStream_t stream);

}  // namespace mxmoe::parallel
