// Host buffers the CPU streams from: 2 MiB aligned, with the kernel asked
// (madvise) to back them with transparent huge pages, or asked not to.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "mxmoe/status.h"

namespace mxmoe::cpu {

class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(HostBuffer&& o) noexcept : data_(o.data_), bytes_(o.bytes_), mapped_(o.mapped_) {
    o.data_ = nullptr;
    o.bytes_ = o.mapped_ = 0;
  }
  HostBuffer& operator=(HostBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(bytes_, o.bytes_);
    std::swap(mapped_, o.mapped_);
    return *this;
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer();

  // `bytes` of zeroed memory. huge_pages: ask for 2 MiB pages, which spare a
  // stream the page walks of 512 times as many 4 KiB pages (a 2-thread read
  // stream on the EPYC host of docs/PERF.md: 31-54 GB/s over 4 KiB pages,
  // 31-67 GB/s over huge pages, both moving with the shared host);
  // otherwise ask for 4 KiB pages, whatever the system's default.
  static Status allocate(size_t bytes, bool huge_pages, HostBuffer* out);

  uint8_t* data() const { return data_; }
  size_t size() const { return bytes_; }

 private:
  uint8_t* data_ = nullptr;
  size_t bytes_ = 0, mapped_ = 0;
};

// The host memory a process can still take without swapping (the kernel's
// MemAvailable), in bytes; -1 where /proc/meminfo does not say.
int64_t host_memory_available();

}  // namespace mxmoe::cpu
