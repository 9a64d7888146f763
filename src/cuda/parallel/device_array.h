// A growable device array of T from a rank's MemorySource.
#pragma once

#include <cstddef>

#include "cuda/common/device_memory.h"

namespace mxmoe::parallel {

template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(const smxx::MemorySource& memory) : buffer_(memory) {}

  // Room for `count` elements; contents are not kept when it grows. Never
  // null afterwards (at least 256 bytes), so empty ranks pass valid pointers.
  Status reserve(size_t count) { return buffer_.reserve(count * sizeof(T)); }
  T* get() const { return buffer_.as<T>(); }
  size_t bytes() const { return buffer_.bytes(); }

 private:
  smxx::DeviceBuffer buffer_;
};

}  // namespace mxmoe::parallel
