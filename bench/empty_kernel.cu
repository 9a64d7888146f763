// An empty kernel and its launch as the forward's kernels are launched
// (smxx::launch_kernel), for host_overhead's cost of a launch alone.
#include "cuda/common/pdl.cuh"

namespace {
__global__ void empty_kernel(int) {}
}  // namespace

cudaError_t launch_empty_kernel(cudaStream_t stream, bool overlap, int blocks) {
  return mxmoe::smxx::launch_kernel(empty_kernel, dim3(unsigned(blocks)), dim3(256), 0, stream, overlap, 0);
}

cudaError_t launch_empty_kernel_plain(cudaStream_t stream) {
  empty_kernel<<<1, 256, 0, stream>>>(0);
  return cudaGetLastError();
}

const void* empty_kernel_address() { return reinterpret_cast<const void*>(&empty_kernel); }
