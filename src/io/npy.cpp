// .npy reader/writer for float32 C-order arrays.
//
// Layout: "\x93NUMPY", major, minor, header length (uint16 LE for v1, uint32
// LE for v2/v3), an ASCII/UTF-8 Python dict literal
//   {'descr': '<f4', 'fortran_order': False, 'shape': (T, H), }
// padded with spaces and a final '\n', then the raw data.
#include "io/npy.h"

#include <cctype>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <string_view>

#include <fmt/format.h>

namespace mxmoe {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

// A minimal reader for the dict literal NumPy writes: string keys, values that
// are strings, True/False, or tuples of non-negative integers.
class DictParser {
 public:
  explicit DictParser(std::string_view s) : s_(s) {}

  // Fills descr / fortran / shape; unknown keys are an error (NumPy writes none).
  bool parse(std::string* descr, std::optional<bool>* fortran,
             std::optional<std::vector<int64_t>>* shape, std::string* why) {
    if (!eat('{')) return fail(why, "header does not start with '{'");
    while (true) {
      skip_ws();
      if (eat('}')) break;
      std::string key;
      if (!string(&key)) return fail(why, "expected a quoted key");
      if (!eat(':')) return fail(why, fmt::format("expected ':' after '{}'", key));
      if (key == "descr") {
        if (!string(descr)) return fail(why, "'descr' is not a string");
      } else if (key == "fortran_order") {
        bool b = false;
        if (!boolean(&b)) return fail(why, "'fortran_order' is not True/False");
        *fortran = b;
      } else if (key == "shape") {
        std::vector<int64_t> v;
        if (!tuple(&v)) return fail(why, "'shape' is not a tuple of non-negative integers");
        *shape = std::move(v);
      } else {
        return fail(why, fmt::format("unexpected key '{}'", key));
      }
      skip_ws();
      if (eat(',')) continue;
      if (eat('}')) break;
      return fail(why, "expected ',' or '}'");
    }
    skip_ws();
    if (i_ != s_.size()) return fail(why, "trailing characters after the dict");
    return true;
  }

