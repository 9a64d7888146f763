// A DeviceAllocator for tests (include/mxmoe/allocator.h) that passes each
// call to another and keeps account: what is live, with the device, size and
// stream each allocation was taken with; deallocations that do not match
// their allocation; and one allocation made to fail on purpose.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "mxmoe/allocator.h"

namespace mxmoe::testing {

class CountingAllocator final : public DeviceAllocator {
 public:
  struct Taken {
    int device;
    size_t bytes;
    CUstream_st* stream;
  };

  explicit CountingAllocator(std::shared_ptr<DeviceAllocator> inner) : inner_(std::move(inner)) {}

  Status allocate(int device, size_t bytes, CUstream_st* stream, void** ptr) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (allocations_++ == fail_at_)
      return Status::OutOfMemory("counting allocator: allocation " + std::to_string(fail_at_) + " fails");
    void* p = nullptr;
    const Status st = inner_->allocate(device, bytes, stream, &p);
    if (!st.ok()) return st;
    live_[p] = {device, bytes, stream};
    *ptr = p;
    return st;
  }

  void deallocate(int device, void* ptr, size_t bytes, CUstream_st* stream) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = live_.find(ptr);
    if (it == live_.end()) {
      mismatches_.push_back("a pointer never allocated, or given back twice");
      return;
    }
    const Taken& t = it->second;
    if (t.device != device || t.bytes != bytes || t.stream != stream)
      mismatches_.push_back("given back with another device, size or stream than taken with");
    inner_->deallocate(device, ptr, bytes, stream);
    live_.erase(it);
  }

  // The next allocations are counted from 0; allocation `n` of them fails (-1: none).
  void fail_at(int n) {
    std::lock_guard<std::mutex> lock(mutex_);
    fail_at_ = n;
    allocations_ = 0;
  }
  int allocations() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return allocations_;
  }
  std::map<void*, Taken> live() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_;
  }
  size_t live_bytes() const {
    size_t n = 0;
    for (const auto& [p, t] : live()) n += t.bytes;
    return n;
  }
  std::vector<std::string> mismatches() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return mismatches_;
  }

 private:
  std::shared_ptr<DeviceAllocator> inner_;
  mutable std::mutex mutex_;
  int fail_at_ = -1;
  int allocations_ = 0;
  std::map<void*, Taken> live_;
  std::vector<std::string> mismatches_;
};

}  // namespace mxmoe::testing
