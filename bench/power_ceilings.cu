// The ceilings of this GPU with its board's power: the idle draw, an HBM read
// stream and a bf16 GEMM (cuBLAS), each with its rate and the board's mean
// power over a window of back-to-back launches (board_power.h), and from them
// what one byte read and one bf16 FLOP cost in energy above the idle draw.
// Where a forward both streams many bytes and does many FLOPs, the board's
// power limit, not the two rates, sets its time: `mxmoe bench` prints that
// time (capped_us) from the constants this program measured on the H200
// (tools/mxmoe/roofline.h, docs/PERF.md).
//   usage: power_ceilings [--window-s 1] [--warmup-s 1]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda/common/board_energy.h"
#include "cuda/common/board_power.h"

namespace {

using Clock = std::chrono::steady_clock;
using mxmoe::Status;
using mxmoe::smxx::BoardEnergyCounter;

// Larger than the L2 (50 MB) many times over, so every byte read comes from HBM.
constexpr size_t kStreamBytes = size_t(4) << 30;
constexpr int kGemmN = 8192;  // the size the bf16 GEMM ceiling is quoted at

bool check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
  return false;
}

// One step of a multiply-xorshift hash.
__device__ __forceinline__ uint32_t mix(uint32_t x) {
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  return x ^ (x >> 15);
}

// Random bits: a stream of zeros would flatter the power of the bus.
__global__ void fill_random_words(uint32_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = mix(uint32_t(i) * 2654435761u ^ seed);
}

// About N(0, 1) in bf16 (a sum of four uniforms), as the activations `mxmoe
// bench` times: the tensor core's power depends on the values it multiplies.
__global__ void fill_normal_bf16(__nv_bfloat16* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = uint32_t(i) * 2654435761u ^ seed;
    float s = 0.f;
    for (int r = 0; r < 4; ++r) {
      x = mix(x);
      s += float(x & 0xFFFFu) / 65536.f;
    }
    p[i] = __float2bfloat16((s - 2.f) * 1.7320508f);
  }
}

