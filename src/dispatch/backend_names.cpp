#include <string_view>

#include "mxmoe/backend.h"

namespace mxmoe {

const char* backend_name(BackendKind kind) {
  switch (kind) {
    case BackendKind::kCpu: return "cpu";
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

}  // namespace mxmoe
