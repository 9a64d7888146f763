// Programmatic dependent launch (SM90+). A kernel launched with the
// programmatic-stream-serialization attribute may be scheduled while the
// kernel before it in the stream is still running: its blocks take SM slots
// as the previous grid's tail drains and hide the launch gap between the small
// kernels of a decode step. Such a kernel must wait before it reads anything
// an earlier kernel wrote. Below SM90 the attribute is not set (see
// launch_kernel) and both calls compile to nothing.
#pragma once

#include <type_traits>
#include <utility>

#include <cuda_runtime.h>

#include "cuda/common/recorded_launch.h"

namespace mxmoe::smxx {

// Blocks until every earlier kernel in the stream has completed and its
// writes are visible.
__device__ __forceinline__ void wait_for_previous_kernels() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel in the stream be scheduled once every block of this
// grid has called it (or exited). Call it after wait_for_previous_kernels, so
// a kernel two launches ahead cannot start before this one's inputs exist.
__device__ __forceinline__ void allow_next_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// How a kernel is launched beside its grid and block: programmatic dependent
// launch when `overlap` is set (the device is SM90+), clusters of `cluster_x`
// blocks along x when above 1 (SM90+; the grid's x a multiple of it), a
// cooperative launch when `cooperative` (every block co-resident, so the
// kernel may wait at grid-wide barriers; the grid at most what the device
// holds at once).
struct LaunchMode {
  bool overlap = false;
  unsigned cluster_x = 1;
  bool cooperative = false;
};

// Launches `kernel` on `stream` in `mode`. While this thread records
// (recorded_launch.h) the launch is appended to the recording instead: every
// launch of a recorded forward must come through here, or it would run out
// of order with the recorded ones.
template <typename... Params, typename... Args>
cudaError_t launch_kernel_in_mode(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                                  cudaStream_t stream, LaunchMode mode, Args&&... args) {
  static_assert(sizeof...(Params) > 0, "launch_kernel: kernels take at least one argument");
  static_assert((std::is_trivially_copyable_v<Params> && ...),
                "launch_kernel: a recorded launch keeps a byte copy of each argument");
  if (LaunchList* list = recording_list())
    return [&](Params... coerced) {
      const void* values[] = {&coerced...};
      const size_t size[] = {sizeof(Params)...};
      const size_t align[] = {alignof(Params)...};
      return record_launch(list, reinterpret_cast<const void*>(kernel), grid, block, smem, mode.overlap,
                           mode.cluster_x, mode.cooperative, int(sizeof...(Params)), values, size, align);
    }(std::forward<Args>(args)...);
  cudaLaunchAttribute attrs[3]{};
  const cudaLaunchConfig_t cfg =
      launch_config(grid, block, smem, stream, mode.overlap, mode.cluster_x, mode.cooperative, attrs);
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// Launches `kernel` on `stream`, with programmatic dependent launch when
// `overlap` is set (the device is SM90+), in clusters of `cluster_x` blocks
// along x when it is above 1.
template <typename... Params, typename... Args>
cudaError_t launch_kernel_in_clusters(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                                      cudaStream_t stream, bool overlap, unsigned cluster_x, Args&&... args) {
  return launch_kernel_in_mode(kernel, grid, block, smem, stream, LaunchMode{overlap, cluster_x, false},
                               std::forward<Args>(args)...);
}

// Launches `kernel` on `stream`, with programmatic dependent launch when
// `overlap` is set (the device is SM90+).
template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, bool overlap, Args&&... args) {
  return launch_kernel_in_clusters(kernel, grid, block, smem, stream, overlap, 1u, std::forward<Args>(args)...);
}

}  // namespace mxmoe::smxx
