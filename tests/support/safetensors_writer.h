// Test-only writers of safetensors files and GPT-OSS checkpoint folders. The
// tensor names are spelled out here independently of the library's tables, so
// a typo in either shows up as a failing test.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "mxmoe/moe.h"

namespace mxmoe::testing {

// A fresh folder under the system temp dir, removed with everything in it.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("mxmoe_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

struct StEntry {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

template <typename T>
std::vector<uint8_t> as_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Serializes entries in order, each starting at an 8-byte aligned data offset
// (the header is space-padded so the data section starts 8-aligned too).
inline std::string safetensors_bytes(const std::vector<StEntry>& entries,
                                     const std::map<std::string, std::string>& metadata = {}) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::string data;
  for (const auto& e : entries) {
    while (data.size() % 8) data.push_back('\0');
    const size_t begin = data.size();
    data.append(reinterpret_cast<const char*>(e.bytes.data()), e.bytes.size());
    h[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string header = h.dump();
  while (header.size() % 8) header.push_back(' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((uint64_t(header.size()) >> (8 * i)) & 0xFF);
  return out + header + data;
}

inline void write_file(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

enum class Naming { kHf, kOpenai };

// The eight MoE tensors of one layer, in the given naming scheme.
inline std::vector<StEntry> gpt_oss_layer_entries(const MoeWeights& w, int64_t layer, Naming naming) {
  const int64_t E = w.shape.experts, H = w.shape.hidden, I = w.shape.intermediate;
  const bool hf = naming == Naming::kHf;
  const std::string p =
      hf ? "model.layers." + std::to_string(layer) + ".mlp." : "block." + std::to_string(layer) + ".mlp.";
  return {
      {p + (hf ? "router.weight" : "gate.weight"), "BF16", {E, H}, as_bytes(w.router_weight)},
      {p + (hf ? "router.bias" : "gate.bias"), "BF16", {E}, as_bytes(w.router_bias)},
      {p + (hf ? "experts.gate_up_proj_blocks" : "mlp1_weight.blocks"), "U8", {E, 2 * I, H / 32, 16}, w.w13_codes},
      {p + (hf ? "experts.gate_up_proj_scales" : "mlp1_weight.scales"), "U8", {E, 2 * I, H / 32}, w.w13_scales},
      {p + (hf ? "experts.gate_up_proj_bias" : "mlp1_bias"), "BF16", {E, 2 * I}, as_bytes(w.b13)},
      {p + (hf ? "experts.down_proj_blocks" : "mlp2_weight.blocks"), "U8", {E, H, I / 32, 16}, w.w2_codes},
      {p + (hf ? "experts.down_proj_scales" : "mlp2_weight.scales"), "U8", {E, H, I / 32}, w.w2_scales},
      {p + (hf ? "experts.down_proj_bias" : "mlp2_bias"), "BF16", {E, H}, as_bytes(w.b2)},
  };
}

// config.json in the HF or the original OpenAI form.
inline nlohmann::json gpt_oss_config(const MoeShape& s, int64_t layers, float swiglu_limit,
                                     Naming form) {
  if (form == Naming::kHf)
    return {{"architectures", {"GptOssForCausalLM"}}, {"hidden_size", s.hidden},
            {"intermediate_size", s.intermediate}, {"num_local_experts", s.experts},
            {"num_experts_per_tok", s.topk}, {"swiglu_limit", swiglu_limit},
            {"num_hidden_layers", layers}, {"vocab_size", 201088}};
  return {{"num_hidden_layers", layers}, {"num_experts", s.experts}, {"experts_per_token", s.topk},
          {"hidden_size", s.hidden}, {"intermediate_size", s.intermediate},
          {"swiglu_limit", swiglu_limit}, {"vocab_size", 201088}};
}

// Writes all layers' tensors as `shards` files (round-robin by tensor) plus
// model.safetensors.index.json when shards > 1. Returns the file paths.
inline std::vector<std::filesystem::path> write_gpt_oss_tensors(
    const std::filesystem::path& dir, const std::vector<MoeWeights>& layers, Naming naming,
    int shards) {
  std::vector<std::vector<StEntry>> per(static_cast<size_t>(shards));
  nlohmann::json weight_map = nlohmann::json::object();
  std::vector<std::string> names;
  for (int s = 0; s < shards; ++s)
    names.push_back(shards == 1 ? "model.safetensors"
                                : "model-0000" + std::to_string(s + 1) + "-of-0000" +
                                      std::to_string(shards) + ".safetensors");
  size_t k = 0;
  for (size_t l = 0; l < layers.size(); ++l)
    for (auto& e : gpt_oss_layer_entries(layers[l], int64_t(l), naming)) {
      const size_t s = k++ % size_t(shards);
      weight_map[e.name] = names[s];
      per[s].push_back(std::move(e));
    }
  std::vector<std::filesystem::path> paths;
  for (int s = 0; s < shards; ++s) {
    paths.push_back(dir / names[size_t(s)]);
    write_file(paths.back(), safetensors_bytes(per[size_t(s)], {{"format", "pt"}}));
  }
  if (shards > 1)
    write_file(dir / "model.safetensors.index.json",
               nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}.dump(2));
  return paths;
}

// A one-file checkpoint folder in the Hugging Face naming: `layers`' tensors
// and a config.json that describes them (swiglu_limit 7).
inline void write_hf_checkpoint(const std::filesystem::path& dir, const std::vector<MoeWeights>& layers) {
  write_gpt_oss_tensors(dir, layers, Naming::kHf, 1);
  write_file(dir / "config.json", gpt_oss_config(layers.at(0).shape, int64_t(layers.size()), 7.0f, Naming::kHf).dump());
}

}  // namespace mxmoe::testing
