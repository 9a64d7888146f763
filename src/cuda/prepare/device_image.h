// A layer's device image (src/prepare/device_image.h) on the current CUDA
// device, written by either executor of its plan:
//   upload_image: the host's prepared weights, swizzled and uploaded piece by
//     piece (at most 64 MB of host staging beside them);
//   prepare_image: the caller's weights in device memory, laid out by the
//     device kernels (smxx_prepare_kernels.h) straight into the image, after
//     the value checks run on the device too. It needs no device memory
//     beyond the image and 64 bytes of check results.
// The backends' forwards are built over an image, whichever wrote it.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include <cuda_runtime.h>

#include "cuda/common/device_backend.h"
#include "mxmoe/prepare.h"
#include "prepare/device_image.h"

namespace mxmoe::smxx {

struct DeviceImage {
  PreparePlan plan;
  SwigluParams swiglu;
  ScaleImage scales = ScaleImage::kPlanOrder;
  bool has_router = false;
  std::shared_ptr<DeviceBuffer> storage;  // the one allocation the pieces lie in
  std::array<const uint8_t*, kImagePieces> piece{};
  // Some scale byte of w13 / w2 is >= 128 (sm90's dequantisation then takes
  // its two-multiply path).
  bool w13_large_scales = false, w2_large_scales = false;
};

// Each piece inside `poison_margin_bytes` of poison (DeviceBackendOptions; 0
// for none). `who` prefixes errors.
Status upload_image(const PreparedWeights& prepared, ScaleImage scales, int64_t poison_margin_bytes, const char* who,
                    DeviceImage* out);

// `weights` (every pointer memory of the current device, the plan's shape)
// checked as validate_weight_values checks host weights, with the same
// messages, and prepared per `plan`. Enqueued on `stream`, which the caller
// orders after the writes of `weights`; returns once the image is complete.
// On error nothing stays allocated.
Status prepare_image(const PreparePlan& plan, ScaleImage scales, const MoeWeightsView& weights,
                     int64_t poison_margin_bytes, const char* who, cudaStream_t stream, DeviceImage* out);

}  // namespace mxmoe::smxx
