// A kernel launch kept as data: the kernel, its configuration and a copy of
// its arguments. While a LaunchRecording is active on a thread, launch_kernel
// (pdl.cuh) records there instead of enqueueing, so a layer can hand a whole
// forward to a CUDA graph (eager_graphs.h): on an H200 machine one
// cudaLaunchKernelEx costs 2.5-5 us of host time, a graph launch of the same
// kernels 1.1-2 us (bench/host_overhead, 2026-12-02).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <cuda_runtime.h>

namespace mxmoe::smxx {

struct RecordedLaunch {
  // Room for one kernel's arguments: the largest (GemmParams by value and a
  // few scalars) takes a few hundred bytes.
  static constexpr size_t kMaxArgBytes = 1024;
  static constexpr int kMaxArgs = 24;

  const void* func = nullptr;
  dim3 grid, block;
  size_t smem = 0;
  bool overlap = false;  // programmatic stream serialization (SM90+)
  unsigned cluster_x = 1;
  bool cooperative = false;  // every block co-resident, grid-wide barriers allowed
  int args = 0;
  uint16_t offset[kMaxArgs] = {};  // of each argument in `bytes`
  uint16_t size[kMaxArgs] = {};
  size_t used = 0;
  alignas(16) unsigned char bytes[kMaxArgBytes];

  // Everything but the argument values: launches of one shape can share a
  // graph node, whose arguments are then set.
  bool same_shape(const RecordedLaunch& o) const;
  bool same_arguments(const RecordedLaunch& o) const {
    return used == o.used && std::memcmp(bytes, o.bytes, used) == 0;
  }
  // Pointers to the argument copies, as cudaLaunchKernelExC takes them.
  void arguments(void** out) const;
  // Enqueues the launch on `stream`.
  cudaError_t enqueue(cudaStream_t stream) const;
};

// The launch configuration launch_kernel uses: programmatic dependent launch
// when `overlap`, clusters of `cluster_x` blocks along x when above 1, a
// cooperative launch when `cooperative`.
cudaLaunchConfig_t launch_config(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool overlap,
                                 unsigned cluster_x, bool cooperative, cudaLaunchAttribute (&attrs)[3]);

// The launches a forward made while recording, in order.
struct LaunchList {
  static constexpr int kMaxLaunches = 8;
  RecordedLaunch launches[kMaxLaunches];
  int count = 0;
  bool overflow = false;  // more launches than fit: the list is unusable
};

// Makes launch_kernel record into `list` on this thread for the scope.
class LaunchRecording {
 public:
  explicit LaunchRecording(LaunchList* list);
  ~LaunchRecording();
  LaunchRecording(const LaunchRecording&) = delete;
  LaunchRecording& operator=(const LaunchRecording&) = delete;

 private:
  LaunchList* previous_;
};

// The list this thread records into, or null.
LaunchList* recording_list();

// Appends a launch to `list` (argument `i` is `size[i]` bytes at `values[i]`,
// aligned to `align[i]`); cudaErrorInvalidValue when it does not fit.
cudaError_t record_launch(LaunchList* list, const void* func, dim3 grid, dim3 block, size_t smem, bool overlap,
                          unsigned cluster_x, bool cooperative, int args, const void* const* values, const size_t* size,
                          const size_t* align);

}  // namespace mxmoe::smxx
