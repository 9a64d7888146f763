// .npy I/O: round trips, the header forms NumPy writes (v1/v2/v3, either quote
// style), and one-line errors for every malformed or unsuitable file.
#include <cstring>
#include <fstream>

#include <gtest/gtest.h>

#include "io/npy.h"
#include "support/safetensors_writer.h"
#include "support/test_support.h"

namespace mxmoe {
namespace {

using testing::TempDir;

std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A .npy file with the given version, dict text and float payload.
std::string npy_bytes(int major, const std::string& dict, const std::vector<float>& data) {
  std::string header = dict;
  const size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + header.size() + 1) % 64) header.push_back(' ');
  header.push_back('\n');
  std::string out = "\x93NUMPY";
  out.push_back(char(major));
  out.push_back('\0');
  for (size_t i = 0; i < prefix - 8; ++i) out.push_back(char((header.size() >> (8 * i)) & 0xFF));
  out += header;
  out.append(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float));
  return out;
}

void expect_error(const Status& s, std::initializer_list<const char*> fragments) {
  ASSERT_FALSE(s.ok()) << "bad .npy accepted";
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
  for (const char* f : fragments) EXPECT_NE(s.message().find(f), std::string::npos) << s.message();
}

TEST(Npy, RoundTripsShapes) {
  TempDir dir;
  const uint64_t seed = 31;
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{7, 64}, {1, 2880}, {13}, {2, 3, 4}, {0, 64}}) {
    size_t n = 1;
    for (auto d : shape) n *= size_t(d);
    const auto x = testing::random_floats(n, seed + n);
    const auto path = (dir.path / "x.npy").string();
    ASSERT_TRUE(write_npy_f32(path, x.data(), shape).ok());
    EXPECT_EQ((slurp(path).size() - n * 4) % 64, 0u) << "header not padded to 64 bytes";
    NpyArray a;
    const Status s = read_npy_f32(path, &a);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(a.shape, shape);
    ASSERT_EQ(a.data.size(), n);
    if (n > 0) EXPECT_EQ(0, std::memcmp(a.data.data(), x.data(), n * 4)) << "seed " << seed + n;
  }
}

TEST(Npy, WritesTheHeaderNumpyWrites) {
  TempDir dir;
  const std::vector<float> x = {1.5f, -2.0f, 3.25f, 0.5f, 7.0f, -1.0f};
  const auto path = (dir.path / "x.npy").string();
  ASSERT_TRUE(write_npy_f32(path, x.data(), {2, 3}).ok());
  const std::string bytes = slurp(path);
  EXPECT_EQ(bytes, npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", x));
  ASSERT_TRUE(write_npy_f32(path, x.data(), {6}).ok());
  EXPECT_NE(slurp(path).find("'shape': (6,), }"), std::string::npos);
}

TEST(Npy, ReadsVersions2And3AndDoubleQuotes) {
  TempDir dir;
  const auto x = testing::random_floats(6, 32);
  const auto path = dir.path / "x.npy";
  for (int v : {1, 2, 3}) {
    testing::write_file(path, npy_bytes(v, R"({"shape": (3, 2), "fortran_order": False, "descr": "<f4"})", x));
    NpyArray a;
    const Status s = read_npy_f32(path.string(), &a);
    ASSERT_TRUE(s.ok()) << "version " << v << ": " << s.message();
    EXPECT_EQ(a.shape, (std::vector<int64_t>{3, 2}));
    EXPECT_EQ(0, std::memcmp(a.data.data(), x.data(), 24));
  }
}

TEST(Npy, RejectsBadFiles) {
  TempDir dir;
  const auto x = testing::random_floats(6, 33);
  const auto p = dir.path / "x.npy";
  const std::string ok_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  NpyArray a;
  auto read = [&](const std::string& bytes) {
    testing::write_file(p, bytes);
    return read_npy_f32(p.string(), &a);
  };
  expect_error(read_npy_f32((dir.path / "absent.npy").string(), &a), {"absent.npy", "cannot open"});
  expect_error(read("PK\x03\x04 not numpy"), {"x.npy", "magic"});
  expect_error(read(""), {"x.npy", "magic"});
  expect_error(read(npy_bytes(9, ok_dict, x)), {"version 9"});
  const std::string good = npy_bytes(1, ok_dict, x);
  expect_error(read(good.substr(0, 40)), {"x.npy", "truncated header"});
  expect_error(read(good.substr(0, good.size() - 3)), {"x.npy", "truncated"});
  expect_error(read(good + "xxxx"), {"x.npy", "needs 24"});
  expect_error(read(npy_bytes(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", x)),
               {"x.npy", "'<f8'", "float32"});
  expect_error(read(npy_bytes(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", x)),
               {"'>f4'"});
  expect_error(read(npy_bytes(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", x)),
               {"x.npy", "Fortran order"});
  expect_error(read(npy_bytes(1, "{'descr': '<f4', 'fortran_order': False}", x)), {"lacks"});
  expect_error(read(npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }", x)),
               {"malformed header"});
  expect_error(read(npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)", x)),
               {"malformed header"});
  expect_error(read(npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': "
                                  "(99999999999999999999, 3), }", x)),
               {"malformed header"});
  expect_error(read(npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': "
                                  "(4611686018427387904, 4611686018427387904), }", x)),
               {"overflow"});
}

TEST(Npy, MatrixWidthIsChecked) {
  TempDir dir;
  const auto x = testing::random_floats(6 * 64, 34);
  const auto path = (dir.path / "x.npy").string();
  NpyArray a;
  ASSERT_TRUE(write_npy_f32(path, x.data(), {6, 64}).ok());
  EXPECT_TRUE(read_npy_f32_matrix(path, 64, &a).ok());
  expect_error(read_npy_f32_matrix(path, 2880, &a), {"x.npy", "(6, 64)", "[tokens, 2880]"});
  ASSERT_TRUE(write_npy_f32(path, x.data(), {6 * 64}).ok());
  expect_error(read_npy_f32_matrix(path, 64, &a), {"x.npy", "[tokens, 64]"});
}

}  // namespace
}  // namespace mxmoe
