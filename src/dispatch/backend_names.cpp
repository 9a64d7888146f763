#include <string_view>

#include "mxmoe/backend.h"

namespace mxmoe {

const char* backend_name(BackendKind kind) {
  switch (kind) {
    case BackendKind::kCpu: return "cpu";
    case BackendKind::kReference: return "reference";
    case BackendKind::kPortable: return "portable";
    case BackendKind::kSm90: return "sm90";
    case BackendKind::kSm100: return "sm100";
    case BackendKind::kSm120: return "sm120";
  }
  return "?";
}

std::optional<BackendKind> parse_backend_name(std::string_view name) {
  for (BackendKind k : kAllBackends)
    if (name == backend_name(k)) return k;
  return std::nullopt;
}

const char* activation_format_name(ActivationFormat f) {
  return f == ActivationFormat::kMxfp8 ? "mxfp8" : "bf16";
}

std::optional<ActivationFormat> parse_activation_format(std::string_view name) {
  for (ActivationFormat f : {ActivationFormat::kBf16, ActivationFormat::kMxfp8})
    if (name == activation_format_name(f)) return f;
  return std::nullopt;
}

}  // namespace mxmoe
