// A growable device allocation of T, on the device current when it grows.
#pragma once

#include <algorithm>
#include <cstddef>

#include <cuda_runtime.h>

#include "cuda/parallel/rank_group.h"

namespace mxmoe::parallel {

template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() {
    if (ptr_) cudaFree(ptr_);
  }

  // Room for `count` elements; contents are not kept when it grows. Never
  // null afterwards (at least 256 bytes), so empty ranks pass valid pointers.
  Status reserve(size_t count) {
    if (ptr_ && count <= capacity_) return Status::Ok();
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    capacity_ = 0;
    void* p = nullptr;
    MXMOE_RETURN_IF_ERROR(cuda_check(cudaMalloc(&p, std::max<size_t>(count * sizeof(T), 256)), "cudaMalloc"));
    ptr_ = static_cast<T*>(p);
    capacity_ = count;
    return Status::Ok();
  }
  T* get() const { return ptr_; }
  size_t bytes() const { return capacity_ * sizeof(T); }

 private:
  T* ptr_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace mxmoe::parallel
