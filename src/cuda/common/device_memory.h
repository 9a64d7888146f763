// The library's device memory: every buffer comes from a MemorySource, the
// caller's DeviceAllocator (include/mxmoe/allocator.h) for one device and one
// stream, and goes back to it when the buffer goes. Nothing else in the
// library allocates device memory.
#pragma once

#include <cstddef>
#include <memory>

#include <cuda_runtime.h>

#include "mxmoe/allocator.h"
#include "mxmoe/status.h"

namespace mxmoe::smxx {

struct MemorySource {
  std::shared_ptr<DeviceAllocator> allocator;  // null: cuda_malloc_allocator()
  int device = -1;                             // -1: the device current when a buffer grows
  cudaStream_t stream = nullptr;               // the stream the memory is ordered on (null: legacy)
};

// An allocation from a MemorySource that gives itself back (with the device,
// size and stream it was taken with) when it goes or grows.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(MemorySource source) : source_(std::move(source)) {}
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  ~DeviceBuffer() { release(); }

  // Room for `n` bytes (an allocation of at least 256, so the pointer is never
  // null afterwards): kept when it already holds n, else replaced (its
  // contents are not kept). On failure the buffer is empty.
  Status reserve(size_t n);
  void release();

  void* get() const { return ptr_; }
  template <typename T> T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }  // the allocation's size: the room asked for, at least 256

 private:
  DeviceAllocator& allocator() const;

  MemorySource source_;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  int device_ = -1;  // of the allocation
};

}  // namespace mxmoe::smxx
