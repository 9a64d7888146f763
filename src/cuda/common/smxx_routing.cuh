// A caller's routing entry as every kernel that reads one takes it
// (launch_check_routing's rule): an id outside [0, E) counts as expert 0 and
// its pair's weight as NaN, so only that token's row of y is NaN and no read
// leaves the weights. Kernels that read the caller's ids as given apply it
// themselves, where the check would otherwise be a launch of its own.
#pragma once

namespace mxmoe::smxx {

__device__ __forceinline__ bool routed_in_range(int id, int experts) { return unsigned(id) < unsigned(experts); }
__device__ __forceinline__ int routed_expert(int id, int experts) { return routed_in_range(id, experts) ? id : 0; }
__device__ __forceinline__ float routed_weight(int id, float weight, int experts) {
  return routed_in_range(id, experts) ? weight : __int_as_float(0x7fc00000);
}

}  // namespace mxmoe::smxx
