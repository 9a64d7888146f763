// GPT-OSS tensor names and config.json parsing.
#include "checkpoint/gpt_oss_layout.h"

#include <charconv>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace mxmoe {

const char* gpt_oss_naming_name(GptOssNaming n) {
  return n == GptOssNaming::kHf ? "hf" : "openai";
}

GptOssLayerNames gpt_oss_layer_names(GptOssNaming naming, int64_t layer) {
  GptOssLayerNames n;
  if (naming == GptOssNaming::kHf) {
    const std::string p = fmt::format("model.layers.{}.mlp.", layer);
    n.w13_blocks = p + "experts.gate_up_proj_blocks";
    n.w13_scales = p + "experts.gate_up_proj_scales";
    n.b13 = p + "experts.gate_up_proj_bias";
    n.w2_blocks = p + "experts.down_proj_blocks";
    n.w2_scales = p + "experts.down_proj_scales";
    n.b2 = p + "experts.down_proj_bias";
    n.router_weight = p + "router.weight";
    n.router_bias = p + "router.bias";
  } else {
    const std::string p = fmt::format("block.{}.mlp.", layer);
    n.w13_blocks = p + "mlp1_weight.blocks";
    n.w13_scales = p + "mlp1_weight.scales";
    n.b13 = p + "mlp1_bias";
    n.w2_blocks = p + "mlp2_weight.blocks";
    n.w2_scales = p + "mlp2_weight.scales";
    n.b2 = p + "mlp2_bias";
    n.router_weight = p + "gate.weight";
    n.router_bias = p + "gate.bias";
  }
  return n;
}

namespace {

// Layer index N when `name` is exactly prefix + N + suffix (N decimal, no sign).
std::optional<int64_t> layer_of(std::string_view name, std::string_view prefix,
                                std::string_view suffix) {
  if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) ||
      !name.ends_with(suffix))
    return std::nullopt;
  const std::string_view digits =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  int64_t n = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || end != digits.data() + digits.size() || n < 0) return std::nullopt;
  return n;
}

}  // namespace

std::optional<GptOssLayout> detect_gpt_oss_layout(const std::vector<std::string>& names) {
  int64_t hf = -1, openai = -1;  // largest layer index seen per scheme
  for (const auto& name : names) {
    if (auto n = layer_of(name, "model.layers.", ".mlp.experts.gate_up_proj_blocks"))
      hf = std::max(hf, *n);
    if (auto n = layer_of(name, "block.", ".mlp.mlp1_weight.blocks")) openai = std::max(openai, *n);
  }
  if (hf < 0 && openai < 0) return std::nullopt;
  // A file holding both (not seen in practice) is read by the HF names.
  if (hf >= 0) return GptOssLayout{GptOssNaming::kHf, hf + 1};
  return GptOssLayout{GptOssNaming::kOpenai, openai + 1};
}

Status parse_gpt_oss_config(const std::string& text, const std::string& file, GptOssConfig* out) {
  constexpr int64_t kMaxDim = int64_t(1) << 24;
  using nlohmann::json;
  *out = GptOssConfig{};
  const json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded()) return Status::IoError(fmt::format("{}: not valid JSON", file));
  if (!doc.is_object()) return Status::IoError(fmt::format("{}: not a JSON object", file));

  GptOssConfig c;
  // First key present among `keys` must be a positive integer.
  auto get_int = [&](std::initializer_list<const char*> keys,
                     std::optional<int64_t>* dst) -> Status {
    for (const char* k : keys) {
      const auto it = doc.find(k);
      if (it == doc.end() || it->is_null()) continue;
      // The cap keeps products like E * 2I * H/2 far from int64 overflow.
      if (!it->is_number_integer() || it->get<int64_t>() <= 0 || it->get<int64_t>() > kMaxDim)
        return Status::IoError(
            fmt::format("{}: '{}' must be an integer in [1, {}]", file, k, kMaxDim));
      *dst = it->get<int64_t>();
      return Status::Ok();
    }
    return Status::Ok();
  };
  MXMOE_RETURN_IF_ERROR(get_int({"num_local_experts", "num_experts"}, &c.experts));
  MXMOE_RETURN_IF_ERROR(get_int({"hidden_size"}, &c.hidden));
  MXMOE_RETURN_IF_ERROR(get_int({"intermediate_size"}, &c.intermediate));
  MXMOE_RETURN_IF_ERROR(get_int({"num_experts_per_tok", "experts_per_token"}, &c.topk));
  MXMOE_RETURN_IF_ERROR(get_int({"num_hidden_layers"}, &c.layers));
  if (const auto it = doc.find("swiglu_limit"); it != doc.end() && !it->is_null()) {
    if (!it->is_number() || !(it->get<double>() > 0))
      return Status::IoError(fmt::format("{}: 'swiglu_limit' must be a positive number", file));
    c.swiglu_limit = float(it->get<double>());
  }
  // The MX block size is 32 along K of both matrices: H for w13, I for w2.
  if (c.hidden && *c.hidden % 32 != 0)
    return Status::InvalidArgument(fmt::format(
        "{}: hidden_size {} is not a multiple of 32 (the MXFP4 block size)", file, *c.hidden));
  if (c.intermediate && *c.intermediate % 32 != 0)
    return Status::InvalidArgument(fmt::format(
        "{}: intermediate_size {} is not a multiple of 32 (the MXFP4 block size)", file,
        *c.intermediate));
  *out = c;
  return Status::Ok();
}

}  // namespace mxmoe
