// GPT-OSS checkpoint conventions: the two tensor naming schemes (HF release and
// the original OpenAI release) and the two config.json forms.
//
// Per layer N, both schemes hold the same bytes:
//   HF: model.layers.N.mlp.experts.gate_up_proj_{blocks,scales,bias},
//       ...experts.down_proj_{blocks,scales,bias}, model.layers.N.mlp.router.{weight,bias}
//   OpenAI: block.N.mlp.mlp1_weight.{blocks,scales}, block.N.mlp.mlp1_bias,
//       block.N.mlp.mlp2_weight.{blocks,scales}, block.N.mlp.mlp2_bias,
//       block.N.mlp.gate.{weight,bias}
// gate_up / mlp1 rows interleave gate (even) and up (odd): mxmoe's w13 order.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mxmoe/status.h"

namespace mxmoe {

enum class GptOssNaming { kHf, kOpenai };
const char* gpt_oss_naming_name(GptOssNaming n);  // "hf" / "openai"

struct GptOssLayerNames {
  std::string w13_blocks, w13_scales, b13;  // U8 [E,2I,H/32,16], U8 [E,2I,H/32], BF16 [E,2I]
  std::string w2_blocks, w2_scales, b2;     // U8 [E,H,I/32,16],  U8 [E,H,I/32],  BF16 [E,H]
  std::string router_weight, router_bias;   // BF16 [E,H], BF16 [E]
};
GptOssLayerNames gpt_oss_layer_names(GptOssNaming naming, int64_t layer);

// The scheme and number of layers (largest N + 1 over the w13 blocks tensors)
// found among `names`; nullopt when neither scheme's MoE tensors are present.
struct GptOssLayout {
  GptOssNaming naming = GptOssNaming::kHf;
  int64_t layers = 0;
};
std::optional<GptOssLayout> detect_gpt_oss_layout(const std::vector<std::string>& names);

// Fields of config.json that the MoE block needs. Absent fields stay nullopt.
struct GptOssConfig {
  std::optional<int64_t> experts, hidden, intermediate, topk, layers;
  std::optional<float> swiglu_limit;
};
// Parses config.json text in either form (HF: num_local_experts,
// num_experts_per_tok; OpenAI: num_experts, experts_per_token). `file` names
// the file in errors.
Status parse_gpt_oss_config(const std::string& text, const std::string& file, GptOssConfig* out);

}  // namespace mxmoe
