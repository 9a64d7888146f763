#include <fmt/format.h>

#include "api/cpu_backend.h"
#include "mxmoe/backend.h"
#ifdef MXMOE_WITH_CUDA
#include "cuda/portable/portable_backend.h"
#endif
#ifdef MXMOE_WITH_SM90
#include "cuda/sm90/sm90_backend.h"
#endif

namespace mxmoe {

Status create_backend(BackendKind kind, const MoeWeightsView& weights,
                      std::unique_ptr<Backend>* out) {
  switch (kind) {
    case BackendKind::kCpu: return create_cpu_backend(weights, out);
    case BackendKind::kPortable:
#ifdef MXMOE_WITH_CUDA
      return create_portable_backend(weights, out);
#else
      return Status::Unsupported("portable: this build has no CUDA (configure with nvcc present)");
#endif
    case BackendKind::kSm90:
#ifdef MXMOE_WITH_SM90
      return create_sm90_backend(weights, out);
#else
      return Status::Unsupported("sm90: this build has no sm_90a code (add 90a to CMAKE_CUDA_ARCHITECTURES)");
#endif
    default: break;
  }
  return Status::Unsupported(fmt::format("{}: not built yet", backend_name(kind)));
}

}  // namespace mxmoe
