// What the GPU layer tests share: a device allocation that frees itself, a
// layer's original weights copied to the device, and the GPU backends that
// can run on device 0 (CUDA builds only).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "mxmoe/dispatch.h"
#include "mxmoe/moe.h"

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

// A layer's original weights copied to device memory, and a view of them.
struct DeviceWeights {
  std::vector<std::unique_ptr<Dev>> owned;
  MoeWeightsView view;
  template <typename T> const T* put(const std::vector<T>& v) {
    if (v.empty()) return nullptr;
    owned.push_back(std::make_unique<Dev>(v.size() * sizeof(T)));
    EXPECT_EQ(cudaMemcpy(owned.back()->p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    return owned.back()->as<T>();
  }
  explicit DeviceWeights(const MoeWeights& w) : view(w.view()) {
    view.w13.codes = put(w.w13_codes);
    view.w13.scales = put(w.w13_scales);
    view.w2.codes = put(w.w2_codes);
    view.w2.scales = put(w.w2_scales);
    view.b13 = put(w.b13);
    view.b2 = put(w.b2);
    view.router_weight = put(w.router_weight);
    view.router_bias = put(w.router_bias);
  }
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
