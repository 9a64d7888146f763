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
// `overlap` is set (the device is SM90+).
template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, bool overlap, Args&&... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = overlap ? &attr : nullptr;
  cfg.numAttrs = overlap ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace mxmoe::smxx
