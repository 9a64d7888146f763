// A read-only memory mapping of a whole file. Checkpoint tensors are views into
// these mappings, so pages are read from disk only when a kernel or a check
// touches them: loading one layer of a 65 GB checkpoint reads that layer only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "mxmoe/status.h"

namespace mxmoe {

class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;

  // Maps `path` read-only. An empty file maps to {nullptr, 0} (nothing to map).
  static Status open(const std::string& path, MappedFile* out);

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // True when [p, p + n) lies inside this mapping.
  bool contains(const void* p, size_t n) const;

 private:
  void reset();
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace mxmoe
