// Programmatic dependent launch (SM90+). A kernel launched with the
// programmatic-stream-serialization attribute may be scheduled while the
// kernel before it in the stream is still running: its blocks take SM slots
// as the previous grid's tail drains and hide the launch gap between the small
// kernels of a decode step. Such a kernel must wait before it reads anything
// an earlier kernel wrote. Below SM90 the attribute is not set (see
// launch_kernel) and both calls compile to nothing.
#pragma once

#include <utility>

#include <cuda_runtime.h>

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

// Launches `kernel` on `stream`, with programmatic dependent launch when
// `overlap` is set (the device is SM90+), in clusters of `cluster_x` blocks
// along x when it is above 1 (SM90+; the grid's x a multiple of it).
template <typename... Params, typename... Args>
cudaError_t launch_kernel_in_clusters(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                                      cudaStream_t stream, bool overlap, unsigned cluster_x, Args&&... args) {
  cudaLaunchAttribute attrs[2]{};
  unsigned n = 0;
  if (overlap) {
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster_x > 1) {
    attrs[n].id = cudaLaunchAttributeClusterDimension;
    attrs[n++].val.clusterDim = {cluster_x, 1, 1};
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = n > 0 ? attrs : nullptr;
  cfg.numAttrs = n;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// Launches `kernel` on `stream`, with programmatic dependent launch when
// `overlap` is set (the device is SM90+).
template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, bool overlap, Args&&... args) {
  return launch_kernel_in_clusters(kernel, grid, block, smem, stream, overlap, 1u, std::forward<Args>(args)...);
}

}  // namespace mxmoe::smxx
