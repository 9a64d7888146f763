// One MoE layer across the GPUs of one host: tensor parallel (each GPU holds a
// slice of every expert's intermediate dimension) or expert parallel (each GPU
// holds whole experts). One process, one host thread per GPU, NCCL between
// them (communicators from ncclCommInitAll). No NCCL or CUDA types here.
//
// Tensor parallel, size N in {1, 2, 4, 8}: rank r holds
// shard_tensor_parallel(portable, weights, r, N) (include/mxmoe/prepare.h),
// runs the portable forward on the full x with the same routing (the router is
// replicated, so every rank picks the same experts), and an fp32 all-reduce
// (sum) of y adds the ranks' partial outputs.
//
// Expert parallel, size N dividing E: rank r holds experts
// [r E/N, (r+1) E/N) and owns a contiguous slice of the tokens. It routes its
// tokens, sends each (token, slot) row to the rank owning the slot's expert,
// computes the rows it received, sends the results back, and sums each token's
// k rows in slot order. One host synchronisation per forward (after the
// all-to-all of row counts) sizes the exchange. Results are deterministic.
//
// Creating a layer sets NCCL_NVLS_ENABLE=0 in the process environment before
// NCCL starts (NVLink multicast stays off). A failure on one rank stops the
// others (their communicators are aborted) rather than leaving them waiting;
// after that the layer only reports the failure and must be created again.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "mxmoe/allocator.h"
#include "mxmoe/backend.h"
#include "mxmoe/moe.h"
#include "mxmoe/status.h"

namespace mxmoe {

enum class ParallelMode { kTensor, kExpert };
const char* parallel_mode_name(ParallelMode mode);  // "tp", "ep"

// Ranks of one layer: at most the GPUs of one host.
inline constexpr int kMaxParallelRanks = 8;

struct ParallelConfig {
  ParallelMode mode = ParallelMode::kTensor;
  int size = 1;                // ranks, one GPU each
  std::vector<int> devices;    // CUDA device of each rank; empty: 0 .. size-1
  // Each rank's single-GPU forward: portable (tp, ep) or sm90 (tp, SM90 GPUs).
  BackendKind backend = BackendKind::kPortable;
  // Where every rank's device memory comes from, in the order of the rank's
  // own stream (null: cuda_malloc_allocator()).
  std::shared_ptr<DeviceAllocator> allocator;
};

// Timing of one forward across the ranks (see ParallelLayer::time_forward).
struct ParallelTiming {
  double median_us = 0;   // per forward, the slowest rank
  double min_us = 0;
  double compute_us = 0;  // per forward, the slowest rank's compute alone
  double comm_share = 0;  // 1 - compute_us / median_us, clamped to [0, 1]
  int iterations = 0;     // forwards timed
};

class ParallelLayer {
 public:
  virtual ~ParallelLayer() = default;
  virtual const ParallelConfig& config() const = 0;  // devices filled in

  // Synchronous host-to-host forward, like Backend::forward_host: x float
  // [T, H] -> y float [T, H]; `routing` (global expert ids) may be null.
  virtual Status forward_host(const float* x, int64_t tokens, const RoutingView* routing,
                              float* y) = 0;

  // Times the forward at `tokens` over `routing_sets` rotated random routing
  // sets, about `iterations` forwards, after warm-up. Each sample is one forward
  // of every set back to back on every rank, started together (a one-float
  // all-reduce first); its time is the slowest rank's. compute_us: tensor
  // parallel times the same forwards without the all-reduce; expert parallel
  // subtracts the time each rank spends in its exchanges (counts, the host
  // synchronisation, rows out, rows back), measured with events.
  virtual Status time_forward(int64_t tokens, int routing_sets, int iterations, uint64_t seed,
                              ParallelTiming* out) = 0;
};

// Checks what needs no device: size in {1, 2, 4, 8} for tensor parallel, a
// divisor of E (at most kMaxParallelRanks) for expert parallel, `devices`
// empty or `size` distinct non-negative ids, the portable backend (or sm90 for
// tensor parallel), a valid shape.
Status validate_parallel_config(const ParallelConfig& config, const MoeShape& shape);

// The backend a layer runs for `requested` (a backend name, or "auto"): auto
// takes this process's single-GPU choice where the layer can run it (sm90
// under tensor parallel), else portable. Names the layer cannot run are
// refused later by validate_parallel_config.
Status choose_parallel_backend(std::string_view requested, ParallelMode mode, const MoeShape& shape,
                               BackendKind* out);

// Validates, checks the build has NCCL and the host has the devices, shards
// and uploads `weights` (original, unpadded) and creates the communicators.
Status create_parallel_layer(const MoeWeightsView& weights, const ParallelConfig& config,
                             std::unique_ptr<ParallelLayer>* out);

}  // namespace mxmoe