 private:
  static bool fail(std::string* why, std::string m) {
    *why = std::move(m);
    return false;
  }
  void skip_ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool eat(char c) {
    skip_ws();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool string(std::string* out) {
    skip_ws();
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) return false;
    const char q = s_[i_++];
    const size_t end = s_.find(q, i_);
    if (end == std::string_view::npos) return false;
    *out = std::string(s_.substr(i_, end - i_));
    i_ = end + 1;
    return true;
  }
  bool boolean(bool* out) {
    skip_ws();
    for (auto [word, value] : {std::pair{"True", true}, std::pair{"False", false}}) {
      const size_t n = std::strlen(word);
      if (s_.substr(i_, n) == word) {
        i_ += n;
        *out = value;
        return true;
      }
    }
    return false;
  }
  bool integer(int64_t* out) {
    skip_ws();
    const size_t start = i_;
    int64_t v = 0;
    while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) {
      const int d = s_[i_++] - '0';
      if (v > (std::numeric_limits<int64_t>::max() - d) / 10) return false;
      v = v * 10 + d;
    }
    if (i_ < s_.size() && s_[i_] == 'L') ++i_;  // Python 2 long suffix
    *out = v;
    return i_ > start;
  }
  bool tuple(std::vector<int64_t>* out) {
    if (!eat('(')) return false;
    while (true) {
      if (eat(')')) return true;
      int64_t v = 0;
      if (!integer(&v)) return false;
      out->push_back(v);
      if (eat(',')) continue;
      return eat(')');
    }
  }

  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

Status read_npy_f32(const std::string& path, NpyArray* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IoError(fmt::format("{}: cannot open", path));
  in.seekg(0, std::ios::end);
  const std::streamoff file_size = in.tellg();
  in.seekg(0);
  if (file_size < 0) return Status::IoError(fmt::format("{}: cannot determine the size", path));
  const uint64_t size = uint64_t(file_size);

  unsigned char pre[12] = {};
  const size_t pre_len = size_t(std::min<uint64_t>(size, 12));
  in.read(reinterpret_cast<char*>(pre), std::streamsize(pre_len));
  if (pre_len < 8 || std::memcmp(pre, kMagic, kMagicLen) != 0)
    return Status::IoError(fmt::format("{}: not a .npy file (bad magic or truncated)", path));
  const int major = pre[6];
  uint64_t header_len = 0, prefix = 0;
  if (major == 1) {
    prefix = 10;
    header_len = uint64_t(pre[8]) | uint64_t(pre[9]) << 8;
  } else if (major == 2 || major == 3) {
    prefix = 12;
    if (pre_len < 12) return Status::IoError(fmt::format("{}: truncated header", path));
    header_len = uint64_t(pre[8]) | uint64_t(pre[9]) << 8 | uint64_t(pre[10]) << 16 |
                 uint64_t(pre[11]) << 24;
  } else {
    return Status::IoError(fmt::format("{}: unsupported .npy version {}.{}", path, major, int(pre[7])));
  }
  if (prefix + header_len > size)
    return Status::IoError(fmt::format("{}: truncated header ({} bytes declared, file has {})", path,
                                       header_len, size));

  std::string header(size_t(header_len), '\0');
  in.seekg(std::streamoff(prefix));
  in.read(header.data(), std::streamsize(header_len));
  if (!in) return Status::IoError(fmt::format("{}: read failed in the header", path));

  std::string descr, why;
  std::optional<bool> fortran;
  std::optional<std::vector<int64_t>> shape;
  if (!DictParser(header).parse(&descr, &fortran, &shape, &why))
    return Status::IoError(fmt::format("{}: malformed header: {}", path, why));
  if (descr.empty() || !fortran || !shape)
    return Status::IoError(
        fmt::format("{}: header lacks one of 'descr', 'fortran_order', 'shape'", path));
  if (descr != "<f4")
    return Status::InvalidArgument(
        fmt::format("{}: dtype '{}' is not little-endian float32 ('<f4')", path, descr));
  if (*fortran)
    return Status::InvalidArgument(fmt::format("{}: Fortran order; expected a C-order array", path));

  uint64_t count = 1;
  for (int64_t d : *shape) {
    if (d != 0 && count > (std::numeric_limits<uint64_t>::max() / 4) / uint64_t(d))
      return Status::IoError(fmt::format("{}: shape overflows", path));
    count *= uint64_t(d);
  }
  const uint64_t data_bytes = size - prefix - header_len;
  if (data_bytes != count * 4)
    return Status::IoError(fmt::format("{}: data is {} bytes but shape ({}) of float32 needs {}{}",
                                       path, data_bytes, fmt::join(*shape, ", "), count * 4,
                                       data_bytes < count * 4 ? " (truncated)" : ""));
  NpyArray a;
  a.shape = *shape;
  a.data.resize(size_t(count));
  in.read(reinterpret_cast<char*>(a.data.data()), std::streamsize(count * 4));
  if (!in) return Status::IoError(fmt::format("{}: read failed in the data", path));
  *out = std::move(a);
  return Status::Ok();
}

Status read_npy_f32_matrix(const std::string& path, int64_t cols, NpyArray* out) {
  NpyArray a;
  MXMOE_RETURN_IF_ERROR(read_npy_f32(path, &a));
  if (a.shape.size() != 2 || a.shape[1] != cols)
    return Status::InvalidArgument(fmt::format("{}: shape ({}) is not [tokens, {}]", path,
                                               fmt::join(a.shape, ", "), cols));
  *out = std::move(a);
  return Status::Ok();
}

Status write_npy_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
  std::string dims;
  int64_t count = 1;
  for (int64_t d : shape) {
    if (d < 0) return Status::InvalidArgument(fmt::format("{}: negative dimension {}", path, d));
    dims += fmt::format("{}, ", d);
    count *= d;
  }
  if (shape.size() == 1) dims.pop_back();  // "(n,)"
  else if (shape.size() > 1) dims.resize(dims.size() - 2);
  std::string header =
      fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}), }}", dims);
  // Version 1.0: total prefix (10 bytes) + header is padded with spaces to a
  // multiple of 64 and ends in '\n', so the data starts aligned.
  const size_t total = (10 + header.size() + 1 + 63) / 64 * 64;
  header.append(total - 10 - header.size() - 1, ' ');
  header.push_back('\n');
  if (header.size() > 0xFFFF) return Status::InvalidArgument(fmt::format("{}: shape too long", path));

  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return Status::IoError(fmt::format("{}: cannot create", path));
  const unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                                 static_cast<unsigned char>(header.size() & 0xFF),
                                 static_cast<unsigned char>(header.size() >> 8)};
  f.write(reinterpret_cast<const char*>(pre), 10);
  f.write(header.data(), std::streamsize(header.size()));
  if (count > 0) f.write(reinterpret_cast<const char*>(data), std::streamsize(count * 4));
  f.close();
  if (!f) return Status::IoError(fmt::format("{}: write failed", path));
  return Status::Ok();
}

}  // namespace mxmoe
