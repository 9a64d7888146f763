#include "io/npy.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <regex>

#include <fmt/format.h>

namespace mxmoe {

Status read_npy_f32(const std::string& path, NpyArray* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::IoError(fmt::format("{}: cannot open", path));
  char magic[8];
  if (!f.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0)
    return Status::IoError(fmt::format("{}: not a .npy file (bad magic)", path));
  const int major = static_cast<unsigned char>(magic[6]);
  uint32_t header_len = 0;
  unsigned char len_bytes[4] = {0, 0, 0, 0};
  const int len_size = major == 1 ? 2 : 4;
  if (major < 1 || major > 3) return Status::IoError(fmt::format("{}: unsupported .npy version {}", path, major));
  if (!f.read(reinterpret_cast<char*>(len_bytes), len_size))
    return Status::IoError(fmt::format("{}: truncated header", path));
  for (int i = len_size - 1; i >= 0; --i) header_len = header_len << 8 | len_bytes[i];
  if (header_len > (1u << 20)) return Status::IoError(fmt::format("{}: header too long", path));
  std::string header(header_len, '\0');
  if (!f.read(header.data(), header_len)) return Status::IoError(fmt::format("{}: truncated header", path));

  std::smatch m;
  if (!std::regex_search(header, m, std::regex(R"('descr'\s*:\s*'([^']*)')")))
    return Status::IoError(fmt::format("{}: header has no 'descr'", path));
  if (m[1] != "<f4")
    return Status::InvalidArgument(fmt::format("{}: dtype is '{}', expected float32 ('<f4')", path, m[1].str()));
  if (!std::regex_search(header, m, std::regex(R"('fortran_order'\s*:\s*(True|False))")))
    return Status::IoError(fmt::format("{}: header has no 'fortran_order'", path));
  if (m[1] == "True") return Status::InvalidArgument(fmt::format("{}: array is Fortran order, expected C order", path));
  if (!std::regex_search(header, m, std::regex(R"('shape'\s*:\s*\(([^)]*)\))")))
    return Status::IoError(fmt::format("{}: header has no 'shape'", path));
  out->shape.clear();
  const std::string dims = m[1];
  int64_t count = 1;
  const std::regex number(R"(\d+)");
  for (std::sregex_iterator it(dims.begin(), dims.end(), number), end; it != end; ++it) {
    const int64_t d = std::stoll(it->str());
    if (d < 0 || (d > 0 && count > (int64_t(1) << 40) / d))
      return Status::IoError(fmt::format("{}: shape too large", path));
    out->shape.push_back(d);
    count *= d;
  }
  out->data.resize(size_t(count));
  if (!f.read(reinterpret_cast<char*>(out->data.data()), std::streamsize(count * 4)))
    return Status::IoError(fmt::format("{}: truncated data ({} floats expected)", path, count));
  return Status::Ok();
}

Status write_npy_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
  std::string dims;
  int64_t count = 1;
  for (int64_t d : shape) {
    dims += fmt::format("{}, ", d);
    count *= d;
  }
  if (shape.size() > 1) dims.resize(dims.size() - 2);
  std::string header = fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}), }}", dims);
  // Pad so the data starts at a multiple of 64 bytes (10 = magic + version + length).
  header.append(63 - (10 + header.size()) % 64, ' ');
  header.push_back('\n');
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return Status::IoError(fmt::format("{}: cannot create", path));
  const unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                                 uint8_t(header.size() & 0xFF), uint8_t(header.size() >> 8)};
  bool ok = std::fwrite(pre, 1, 10, f) == 10 && std::fwrite(header.data(), 1, header.size(), f) == header.size() &&
            std::fwrite(data, 4, size_t(count), f) == size_t(count);
  ok = std::fclose(f) == 0 && ok;
  return ok ? Status::Ok() : Status::IoError(fmt::format("{}: write failed", path));
}

}  // namespace mxmoe
