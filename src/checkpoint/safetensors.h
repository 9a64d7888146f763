// safetensors format: 8-byte little-endian header length N, N bytes of JSON
// ({name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}}),
// then the data section; offsets are relative to the start of the data section.
//
// parse_safetensors_header() works on bytes in memory (so the fuzzer can drive
// it) and checks everything a zero-copy reader relies on: the header fits in the
// file, every tensor's byte range lies inside the data section, ranges do not
// overlap, dtype x shape == byte length, and each tensor starts at a file offset
// aligned to its element size (a page-aligned mapping then gives aligned
// uint16_t pointers for bf16).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/mapped_file.h"
#include "mxmoe/status.h"

namespace mxmoe {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;  // as spelled in the file: "U8", "BF16", ...
  int64_t element_size = 0;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // absolute byte offsets in the file
};

struct SafetensorsHeader {
  uint64_t data_start = 0;  // 8 + header length
  std::vector<SafetensorsTensor> tensors;  // sorted by begin
  std::map<std::string, size_t> by_name;   // name -> index into tensors
  std::map<std::string, std::string> metadata;

  const SafetensorsTensor* find(const std::string& name) const;
};

// Element size in bytes of a safetensors dtype name, 0 if unknown.
int64_t safetensors_element_size(const std::string& dtype);

// Parses and validates the header of a safetensors file held in
// [bytes, bytes + size). `file` only names the file in error messages.
Status parse_safetensors_header(const uint8_t* bytes, size_t size, const std::string& file,
                                SafetensorsHeader* out);

// A mapped, validated safetensors file.
struct SafetensorsFile {
  MappedFile map;
  SafetensorsHeader header;

  static Status open(const std::string& path, SafetensorsFile* out);
  const std::string& path() const { return map.path(); }
  const uint8_t* data(const SafetensorsTensor& t) const { return map.data() + t.begin; }
};

// "[a, b, c]" for error messages.
std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace mxmoe
