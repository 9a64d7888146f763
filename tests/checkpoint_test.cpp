// GPT-OSS checkpoints written by the test (both naming schemes, one file or
// index-listed shards, with or without config.json) load as zero-copy views
// whose reference forward matches the in-memory weights bit-exactly; every kind
// of bad checkpoint is refused with a message naming the file/tensor.
#include <cstring>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "mxmoe/checkpoint.h"
#include "mxmoe/reference.h"
#include "support/safetensors_writer.h"
#include "support/test_support.h"

namespace mxmoe {
namespace {

namespace fs = std::filesystem;
using testing::Naming;
using testing::TempDir;

// H != I and both != 32 so a swapped or mis-derived dimension is caught.
constexpr MoeShape kShape{4, 64, 96, 2};
constexpr float kLimit = 6.5f;  // not the default 7, so reading it is checked

std::vector<MoeWeights> make_layers(int n, uint64_t seed) {
  std::vector<MoeWeights> layers;
  for (int l = 0; l < n; ++l) {
    layers.push_back(make_random_weights(kShape, seed + uint64_t(l)));
    layers.back().swiglu.limit = kLimit;
  }
  return layers;
}

void write_config(const fs::path& dir, const MoeShape& s, int64_t layers, Naming form) {
  testing::write_file(dir / "config.json", testing::gpt_oss_config(s, layers, kLimit, form).dump(2));
}

// True when `p` lies in a file-backed mapping of `file` (from /proc/self/maps):
// the view points into the mmap, not into a copy.
bool points_into_mapping_of(const void* p, const fs::path& file) {
  std::ifstream maps("/proc/self/maps");
  const auto addr = reinterpret_cast<uintptr_t>(p);
  const std::string want = fs::canonical(file).string();
  for (std::string line; std::getline(maps, line);) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) != 2) continue;
    if (addr >= lo && addr < hi) return line.size() >= want.size() && line.ends_with(want);
  }
  return false;
}

void expect_same_bytes(const void* a, const void* b, size_t n, const char* what) {
  EXPECT_EQ(0, std::memcmp(a, b, n)) << what << " differs from the bytes written";
}

struct Form {
  Naming naming;
  int shards;       // 1: model.safetensors; >1: shards + index
  bool config;      // config.json beside the weights
  bool bare_file;   // open the .safetensors path itself
};

class CheckpointLoad : public ::testing::TestWithParam<Form> {};

