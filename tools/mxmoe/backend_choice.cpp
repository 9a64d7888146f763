#include "backend_choice.h"

#include <cstdlib>

#include <fmt/format.h>

namespace mxmoe::cli {

Status resolve_backend(const std::string& requested, const MoeShape& shape, BackendKind* kind,
                       std::string* reason) {
  (void)shape;
  std::string name = requested;
  const char* env = std::getenv("MXMOE_BACKEND");
  if (name == "auto" && env && *env) name = env;
  if (name == "auto") {
    *kind = BackendKind::kCpu;
    *reason = "cpu: no GPU backend is built yet";
    return Status::Ok();
  }
  const auto parsed = parse_backend_name(name);
  if (!parsed) return Status::InvalidArgument(fmt::format("unknown backend '{}'", name));
  *kind = *parsed;
  *reason = fmt::format("{}: requested", name);
  return Status::Ok();
}

}  // namespace mxmoe::cli
