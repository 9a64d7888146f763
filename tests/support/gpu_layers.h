// What the GPU layer tests share: a device allocation that frees itself and
// the GPU backends that can run on device 0 (CUDA builds only).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "mxmoe/dispatch.h"

namespace mxmoe::testing {

// A device allocation for one test (at least 256 bytes, so a zero-size one
// still has a pointer to pass).
struct Dev {
  void* p = nullptr;
  explicit Dev(size_t bytes) { EXPECT_EQ(cudaMalloc(&p, bytes ? bytes : 256), cudaSuccess); }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  template <typename T> T* as() const { return static_cast<T*>(p); }
};

// The device-layer backends (portable, sm90) this build and device 0 can run for `shape`.
inline std::vector<std::string> gpu_backends(const MoeShape& shape) {
  std::vector<std::string> out;
  for (BackendKind k : {BackendKind::kPortable, BackendKind::kSm90}) {
    std::string why;
    if (backend_available(k, dispatch_input_for_device(backend_name(k), shape, 0), &why))
      out.push_back(backend_name(k));
  }
  return out;
}

}  // namespace mxmoe::testing
