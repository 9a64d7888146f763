// A GPU backend's forward over a device image, whoever wrote the image and
// whoever owns its memory: the device layer over the image it prepared, the
// host-memory layer over one it streams into a forward's workspace.
#pragma once

#include <memory>

#include "cuda/common/device_backend.h"
#include "cuda/prepare/device_image.h"
#include "mxmoe/backend.h"
#include "mxmoe/layer.h"

namespace mxmoe::smxx {

// `kind`'s forward over `image` (a plan of `kind`) on the current device;
// Unsupported where this build has no such backend.
Status make_image_forward(BackendKind kind, const DeviceImage& image, const ActivationOptions& activations,
                          std::unique_ptr<DeviceForward>* out);

}  // namespace mxmoe::smxx