// Every 16-byte word once, not kept in L1; the XOR keeps the loads live.
__global__ void read_stream(const uint4* __restrict__ p, size_t n, uint32_t* __restrict__ sink) {
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

// Mean power with the GPU idle, between two counter edges about window_s apart.
bool idle_watts(const BoardEnergyCounter& counter, double window_s, double* watts) {
  auto next_edge = [&](uint64_t* mj, Clock::time_point* t) {
    uint64_t first = 0;
    if (!counter.read_mj(&first).ok()) return false;
    for (*mj = first; *mj == first;)
      if (!counter.read_mj(mj).ok()) return false;
    *t = Clock::now();
    return true;
  };
  uint64_t mj0 = 0, mj1 = 0;
  Clock::time_point t0, t1;
  if (!next_edge(&mj0, &t0)) return false;
  std::this_thread::sleep_for(std::chrono::duration<double>(window_s));
  if (!next_edge(&mj1, &t1)) return false;
  *watts = double(mj1 - mj0) / 1e3 / std::chrono::duration<double>(t1 - t0).count();
  return true;
}

struct Ceiling {
  double watts = 0, per_second = 0;  // bytes or FLOPs per second
};

// `launch` enqueued back to back for warmup_s (the clock settles under the
// power limit), then over the power window; `work` is one launch's bytes or FLOPs.
bool measure(const BoardEnergyCounter& counter, cudaStream_t stream, double warmup_s, double window_s, double work,
             const std::function<void()>& launch, Ceiling* out) {
  const Clock::time_point start = Clock::now();
  while (std::chrono::duration<double>(Clock::now() - start).count() < warmup_s) {
    for (int i = 0; i < 8; ++i) launch();
    if (!check(cudaStreamSynchronize(stream), "warm-up")) return false;
  }
  mxmoe::smxx::PowerWindow w;
  std::string note;
  const Status s = mxmoe::smxx::measure_board_power(
      counter,
      [&](int64_t) {
        launch();
        return mxmoe::Status::Ok();
      },
      stream, window_s, &w, &note);
  if (!s.ok() || w.watts <= 0) {
    std::fprintf(stderr, "power window: %s %s\n", s.message().c_str(), note.c_str());
    return false;
  }
  out->watts = w.watts;
  out->per_second = work / (w.us_per_launch * 1e-6);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  double window_s = 1.0, warmup_s = 1.0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--window-s") == 0) window_s = std::atof(argv[i + 1]);
    else if (std::strcmp(argv[i], "--warmup-s") == 0) warmup_s = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: power_ceilings [--window-s 1] [--warmup-s 1]\n");
      return 2;
    }
  }
  int device = 0;
  cudaDeviceProp prop{};
  if (!check(cudaGetDevice(&device), "device") || !check(cudaGetDeviceProperties(&prop, device), "properties"))
    return 1;
  std::string why;
  const std::unique_ptr<BoardEnergyCounter> counter = BoardEnergyCounter::open(device, &why);
  if (!counter) {
    std::fprintf(stderr, "no energy counter: %s\n", why.c_str());
    return 1;
  }
  double limit_w = 0;
  if (!counter->read_power_limit_w(&limit_w).ok()) limit_w = 0;

  cudaStream_t stream = nullptr;
  uint32_t *words = nullptr, *sink = nullptr;
  __nv_bfloat16 *a = nullptr, *b = nullptr, *c = nullptr;
  const size_t mat = size_t(kGemmN) * kGemmN;
  if (!check(cudaStreamCreate(&stream), "stream") || !check(cudaMalloc(&words, kStreamBytes), "malloc") ||
      !check(cudaMalloc(&sink, 4), "malloc") || !check(cudaMalloc(&a, mat * 2), "malloc") ||
      !check(cudaMalloc(&b, mat * 2), "malloc") || !check(cudaMalloc(&c, mat * 2), "malloc"))
    return 1;
  fill_random_words<<<1024, 512, 0, stream>>>(words, kStreamBytes / 4, 7u);
  fill_normal_bf16<<<1024, 512, 0, stream>>>(a, mat, 1u);
  fill_normal_bf16<<<1024, 512, 0, stream>>>(b, mat, 2u);
  cublasHandle_t blas = nullptr;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS || cublasSetStream(blas, stream) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cuBLAS handle\n");
    return 1;
  }
  if (!check(cudaStreamSynchronize(stream), "fill")) return 1;

  double idle = 0;
  if (!idle_watts(*counter, window_s, &idle)) {
    std::fprintf(stderr, "idle power: counter read failed\n");
    return 1;
  }
  // 8 blocks of 512 threads an SM: the stream's rate no longer grows past that.
  const unsigned blocks = unsigned(prop.multiProcessorCount) * 8;
  Ceiling read, gemm;
  const float one = 1.f, zero = 0.f;
  cublasStatus_t gemm_status = CUBLAS_STATUS_SUCCESS;
  if (!measure(*counter, stream, warmup_s, window_s, double(kStreamBytes),
               [&] { read_stream<<<blocks, 512, 0, stream>>>(reinterpret_cast<const uint4*>(words),
                                                              kStreamBytes / 16, sink); },
               &read) ||
      !measure(*counter, stream, warmup_s, window_s, 2.0 * kGemmN * kGemmN * kGemmN,
               [&] {
                 const cublasStatus_t s = cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, kGemmN, kGemmN, kGemmN, &one,
                                                       a, CUDA_R_16BF, kGemmN, b, CUDA_R_16BF, kGemmN, &zero, c,
                                                       CUDA_R_16BF, kGemmN, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
                 if (s != CUBLAS_STATUS_SUCCESS) gemm_status = s;
               },
               &gemm) ||
      gemm_status != CUBLAS_STATUS_SUCCESS || !check(cudaGetLastError(), "launches"))
    return 1;

  const double pj_byte = (read.watts - idle) / read.per_second * 1e12;
  const double pj_flop = (gemm.watts - idle) / gemm.per_second * 1e12;
  std::printf("device: %s, power limit %.0f W\n", prop.name, limit_w);
  std::printf("idle:               %6.1f W\n", idle);
  std::printf("HBM read stream:    %6.1f W  %.3f TB/s  -> %.1f pJ a byte above idle\n", read.watts,
              read.per_second / 1e12, pj_byte);
  std::printf("bf16 GEMM %d^3:   %6.1f W  %.1f TFLOP/s  -> %.3f pJ a FLOP above idle\n", kGemmN, gemm.watts,
              gemm.per_second / 1e12, pj_flop);
  std::printf("{\"idle_w\": %.1f, \"limit_w\": %.0f, \"read_w\": %.1f, \"read_tb_s\": %.4f, \"pj_per_byte\": %.2f, "
              "\"gemm_w\": %.1f, \"gemm_tflop_s\": %.1f, \"pj_per_flop\": %.4f}\n",
              idle, limit_w, read.watts, read.per_second / 1e12, pj_byte, gemm.watts, gemm.per_second / 1e12,
              pj_flop);
  cublasDestroy(blas);
  return 0;
}
