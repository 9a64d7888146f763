#include <fmt/format.h>

#include "api/cpu_backend.h"
#include "api/reference_backend.h"
#include "mxmoe/backend.h"
#include "mxmoe/dispatch.h"
#ifdef MXMOE_WITH_CUDA
#include "cuda/portable/portable_backend.h"
#endif
#ifdef MXMOE_WITH_SM90
#include "cuda/sm90/sm90_backend.h"
#endif
#ifdef MXMOE_WITH_BLOCKSCALED
#include "cuda/blockscaled/blockscaled_backend.h"
#endif

namespace mxmoe {

Status check_activation_format(BackendKind kind, ActivationFormat format) {
  if (backend_info(kind).activation == format || kind == BackendKind::kReference) return Status::Ok();
  return Status::Unsupported(fmt::format(
      "{}: its GEMMs consume {} activations, not {} (the reference backend computes either; the Blackwell backends "
      "sm100 and sm120 take mxfp8, the others bf16)",
      backend_name(kind), activation_format_name(backend_info(kind).activation), activation_format_name(format)));
}

Status create_backend(BackendKind kind, const MoeWeightsView& weights, const ActivationOptions& activations,
                      std::unique_ptr<Backend>* out) {
  MXMOE_RETURN_IF_ERROR(check_activation_format(kind, activations.format));
  if (kind == BackendKind::kReference) return create_reference_backend(weights, activations, out);
  if (kind == BackendKind::kSm100 || kind == BackendKind::kSm120) {
#ifdef MXMOE_WITH_BLOCKSCALED
    return create_blockscaled_backend(kind, weights, activations, BlockscaledOptions{}, out);
#else
    return Status::Unsupported(fmt::format(
        "{}: left out of this build (it needs CUTLASS's headers: configure with MXMOE_CUTLASS_DIR)", backend_name(kind)));
#endif
  }
  return create_backend(kind, weights, out);
}

Status create_backend(BackendKind kind, const MoeWeightsView& weights,
                      std::unique_ptr<Backend>* out) {
  switch (kind) {
    case BackendKind::kCpu: return create_cpu_backend(weights, out);
    case BackendKind::kReference: return create_reference_backend(weights, ActivationOptions{}, out);
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
    case BackendKind::kSm100:
    case BackendKind::kSm120: break;
  }
  // The Blackwell backends take MXFP8 activations, which the overload with
  // ActivationOptions asks for.
  return check_activation_format(kind, ActivationFormat::kBf16);
}

}  // namespace mxmoe
