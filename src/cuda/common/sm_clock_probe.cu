// The SM clock probe (sm_clock_probe.h).
#include "cuda/common/sm_clock_probe.h"

#include <cstdint>

#include "cuda/common/smxx_moe_kernels.h"

namespace mxmoe::smxx {
namespace {

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void sm_clock_probe(float* __restrict__ mhz) {
  const uint64_t t0 = global_timer_ns();
  const long long c0 = clock64();
  uint64_t t = t0;
  while (t - t0 < kSmClockWindowNs) t = global_timer_ns();
  const long long c1 = clock64();
  *mhz = float(double(c1 - c0) * 1e3 / double(t - t0));
}

}  // namespace

Status launch_sm_clock_probe(float* mhz_device, cudaStream_t stream, const char* who) {
  sm_clock_probe<<<1, 1, 0, stream>>>(mhz_device);
  return cuda_status(cudaGetLastError(), who, "clock probe launch");
}

}  // namespace mxmoe::smxx
