// safetensors header parser and validator.
#include "checkpoint/safetensors.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace mxmoe {
namespace {

using nlohmann::json;

// safetensors' own reader refuses headers above 100 MB; a GPT-OSS header is
// about 100 KB. The cap keeps a corrupt length from making us parse gigabytes.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

Status bad(const std::string& file, const std::string& what) {
  return Status::IoError(fmt::format("{}: {}", file, what));
}

Status bad_tensor(const std::string& file, const std::string& name, const std::string& what) {
  return Status::IoError(fmt::format("{}: tensor '{}': {}", file, name, what));
}

// Checks one header entry and fills `t` (offsets still relative to the data section).
Status parse_entry(const std::string& file, const std::string& name, const json& v,
                   uint64_t data_bytes, SafetensorsTensor* t) {
  if (!v.is_object()) return bad_tensor(file, name, "entry is not a JSON object");
  const auto dtype = v.find("dtype");
  const auto shape = v.find("shape");
  const auto offsets = v.find("data_offsets");
  if (dtype == v.end() || !dtype->is_string()) return bad_tensor(file, name, "missing string 'dtype'");
  if (shape == v.end() || !shape->is_array()) return bad_tensor(file, name, "missing array 'shape'");
  if (offsets == v.end() || !offsets->is_array() || offsets->size() != 2)
    return bad_tensor(file, name, "'data_offsets' must be an array [begin, end]");

  t->name = name;
  t->dtype = dtype->get<std::string>();
  t->element_size = safetensors_element_size(t->dtype);
  if (t->element_size == 0) return bad_tensor(file, name, fmt::format("unknown dtype '{}'", t->dtype));

  // Element count with overflow checks: any product above the file size is
  // already wrong, so cap there instead of trusting 64-bit arithmetic.
  uint64_t count = 1;
  for (const json& d : *shape) {
    if (!d.is_number_unsigned())
      return bad_tensor(file, name,
                        fmt::format("shape entry of JSON type {} is not a non-negative integer",
                                    d.type_name()));
    const uint64_t n = d.get<uint64_t>();
    if (n > uint64_t(std::numeric_limits<int64_t>::max()))
      return bad_tensor(file, name, "shape entry too large");
    t->shape.push_back(int64_t(n));
    if (n != 0 && count > std::numeric_limits<uint64_t>::max() / n / uint64_t(t->element_size))
      return bad_tensor(file, name, "element count of the shape overflows");
    count *= n;
  }
  for (const json& o : *offsets)
    if (!o.is_number_unsigned())
      return bad_tensor(file, name, "'data_offsets' entries must be non-negative integers");
  const uint64_t begin = (*offsets)[0].get<uint64_t>();
  const uint64_t end = (*offsets)[1].get<uint64_t>();
  if (begin > end)
    return bad_tensor(file, name, fmt::format("data_offsets [{}, {}] are reversed", begin, end));
  if (end > data_bytes)
    return bad_tensor(file, name,
                      fmt::format("data_offsets [{}, {}] run past the data section ({} bytes)", begin,
                                  end, data_bytes));
  const uint64_t expected = count * uint64_t(t->element_size);
  if (end - begin != expected)
    return bad_tensor(file, name,
                      fmt::format("{} x {} needs {} bytes but data_offsets [{}, {}] hold {}",
                                  t->dtype, shape_string(t->shape), expected, begin, end, end - begin));
  t->begin = begin;
  t->end = end;
  return Status::Ok();
}

Status parse_metadata(const std::string& file, const json& v, SafetensorsHeader* out) {
  if (!v.is_object()) return bad(file, "'__metadata__' is not a JSON object");
  for (const auto& [k, s] : v.items()) {
    if (!s.is_string()) return bad(file, fmt::format("'__metadata__' value of '{}' is not a string", k));
    out->metadata[k] = s.get<std::string>();
  }
  return Status::Ok();
}

}  // namespace

std::string shape_string(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

int64_t safetensors_element_size(const std::string& d) {
  if (d == "U8" || d == "I8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2" || d == "F8_E8M0")
    return 1;
  if (d == "BF16" || d == "F16" || d == "I16" || d == "U16") return 2;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  return 0;
}

const SafetensorsTensor* SafetensorsHeader::find(const std::string& name) const {
  const auto it = by_name.find(name);
  return it == by_name.end() ? nullptr : &tensors[it->second];
}

Status parse_safetensors_header(const uint8_t* bytes, size_t size, const std::string& file,
                                SafetensorsHeader* out) {
  *out = SafetensorsHeader{};
  if (size < 8)
    return bad(file, fmt::format("truncated: {} bytes, the 8-byte header length alone needs 8", size));
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];  // little-endian
  if (header_len > size - 8)
    return bad(file, fmt::format("header length {} runs past the end of the file ({} bytes)",
                                 header_len, size));
  if (header_len > kMaxHeaderBytes)
    return bad(file, fmt::format("header length {} exceeds the {}-byte limit", header_len,
                                 kMaxHeaderBytes));
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_bytes = size - data_start;

  // allow_exceptions = false: malformed JSON yields a 'discarded' value instead
  // of throwing; other nlohmann calls below only run on checked types.
  const json doc = json::parse(bytes + 8, bytes + data_start, nullptr, false);
  if (doc.is_discarded()) return bad(file, "header is not valid JSON");
  if (!doc.is_object()) return bad(file, "header is not a JSON object");

  SafetensorsHeader h;
  h.data_start = data_start;
  for (const auto& [name, v] : doc.items()) {
    if (name == "__metadata__") {
      MXMOE_RETURN_IF_ERROR(parse_metadata(file, v, &h));
      continue;
    }
    SafetensorsTensor t;
    MXMOE_RETURN_IF_ERROR(parse_entry(file, name, v, data_bytes, &t));
    t.begin += data_start;
    t.end += data_start;
    // Views hand out typed pointers (bf16 as uint16_t); the mapping is page
    // aligned, so an aligned file offset gives an aligned pointer.
    if (t.begin % uint64_t(t.element_size) != 0)
      return bad_tensor(file, name,
                        fmt::format("starts at file offset {}, not aligned to its {}-byte elements",
                                    t.begin, t.element_size));
    h.tensors.push_back(std::move(t));
  }
  std::sort(h.tensors.begin(), h.tensors.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  // Sorted by begin, a tensor overlaps an earlier one iff it starts before the
  // furthest end seen so far. Empty tensors own no bytes and overlap nothing.
  const SafetensorsTensor* furthest = nullptr;
  for (const auto& t : h.tensors) {
    if (t.begin == t.end) continue;
    if (furthest && t.begin < furthest->end)
      return bad(file, fmt::format("tensors '{}' [{}, {}) and '{}' [{}, {}) overlap", furthest->name,
                                   furthest->begin - data_start, furthest->end - data_start, t.name,
                                   t.begin - data_start, t.end - data_start));
    if (!furthest || t.end > furthest->end) furthest = &t;
  }
  for (size_t i = 0; i < h.tensors.size(); ++i) h.by_name[h.tensors[i].name] = i;
  *out = std::move(h);
  return Status::Ok();
}

Status SafetensorsFile::open(const std::string& path, SafetensorsFile* out) {
  SafetensorsFile f;
  MXMOE_RETURN_IF_ERROR(MappedFile::open(path, &f.map));
  MXMOE_RETURN_IF_ERROR(parse_safetensors_header(f.map.data(), f.map.size(), path, &f.header));
  *out = std::move(f);
  return Status::Ok();
}

}  // namespace mxmoe
