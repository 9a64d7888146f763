// See device_memory.h.
#include "cuda/common/device_memory.h"

#include <algorithm>
#include <utility>

#include "cuda/common/smxx_moe_kernels.h"

namespace mxmoe::smxx {

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    source_ = std::move(other.source_);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    device_ = other.device_;
  }
  return *this;
}

DeviceAllocator& DeviceBuffer::allocator() const {
  return source_.allocator ? *source_.allocator : *cuda_malloc_allocator();
}

void DeviceBuffer::release() {
  if (ptr_) {
    allocator().deallocate(device_, ptr_, bytes_, source_.stream);
  }
  ptr_ = nullptr;
  bytes_ = 0;
}

Status DeviceBuffer::reserve(size_t n) {
  if (ptr_ && n <= bytes_) return Status::Ok();
  release();
  int device = source_.device;
  if (device < 0) MXMOE_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&device), "device memory", "cudaGetDevice"));
  const size_t size = std::max<size_t>(n, 256);
  void* p = nullptr;
  MXMOE_RETURN_IF_ERROR(allocator().allocate(device, size, source_.stream, &p));
  ptr_ = p;
  bytes_ = size;
  device_ = device;
  return Status::Ok();
}

}  // namespace mxmoe::smxx
