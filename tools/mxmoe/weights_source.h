// Where `run` and `bench` get a layer's weights from.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "mxmoe/moe.h"

namespace mxmoe::cli {

struct WeightsOptions {
  bool random = false;
  uint64_t seed = 1;
  std::string model;  // gpt-oss-20b / gpt-oss-120b presets for the shape
  MoeShape shape{32, 2880, 2880, 4};
  std::string checkpoint;              // GPT-OSS safetensors file or folder
  int64_t layer = 0;                   // which layer of --checkpoint
  std::optional<int64_t> topk_given;   // --topk when passed (overrides the checkpoint's)
};

void add_weights_options(CLI::App& app, WeightsOptions& o);

// Owns whatever backs the view (synthetic tensors or a mapped checkpoint).
struct LoadedWeights {
  std::shared_ptr<void> owner;
  MoeWeightsView view;
};

Status load_weights(const WeightsOptions& o, LoadedWeights* out);

}  // namespace mxmoe::cli
