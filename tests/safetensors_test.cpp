// The safetensors header parser: accepts well-formed files and rejects every
// malformed one with a message naming the file/tensor and the problem.
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "checkpoint/safetensors.h"
#include "support/safetensors_writer.h"

namespace mxmoe {
namespace {

using testing::StEntry;

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = uint8_t(rng());
  return v;
}

Status parse(const std::string& bytes, SafetensorsHeader* h) {
  return parse_safetensors_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                                  "test.safetensors", h);
}

// A file from a hand-written JSON header and `data_bytes` bytes of data.
std::string with_header(const std::string& json, size_t data_bytes) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((uint64_t(json.size()) >> (8 * i)) & 0xFF);
  return out + json + std::string(data_bytes, '\x5a');
}

// Expects a non-ok Status whose message contains every fragment.
void expect_error(const std::string& bytes, std::initializer_list<const char*> fragments) {
  SafetensorsHeader h;
  const Status s = parse(bytes, &h);
  ASSERT_FALSE(s.ok()) << "accepted a malformed file";
  EXPECT_NE(s.message().find("test.safetensors"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << "message must be one line: " << s.message();
  for (const char* f : fragments) EXPECT_NE(s.message().find(f), std::string::npos) << s.message();
}

TEST(Safetensors, ParsesTensorsAndMetadata) {
  const auto a = random_bytes(6 * 4, 11);
  const auto b = random_bytes(2 * 3 * 2, 12);
  const std::string file = testing::safetensors_bytes(
      {{"a", "U8", {6, 4}, a}, {"b", "BF16", {2, 3}, b}, {"empty", "F32", {0, 5}, {}}},
      {{"format", "pt"}});
  SafetensorsHeader h;
  ASSERT_TRUE(parse(file, &h).ok());
  ASSERT_EQ(h.tensors.size(), 3u);
  EXPECT_EQ(h.metadata.at("format"), "pt");
  const auto* ta = h.find("a");
  const auto* tb = h.find("b");
  ASSERT_TRUE(ta && tb);
  EXPECT_EQ(ta->dtype, "U8");
  EXPECT_EQ(ta->shape, (std::vector<int64_t>{6, 4}));
  EXPECT_EQ(tb->element_size, 2);
  EXPECT_EQ(tb->begin % 2, 0u);
  EXPECT_EQ(0, std::memcmp(file.data() + ta->begin, a.data(), a.size()));
  EXPECT_EQ(0, std::memcmp(file.data() + tb->begin, b.data(), b.size()));
  EXPECT_EQ(h.find("missing"), nullptr);
}

TEST(Safetensors, RejectsTruncatedLength) {
  expect_error("", {"truncated"});
  expect_error(std::string(5, '\0'), {"truncated"});
}

TEST(Safetensors, RejectsHeaderLengthPastEnd) {
  std::string f = with_header("{}", 0);
  f[0] = char(0xFF);
  expect_error(f, {"header length", "past the end"});
  std::string huge(8, char(0xFF));
  expect_error(huge + "{}", {"header length"});
}

TEST(Safetensors, RejectsMalformedJson) {
  expect_error(with_header("{\"a\": {\"dtype\": \"U8\",", 0), {"not valid JSON"});
  expect_error(with_header("[1, 2]", 0), {"not a JSON object"});
  expect_error(with_header("{\"a\": 3}", 0), {"'a'", "not a JSON object"});
  expect_error(with_header("{\"a\": {\"dtype\": \"U8\", \"shape\": [2]}}", 2), {"'a'", "data_offsets"});
  expect_error(with_header("{\"a\": {\"dtype\": \"U8\", \"shape\": [-2], \"data_offsets\": [0, 2]}}", 2),
               {"'a'", "shape"});
  expect_error(with_header("{\"a\": {\"dtype\": \"U8\", \"shape\": [2.5], \"data_offsets\": [0, 2]}}", 2),
               {"'a'", "shape"});
  expect_error(with_header("{\"__metadata__\": {\"k\": 1}}", 0), {"__metadata__"});
}

TEST(Safetensors, RejectsOffsetsOutOfRange) {
  expect_error(with_header("{\"a\": {\"dtype\": \"U8\", \"shape\": [8], \"data_offsets\": [0, 8]}}", 7),
               {"'a'", "past the data section"});
  expect_error(with_header("{\"a\": {\"dtype\": \"U8\", \"shape\": [0], \"data_offsets\": [4, 2]}}", 7),
               {"'a'", "reversed"});
  expect_error(
      with_header("{\"a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [18446744073709551615, "
                  "18446744073709551616]}}", 8),
      {"'a'"});
}

TEST(Safetensors, RejectsOverlap) {
  expect_error(with_header("{\"a\": {\"dtype\": \"U8\", \"shape\": [8], \"data_offsets\": [0, 8]},"
                           " \"b\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [6, 10]}}", 16),
               {"'a'", "'b'", "overlap"});
  // The overlap is with a tensor two places back, hidden behind an empty one.
  expect_error(with_header("{\"a\": {\"dtype\": \"U8\", \"shape\": [16], \"data_offsets\": [0, 16]},"
                           " \"e\": {\"dtype\": \"U8\", \"shape\": [0], \"data_offsets\": [2, 2]},"
                           " \"c\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [8, 10]}}", 16),
               {"'a'", "'c'", "overlap"});
}

TEST(Safetensors, RejectsUnknownDtype) {
  expect_error(with_header("{\"a\": {\"dtype\": \"Q4\", \"shape\": [8], \"data_offsets\": [0, 8]}}", 8),
               {"'a'", "unknown dtype 'Q4'"});
}

TEST(Safetensors, RejectsShapeTimesDtypeMismatch) {
  expect_error(with_header("{\"a\": {\"dtype\": \"BF16\", \"shape\": [2, 3], \"data_offsets\": [0, 8]}}", 8),
               {"'a'", "needs 12 bytes", "hold 8"});
  expect_error(
      with_header("{\"a\": {\"dtype\": \"F64\", \"shape\": [4294967296, 4294967296], "
                  "\"data_offsets\": [0, 8]}}", 8),
      {"'a'", "overflow"});
}

TEST(Safetensors, RejectsMisalignedTensor) {
  // Header "{...}" of odd length puts the data section at an odd file offset.
  std::string json = "{\"a\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [0, 4]}}";
  if ((8 + json.size()) % 2 == 0) json += " ";
  expect_error(with_header(json, 4), {"'a'", "not aligned"});
}

// Every proper prefix of a valid file is rejected, never read past its end
// (the sanitizer build would flag an out-of-bounds read).
TEST(Safetensors, EveryTruncationIsRejected) {
  const uint64_t seed = 20240601;
  const std::string file = testing::safetensors_bytes(
      {{"x", "U8", {5, 3}, random_bytes(15, seed)}, {"y", "BF16", {7}, random_bytes(14, seed + 1)}});
  for (size_t n = 0; n < file.size(); ++n) {
    const std::string prefix = file.substr(0, n);
    SafetensorsHeader h;
    // A heap copy of exactly n bytes so that any over-read hits a redzone under ASan.
    std::vector<uint8_t> copy(prefix.begin(), prefix.end());
    const Status s = parse_safetensors_header(copy.data(), copy.size(), "t", &h);
    EXPECT_FALSE(s.ok()) << "prefix of " << n << " bytes accepted (seed " << seed << ")";
  }
}

// Random byte flips in the header never crash; the parser answers either way.
TEST(Safetensors, RandomCorruptionNeverCrashes) {
  const uint64_t seed = 77;
  std::mt19937_64 rng(seed);
  const std::string file = testing::safetensors_bytes(
      {{"x", "U8", {4, 4}, random_bytes(16, seed)}, {"y", "F32", {3}, random_bytes(12, seed + 1)}});
  int rejected = 0;
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> copy(file.begin(), file.end());
    const int flips = 1 + int(rng() % 3);
    for (int k = 0; k < flips; ++k) copy[rng() % copy.size()] = uint8_t(rng());
    SafetensorsHeader h;
    const Status s = parse_safetensors_header(copy.data(), copy.size(), "t", &h);
    if (!s.ok()) {
      ++rejected;
      continue;
    }
    for (const auto& t : h.tensors) ASSERT_LE(t.end, copy.size()) << "seed " << seed << " case " << i;
  }
  EXPECT_GT(rejected, 0) << "seed " << seed;
}

}  // namespace
}  // namespace mxmoe
