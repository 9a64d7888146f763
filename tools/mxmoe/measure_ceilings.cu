#include "measure_ceilings.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include "cuda/common/smxx_ceiling_kernels.cuh"

namespace mxmoe::cli {
namespace {

constexpr size_t kMaxStreamBytes = size_t(2) << 30;
// A pass of the read stream takes ~0.5 ms (2 GiB at 4.5 TB/s), a GEMM ~1.5
// ms: the best of a few is the rate with the clocks at their boost, before
// the power limit lowers them (tens of ms under load).
constexpr int kWarmups = 2, kTimedRuns = 5;

Status cuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Status::CudaError(fmt::format("{}: {}", what, cudaGetErrorString(err)));
}

Status blas(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Status::CudaError(fmt::format("{}: {}", what, cublasGetStatusString(st)));
}

// Selects a device until the object goes, then the one selected before.
class DeviceScope {
 public:
  ~DeviceScope() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  Status select(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    return cuda(cudaSetDevice(device), "cudaSetDevice");
  }

 private:
  int previous_ = -1;
};

// Everything one measurement allocates, freed in reverse on every return.
class Resources {
 public:
  ~Resources() {
    if (blas_) cublasDestroy(blas_);
    if (start_) cudaEventDestroy(start_);
    if (stop_) cudaEventDestroy(stop_);
    for (auto it = buffers_.rbegin(); it != buffers_.rend(); ++it) cudaFree(*it);
    if (stream_) cudaStreamDestroy(stream_);
  }

