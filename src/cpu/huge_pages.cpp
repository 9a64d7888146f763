#include "cpu/huge_pages.h"

#include <sys/mman.h>

#include <fstream>
#include <string>

#include <fmt/format.h>

namespace mxmoe::cpu {

HostBuffer::~HostBuffer() {
  if (mapped_) munmap(data_, mapped_);
}

Status HostBuffer::allocate(size_t bytes, bool huge_pages, HostBuffer* out) {
  constexpr size_t kHugePage = size_t(2) << 20;
  // Whole huge pages, so that the advice covers the buffer, at a huge-page
  // boundary: one page more is mapped and the ends trimmed. Anonymous
  // memory comes zeroed.
  const size_t size = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return Status::OutOfMemory(fmt::format("cpu: cannot map {} bytes", size));
  uint8_t* const start = static_cast<uint8_t*>(p);
  uint8_t* const data = start + (kHugePage - reinterpret_cast<uintptr_t>(start) % kHugePage) % kHugePage;
  if (data > start) munmap(start, size_t(data - start));
  if (data + size < start + size + kHugePage) munmap(data + size, size_t(start + kHugePage - data));
  // Advice only: a kernel without transparent huge pages keeps 4 KiB pages.
  madvise(data, size, huge_pages ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  HostBuffer b;
  b.data_ = data;
  b.bytes_ = bytes;
  b.mapped_ = size;
  *out = std::move(b);
  return Status::Ok();
}

int64_t host_memory_available() {
  std::ifstream f("/proc/meminfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("MemAvailable:", 0) == 0) return std::stoll(line.substr(13)) * 1024;  // in kB
  return -1;
}

}  // namespace mxmoe::cpu
