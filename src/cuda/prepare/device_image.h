// A layer's device image (src/prepare/device_image.h) on the current CUDA
// device, written by either executor of its plan:
//   upload_image: the host's prepared weights, swizzled and uploaded piece by
//     piece (at most 64 MB of host staging beside them);
//   prepare_image: the caller's weights in device memory, laid out by the
//     device kernels (smxx_prepare_kernels.h) straight into the image, after
//     the value checks run on the device too. It needs no device memory
//     beyond the image and 64 bytes of check results.
// The backends' forwards are built over an image, whichever wrote it. Each
// piece is an allocation of its own from the caller's allocator
// (device_memory.h): a caching allocator then reuses for a layer's codes the
// blocks that the engine's tensors of the same sizes held (an engine frees
// one layer's weights as it converts the next), where one allocation of the
// whole image would fit none of them.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include <cuda_runtime.h>

#include "cuda/common/device_memory.h"
#include "mxmoe/prepare.h"
#include "prepare/device_image.h"

namespace mxmoe::smxx {

// One allocation a piece, each inside its poison margins (if any).
using ImageMemory = std::array<DeviceBuffer, kImagePieces>;

struct DeviceImage {
  PreparePlan plan;
  SwigluParams swiglu;
  ScaleImage scales = ScaleImage::kPlanOrder;
  bool has_router = false;
  std::shared_ptr<const ImageMemory> storage;  // the allocations the pieces lie in
  std::array<const uint8_t*, kImagePieces> piece{};
  // Some scale byte of w13 / w2 is >= 128 (sm90's dequantisation then takes
  // its two-multiply path).
  bool w13_large_scales = false, w2_large_scales = false;
};

// Both executors: each piece inside `poison_margin_bytes` of poison
// (DeviceBackendOptions; 0 for none), its memory from `memory` (whose device
// is the current one), the copies and kernels enqueued on memory.stream; they
// return once the image is complete, and on error nothing stays allocated.
// `who` prefixes errors.
Status upload_image(const PreparedWeights& prepared, ScaleImage scales, int64_t poison_margin_bytes, const char* who,
                    const MemorySource& memory, DeviceImage* out);

// `weights` (every pointer memory of the current device, the plan's shape)
// checked as validate_weight_values checks host weights, with the same
// messages, and prepared per `plan`. memory.stream must be ordered after the
// writes of `weights`.
Status prepare_image(const PreparePlan& plan, ScaleImage scales, const MoeWeightsView& weights,
                     int64_t poison_margin_bytes, const char* who, const MemorySource& memory, DeviceImage* out);

// The pieces' allocations of an image of `plan` (margins poisoned) and their
// pointers, nothing else written: the first step of both executors. On error
// the pieces allocated so far are given back.
Status allocate_image(const PreparePlan& plan, ScaleImage scales, bool has_router, int64_t poison_margin_bytes,
                      const char* who, const MemorySource& memory, DeviceImage* out);

}  // namespace mxmoe::smxx