  Status init() {
    MXMOE_RETURN_IF_ERROR(cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream"));
    MXMOE_RETURN_IF_ERROR(cuda(cudaEventCreate(&start_), "event"));
    return cuda(cudaEventCreate(&stop_), "event");
  }

  template <typename T>
  Status allocate(size_t bytes, T** p) {
    void* v = nullptr;
    MXMOE_RETURN_IF_ERROR(cuda(cudaMalloc(&v, bytes), fmt::format("cudaMalloc of {} MiB", bytes >> 20).c_str()));
    buffers_.push_back(v);
    *p = static_cast<T*>(v);
    return Status::Ok();
  }

  Status create_blas() {
    MXMOE_RETURN_IF_ERROR(blas(cublasCreate(&blas_), "cublasCreate"));
    return blas(cublasSetStream(blas_, stream_), "cublasSetStream");
  }

  // The shortest of kTimedRuns runs of `enqueue` (after kWarmups), in seconds.
  template <typename Enqueue>
  Status best_seconds(const Enqueue& enqueue, double* seconds) {
    for (int i = 0; i < kWarmups; ++i) MXMOE_RETURN_IF_ERROR(enqueue());
    float best_ms = 0;
    for (int i = 0; i < kTimedRuns; ++i) {
      MXMOE_RETURN_IF_ERROR(cuda(cudaEventRecord(start_, stream_), "event record"));
      MXMOE_RETURN_IF_ERROR(enqueue());
      MXMOE_RETURN_IF_ERROR(cuda(cudaEventRecord(stop_, stream_), "event record"));
      MXMOE_RETURN_IF_ERROR(cuda(cudaEventSynchronize(stop_), "event synchronize"));
      float ms = 0;
      MXMOE_RETURN_IF_ERROR(cuda(cudaEventElapsedTime(&ms, start_, stop_), "event elapsed"));
      if (i == 0 || ms < best_ms) best_ms = ms;
    }
    if (!(best_ms > 0)) return Status::CudaError("the timed runs took no time");
    *seconds = double(best_ms) * 1e-3;
    return Status::Ok();
  }

  cudaStream_t stream() const { return stream_; }
  cublasHandle_t blas_handle() const { return blas_; }

 private:
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  std::vector<void*> buffers_;
};

}  // namespace

Status measure_read_rate(int device, double* bytes_per_second) {
  DeviceScope scope;
  MXMOE_RETURN_IF_ERROR(scope.select(device));
  cudaDeviceProp prop{};
  MXMOE_RETURN_IF_ERROR(cuda(cudaGetDeviceProperties(&prop, device), "device properties"));
  size_t free = 0, total = 0;
  MXMOE_RETURN_IF_ERROR(cuda(cudaMemGetInfo(&free, &total), "cudaMemGetInfo"));
  // Whole MiB, so the buffer is whole 16-byte words.
  const size_t bytes = std::min(kMaxStreamBytes, free / 2) >> 20 << 20;
  const size_t needed = size_t(kReadStreamL2Multiple) * size_t(prop.l2CacheSize);
  if (bytes < needed)
    return Status::OutOfMemory(fmt::format("{} MiB free: the read stream takes at most half, and needs {} MiB ({}x "
                                           "the L2)", free >> 20, needed >> 20, kReadStreamL2Multiple));
  Resources r;
  MXMOE_RETURN_IF_ERROR(r.init());
  uint32_t *words = nullptr, *sink = nullptr;
  MXMOE_RETURN_IF_ERROR(r.allocate(bytes, &words));
  MXMOE_RETURN_IF_ERROR(r.allocate(sizeof(uint32_t), &sink));
  smxx::fill_random_words<<<1024, 512, 0, r.stream()>>>(words, bytes / 4, 7u);
  MXMOE_RETURN_IF_ERROR(cuda(cudaGetLastError(), "fill launch"));
  const unsigned blocks = unsigned(prop.multiProcessorCount) * smxx::kReadStreamBlocksPerSm;
  double seconds = 0;
  MXMOE_RETURN_IF_ERROR(r.best_seconds(
      [&] {
        smxx::read_stream<<<blocks, smxx::kReadStreamThreads, 0, r.stream()>>>(reinterpret_cast<const uint4*>(words),
                                                                              bytes / 16, sink);
        return cuda(cudaGetLastError(), "read stream launch");
      },
      &seconds));
  *bytes_per_second = double(bytes) / seconds;
  return Status::Ok();
}

Status measure_bf16_gemm_rate(int device, double* flops_per_second) {
  DeviceScope scope;
  MXMOE_RETURN_IF_ERROR(scope.select(device));
  const size_t elements = size_t(kGemmN) * kGemmN;
  Resources r;
  MXMOE_RETURN_IF_ERROR(r.init());
  __nv_bfloat16 *a = nullptr, *b = nullptr, *c = nullptr;
  for (__nv_bfloat16** p : {&a, &b, &c}) MXMOE_RETURN_IF_ERROR(r.allocate(elements * sizeof(__nv_bfloat16), p));
  // The tensor cores' power, and so the clock the GEMM holds, depends on the
  // values: about N(0, 1), as the activations the bench times.
  smxx::fill_normal<<<1024, 512, 0, r.stream()>>>(a, elements, 1u);
  smxx::fill_normal<<<1024, 512, 0, r.stream()>>>(b, elements, 2u);
  MXMOE_RETURN_IF_ERROR(cuda(cudaGetLastError(), "fill launch"));
  MXMOE_RETURN_IF_ERROR(r.create_blas());
  const float one = 1.f, zero = 0.f;
  double seconds = 0;
  MXMOE_RETURN_IF_ERROR(r.best_seconds(
      [&] {
        return blas(cublasGemmEx(r.blas_handle(), CUBLAS_OP_N, CUBLAS_OP_N, kGemmN, kGemmN, kGemmN, &one, a,
                                 CUDA_R_16BF, kGemmN, b, CUDA_R_16BF, kGemmN, &zero, c, CUDA_R_16BF, kGemmN,
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                    "cublasGemmEx bf16");
      },
      &seconds));
  *flops_per_second = 2.0 * kGemmN * double(kGemmN) * kGemmN / seconds;
  return Status::Ok();
}

}  // namespace mxmoe::cli
