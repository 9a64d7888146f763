// The GPT-OSS MoE shapes the CLI knows by name (--model).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "mxmoe/moe.h"

namespace mxmoe::cli {

struct ModelPreset {
  const char* name;
  MoeShape shape;
};
inline constexpr ModelPreset kModelPresets[] = {{"gpt-oss-20b", kGptOss20b}, {"gpt-oss-120b", kGptOss120b}};

inline std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const ModelPreset& m : kModelPresets) names.emplace_back(m.name);
  return names;
}

// The preset's shape, or null for an unknown name.
inline const MoeShape* find_model(std::string_view name) {
  for (const ModelPreset& m : kModelPresets)
    if (name == m.name) return &m.shape;
  return nullptr;
}

}  // namespace mxmoe::cli
