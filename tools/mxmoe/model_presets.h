// The GPT-OSS MoE shapes the CLI knows by name (--model).
#pragma once

#include <cstdint>
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

// One rank's intermediate dimension under tensor parallel over `tp` GPUs as
// the engines hold it: I / tp rounded up to whole 32-blocks (w2's K is cut
// at MX block boundaries). gpt-oss (I = 2880): TP2 1440, TP4 736, TP8 384.
inline int64_t tp_shard_intermediate(int64_t intermediate, int tp) {
  const int64_t per_rank = (intermediate + tp - 1) / tp;
  return (per_rank + 31) / 32 * 32;
}

// The preset's shape, or null for an unknown name.
inline const MoeShape* find_model(std::string_view name) {
  for (const ModelPreset& m : kModelPresets)
    if (name == m.name) return &m.shape;
  return nullptr;
}

}  // namespace mxmoe::cli