TEST_P(CheckpointLoad, MatchesInMemoryWeightsBitExactly) {
  const Form form = GetParam();
  const uint64_t seed = 1000 + uint64_t(form.shards) * 10 + (form.naming == Naming::kHf ? 0 : 5);
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  TempDir dir;
  auto layers = make_layers(3, seed);
  const auto files = testing::write_gpt_oss_tensors(dir.path, layers, form.naming, form.shards);
  if (form.config) write_config(dir.path, kShape, 3, form.naming);

  std::unique_ptr<Checkpoint> ckpt;
  const std::string path = form.bare_file ? files[0].string() : dir.path.string();
  // Without config.json top-k defaults to 4; the override sets the test's 2.
  const auto topk = form.config ? std::nullopt : std::optional<int64_t>(kShape.topk);
  const Status st = Checkpoint::open(path, topk, &ckpt);
  ASSERT_TRUE(st.ok()) << st.message();
  const CheckpointInfo& info = ckpt->info();
  EXPECT_EQ(info.naming, form.naming == Naming::kHf ? "hf" : "openai");
  EXPECT_EQ(info.shape.experts, kShape.experts);
  EXPECT_EQ(info.shape.hidden, kShape.hidden);
  EXPECT_EQ(info.shape.intermediate, kShape.intermediate);
  EXPECT_EQ(info.shape.topk, kShape.topk);
  EXPECT_EQ(info.layers, 3);
  EXPECT_EQ(info.files.size(), size_t(form.shards));
  EXPECT_EQ(info.from_config, form.config);
  EXPECT_FLOAT_EQ(info.swiglu.alpha, 1.702f);
  const float limit = form.config ? kLimit : 7.0f;
  EXPECT_EQ(info.swiglu.limit, limit);

  const int64_t T = 5;
  const auto x = testing::random_floats(size_t(T * kShape.hidden), seed + 99);
  for (int64_t l : {2, 0}) {
    SCOPED_TRACE(::testing::Message() << "layer " << l);
    MoeWeightsView v;
    const Status ls = ckpt->layer(l, &v);
    ASSERT_TRUE(ls.ok()) << ls.message();
    MoeWeights& w = layers[size_t(l)];
    w.swiglu.limit = limit;
    const MoeWeightsView ref = w.view();
    const int64_t E = kShape.experts, H = kShape.hidden, I = kShape.intermediate;
    expect_same_bytes(v.w13.codes, ref.w13.codes, size_t(E * 2 * I * H / 2), "w13 codes");
    expect_same_bytes(v.w13.scales, ref.w13.scales, size_t(E * 2 * I * H / 32), "w13 scales");
    expect_same_bytes(v.w2.codes, ref.w2.codes, size_t(E * H * I / 2), "w2 codes");
    expect_same_bytes(v.w2.scales, ref.w2.scales, size_t(E * H * I / 32), "w2 scales");
    expect_same_bytes(v.b13, ref.b13, size_t(E * 2 * I * 2), "b13");
    expect_same_bytes(v.b2, ref.b2, size_t(E * H * 2), "b2");
    expect_same_bytes(v.router_weight, ref.router_weight, size_t(E * H * 2), "router weight");
    expect_same_bytes(v.router_bias, ref.router_bias, size_t(E * 2), "router bias");

    // Zero copy: every view points into a mapping of one of the files.
    for (const void* p : {static_cast<const void*>(v.w13.codes), static_cast<const void*>(v.w2.scales),
                          static_cast<const void*>(v.b2), static_cast<const void*>(v.router_bias)}) {
      bool mapped = false;
      for (const auto& f : files) mapped = mapped || points_into_mapping_of(p, f);
      EXPECT_TRUE(mapped) << "a view does not point into a mapped checkpoint file";
    }

    std::vector<float> y_ckpt(size_t(T * H)), y_mem(size_t(T * H));
    ReferenceOptions opt;
    opt.threads = 1;
    ASSERT_TRUE(reference_forward(v, x.data(), T, nullptr, y_ckpt.data(), opt).ok());
    ASSERT_TRUE(reference_forward(ref, x.data(), T, nullptr, y_mem.data(), opt).ok());
    EXPECT_GT(testing::l2_norm(y_mem), 0.0);
    EXPECT_EQ(0, std::memcmp(y_ckpt.data(), y_mem.data(), y_mem.size() * sizeof(float)))
        << "forward from the checkpoint differs from the in-memory weights";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Forms, CheckpointLoad,
    ::testing::Values(Form{Naming::kHf, 1, true, false}, Form{Naming::kOpenai, 1, true, false},
                      Form{Naming::kHf, 3, true, false}, Form{Naming::kOpenai, 3, true, false},
                      Form{Naming::kHf, 1, false, true}, Form{Naming::kOpenai, 1, false, true},
                      Form{Naming::kHf, 3, false, false}),
    [](const ::testing::TestParamInfo<Form>& i) {
      return std::string(i.param.naming == Naming::kHf ? "hf" : "openai") + "_" +
             std::to_string(i.param.shards) + "files_" +
             (i.param.bare_file ? "bare" : i.param.config ? "config" : "noconfig");
    });

// ---- Bad checkpoints ----------------------------------------------------------

// Expects a non-ok Status with a one-line message holding every fragment.
void expect_error(const Status& s, std::initializer_list<std::string> fragments) {
  ASSERT_FALSE(s.ok()) << "bad checkpoint accepted";
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
  for (const auto& f : fragments) EXPECT_NE(s.message().find(f), std::string::npos) << s.message();
}

// Writes one layer (HF names unless told) with `edit` applied to its entries.
template <typename Edit>
fs::path write_edited(const TempDir& dir, uint64_t seed, Edit edit, Naming naming = Naming::kHf,
                      const MoeShape& config_shape = kShape) {
  const auto w = make_random_weights(kShape, seed);
  auto entries = testing::gpt_oss_layer_entries(w, 0, naming);
  edit(entries);
  testing::write_file(dir.path / "model.safetensors", testing::safetensors_bytes(entries));
  write_config(dir.path, config_shape, 1, naming);
  return dir.path / "model.safetensors";
}

testing::StEntry& entry(std::vector<testing::StEntry>& es, const std::string& suffix) {
  for (auto& e : es)
    if (e.name.ends_with(suffix)) return e;
  throw std::runtime_error("test bug: no entry " + suffix);
}

Status load_layer(const fs::path& path, int64_t layer) {
  std::unique_ptr<Checkpoint> c;
  MXMOE_RETURN_IF_ERROR(Checkpoint::open(path.string(), std::nullopt, &c));
  MoeWeightsView v;
  return c->layer(layer, &v);
}

TEST(CheckpointErrors, TruncatedFile) {
  TempDir dir;
  const auto file = write_edited(dir, 1, [](auto&) {});
  const auto size = fs::file_size(file);
  fs::resize_file(file, size - 100);
  expect_error(load_layer(dir.path, 0), {"model.safetensors", "past the data section"});
  fs::resize_file(file, 4);
  expect_error(load_layer(dir.path, 0), {"model.safetensors", "truncated"});
  fs::resize_file(file, 0);
  expect_error(load_layer(dir.path, 0), {"model.safetensors", "truncated"});
}

TEST(CheckpointErrors, HeaderLengthPastEnd) {
  TempDir dir;
  const auto file = write_edited(dir, 2, [](auto&) {});
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  const char big[8] = {0, 0, 0, 0, 0x10, 0, 0, 0};
  f.write(big, 8);
  f.close();
  expect_error(load_layer(dir.path, 0), {"model.safetensors", "header length"});
}

TEST(CheckpointErrors, MalformedJsonHeader) {
  TempDir dir;
  const auto file = write_edited(dir, 3, [](auto&) {});
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(8);
  f.write("[", 1);  // '{' -> '['
  f.close();
  expect_error(load_layer(dir.path, 0), {"model.safetensors", "JSON"});
}

TEST(CheckpointErrors, MissingTensor) {
  TempDir dir;
  write_edited(dir, 4, [](auto& es) { es.erase(es.begin() + 1); });  // the router bias
  expect_error(load_layer(dir.path, 0), {"model.layers.0.mlp.router.bias", "not found"});
}

TEST(CheckpointErrors, LayerOutOfRange) {
  TempDir dir;
  write_edited(dir, 5, [](auto&) {});
  expect_error(load_layer(dir.path, 1), {"layer 1", "out of range [0, 1)"});
  expect_error(load_layer(dir.path, -1), {"layer -1", "out of range"});
}

TEST(CheckpointErrors, ScalesDisagreeWithBlocks) {
  TempDir dir;
  write_edited(dir, 6, [](auto& es) {
    auto& s = entry(es, "down_proj_scales");  // [E, H, I/32] -> [E, H/2, 2*I/32]
    s.shape = {kShape.experts, kShape.hidden / 2, 2 * kShape.intermediate / 32};
  });
  expect_error(load_layer(dir.path, 0),
               {"model.layers.0.mlp.experts.down_proj_scales", "disagrees with blocks", "[4, 64, 3]"});
}

TEST(CheckpointErrors, ShapeDisagreesWithConfig) {
  TempDir dir;
  MoeShape other = kShape;
  other.intermediate = 64;
  write_edited(dir, 7, [](auto&) {}, Naming::kOpenai, other);
  expect_error(load_layer(dir.path, 0),
               {"block.0.mlp.mlp1_weight.blocks", "shape [4, 192, 2, 16]", "expected [4, 128, 2, 16]",
                "config.json"});
}

TEST(CheckpointErrors, WrongDtype) {
  TempDir dir;
  write_edited(dir, 8, [](auto& es) { entry(es, "gate_up_proj_bias").dtype = "F16"; });
  expect_error(load_layer(dir.path, 0), {"gate_up_proj_bias", "dtype F16, expected BF16"});
}

TEST(CheckpointErrors, KNotMultipleOf32) {
  TempDir dir;
  MoeShape other = kShape;
  other.hidden = 80;
  write_edited(dir, 9, [](auto&) {}, Naming::kHf, other);
  expect_error(load_layer(dir.path, 0), {"config.json", "hidden_size 80", "multiple of 32"});
}

TEST(CheckpointErrors, NanScaleNamesExpertRowBlock) {
  const MoeShape& s = kShape;
  {
    TempDir dir;
    // w2 scales [E, H, I/32]: expert 2, row 5, block 1.
    write_edited(dir, 10, [&](auto& es) {
      entry(es, "down_proj_scales").bytes[size_t((2 * s.hidden + 5) * (s.intermediate / 32) + 1)] = 0xFF;
    });
    expect_error(load_layer(dir.path, 0),
                 {"down_proj_scales", "0xFF (NaN)", "expert 2, row 5, block 1"});
  }
  {
    TempDir dir;
    // w13 scales [E, 2I, H/32]: expert 3, row 7 (up 3), block 0 -- the last expert.
    write_edited(dir, 11, [&](auto& es) {
      entry(es, "mlp1_weight.scales").bytes[size_t((3 * 2 * s.intermediate + 7) * (s.hidden / 32))] = 0xFF;
    }, Naming::kOpenai);
    expect_error(load_layer(dir.path, 0),
                 {"mlp1_weight.scales", "expert 3, row 7 (up 3), block 0"});
  }
}

TEST(CheckpointErrors, NonFiniteBiasOrRouterIsNamed) {
  const MoeShape& s = kShape;
  {
    TempDir dir;
    // gate_up bias [E, 2I]: expert 1, column 3 holds a bf16 NaN (0x7FC0, little-endian).
    write_edited(dir, 13, [&](auto& es) {
      auto& b = entry(es, "gate_up_proj_bias").bytes;
      b[size_t((1 * 2 * s.intermediate + 3) * 2)] = 0xC0;
      b[size_t((1 * 2 * s.intermediate + 3) * 2 + 1)] = 0x7F;
    });
    expect_error(load_layer(dir.path, 0), {"gate_up_proj_bias", "non-finite value (NaN) at [1, 3]"});
  }
  {
    TempDir dir;
    // router weight [E, H]: expert 0, column 9 holds -Inf (0xFF80).
    write_edited(dir, 14, [&](auto& es) {
      auto& b = entry(es, "gate.weight").bytes;
      b[size_t(9 * 2)] = 0x80;
      b[size_t(9 * 2 + 1)] = 0xFF;
    }, Naming::kOpenai);
    expect_error(load_layer(dir.path, 0), {"gate.weight", "non-finite value (Inf) at [0, 9]"});
  }
}

TEST(CheckpointErrors, NanScaleInAnotherLayerDoesNotAffectThisOne) {
  TempDir dir;
  auto layers = make_layers(2, 12);
  layers[1].w2_scales[17] = 0xFF;
  testing::write_gpt_oss_tensors(dir.path, layers, Naming::kHf, 1);
  write_config(dir.path, kShape, 2, Naming::kHf);
  EXPECT_TRUE(load_layer(dir.path, 0).ok());
  expect_error(load_layer(dir.path, 1), {"model.layers.1.mlp.experts.down_proj_scales", "NaN"});
}

TEST(CheckpointErrors, IndexProblems) {
  TempDir dir;
  auto layers = make_layers(1, 13);
  const auto files = testing::write_gpt_oss_tensors(dir.path, layers, Naming::kHf, 2);
  write_config(dir.path, kShape, 1, Naming::kHf);
  ASSERT_TRUE(load_layer(dir.path, 0).ok());
  fs::remove(files[1]);
  expect_error(load_layer(dir.path, 0), {files[1].filename().string(), "cannot open"});
  testing::write_file(dir.path / "model.safetensors.index.json",
                      R"({"weight_map": {"model.layers.0.mlp.router.bias": "../etc/passwd"}})");
  expect_error(load_layer(dir.path, 0), {"weight_map", "not a file in the folder"});
  testing::write_file(dir.path / "model.safetensors.index.json", "{\"weight_map\": ");
  expect_error(load_layer(dir.path, 0), {"model.safetensors.index.json", "JSON"});
}

TEST(CheckpointLoadShards, FolderWithoutIndexListsTheShards) {
  TempDir dir;
  auto layers = make_layers(2, 15);
  const auto files = testing::write_gpt_oss_tensors(dir.path, layers, Naming::kOpenai, 3);
  fs::remove(dir.path / "model.safetensors.index.json");
  write_config(dir.path, kShape, 2, Naming::kOpenai);
  std::unique_ptr<Checkpoint> c;
  ASSERT_TRUE(Checkpoint::open(dir.path.string(), std::nullopt, &c).ok());
  EXPECT_EQ(c->info().files.size(), 3u);
  MoeWeightsView v;
  ASSERT_TRUE(c->layer(1, &v).ok());
  EXPECT_EQ(0, std::memcmp(v.w2.codes, layers[1].w2_codes.data(), layers[1].w2_codes.size()));
  // The same tensor in two shards is ambiguous without an index.
  fs::copy_file(files[0], dir.path / "zz-duplicate.safetensors");
  expect_error(Checkpoint::open(dir.path.string(), std::nullopt, &c), {"zz-duplicate", "in both"});
}

TEST(CheckpointErrors, ConfigValues) {
  TempDir dir;
  write_edited(dir, 16, [](auto&) {});
  testing::write_file(dir.path / "config.json", R"({"hidden_size": 1e300})");
  expect_error(load_layer(dir.path, 0), {"config.json", "hidden_size"});
  testing::write_file(dir.path / "config.json", R"({"num_local_experts": 9223372036854775807})");
  expect_error(load_layer(dir.path, 0), {"config.json", "num_local_experts"});
  testing::write_file(dir.path / "config.json", "{");
  expect_error(load_layer(dir.path, 0), {"config.json", "JSON"});
}

TEST(CheckpointErrors, NotACheckpoint) {
  TempDir dir;
  expect_error(load_layer(dir.path, 0), {"no .safetensors files"});
  expect_error(load_layer(dir.path / "absent", 0), {"absent", "no such file"});
  testing::write_file(dir.path / "x.safetensors",
                      testing::safetensors_bytes({{"foo", "U8", {2}, {1, 2}}}));
  expect_error(load_layer(dir.path, 0), {"no GPT-OSS MoE tensors"});
}

TEST(CheckpointProgress, ReportsScaleBytes) {
  TempDir dir;
  write_edited(dir, 14, [](auto&) {});
  CheckpointOptions opt;
  int64_t last_done = 0, last_total = 0;
  int calls = 0;
  opt.progress = [&](const std::string& stage, int64_t done, int64_t total) {
    if (stage.find("scales") == std::string::npos) return;
    ++calls;
    last_done = done;
    last_total = total;
  };
  std::unique_ptr<Checkpoint> c;
  ASSERT_TRUE(Checkpoint::open(dir.path.string(), opt, &c).ok());
  MoeWeightsView v;
  ASSERT_TRUE(c->layer(0, &v).ok());
  const int64_t scales = kShape.experts * 3 * kShape.hidden * kShape.intermediate / 32;
  EXPECT_GT(calls, 0);
  EXPECT_EQ(last_total, scales);
  EXPECT_EQ(last_done, scales);
}

}  // namespace
}  // namespace mxmoe
