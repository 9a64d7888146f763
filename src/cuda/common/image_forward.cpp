#include "cuda/common/image_forward.h"

#include <fmt/format.h>

#include "cuda/portable/portable_backend.h"
#ifdef MXMOE_WITH_BLOCKSCALED
#include "cuda/blockscaled/blockscaled_backend.h"
#endif
#ifdef MXMOE_WITH_SM90
#include "cuda/sm90/sm90_backend.h"
#endif

namespace mxmoe::smxx {

Status make_image_forward(BackendKind kind, const DeviceImage& image, const ActivationOptions& activations,
                          std::unique_ptr<DeviceForward>* out) {
  switch (kind) {
    case BackendKind::kPortable: return portable::make_forward(image, out);
#ifdef MXMOE_WITH_SM90
    case BackendKind::kSm90: return sm90::make_forward(image, {}, out);
#endif
#ifdef MXMOE_WITH_BLOCKSCALED
    case BackendKind::kSm100:
    case BackendKind::kSm120: return blockscaled::make_forward(kind, image, activations, false, out);
#endif
    default: break;
  }
  (void)activations;
  return Status::Unsupported(fmt::format("{}: no device layer in this build", backend_name(kind)));
}

}  // namespace mxmoe::smxx
