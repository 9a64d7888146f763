#include <fmt/format.h>

#include "api/cpu_backend.h"
#include "mxmoe/backend.h"

namespace mxmoe {

Status create_backend(BackendKind kind, const MoeWeightsView& weights,
                      std::unique_ptr<Backend>* out) {
  switch (kind) {
    case BackendKind::kCpu: return create_cpu_backend(weights, out);
    default: break;
  }
  return Status::Unsupported(fmt::format("{}: not built yet", backend_name(kind)));
}

}  // namespace mxmoe
