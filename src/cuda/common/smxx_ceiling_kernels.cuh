// The kernels that measure a GPU's ceilings (bench/power_ceilings with the
// board's power, `mxmoe bench` its rates): an HBM read stream and the fills
// of its buffer and of a GEMM's operands. Static: each program that measures
// holds its own copy.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mxmoe::smxx {

// One step of a multiply-xorshift hash.
static __device__ __forceinline__ uint32_t ceiling_mix(uint32_t x) {
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  return x ^ (x >> 15);
}

// Random bits: a stream of zeros would flatter the power of the bus.
static __global__ void fill_random_words(uint32_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = ceiling_mix(uint32_t(i) * 2654435761u ^ seed);
}

// About N(0, 1) (a sum of four uniforms) in bf16 or e4m3, as the activations
// `mxmoe bench` times: the tensor core's power depends on the values it
// multiplies. e4m3 holds N(0, 1) with its 3 mantissa bits full (max 448).
template <typename T>
static __global__ void fill_normal(T* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = uint32_t(i) * 2654435761u ^ seed;
    float s = 0.f;
    for (int r = 0; r < 4; ++r) {
      x = ceiling_mix(x);
      s += float(x & 0xFFFFu) / 65536.f;
    }
    p[i] = T((s - 2.f) * 1.7320508f);
  }
}

// Every 16-byte word once, not kept in L1; the XOR keeps the loads live.
// 8 blocks of 512 threads an SM: the rate no longer grows past that (H200).
static __global__ void read_stream(const uint4* __restrict__ p, size_t n, uint32_t* __restrict__ sink) {
  uint32_t acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p + i));
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}
inline constexpr unsigned kReadStreamBlocksPerSm = 8, kReadStreamThreads = 512;

}  // namespace mxmoe::smxx
