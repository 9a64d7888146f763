// What a CUDA backend holds on its device for one layer: the eight pieces of
// the plan's prepared weights, in the order and byte layout the kernels read.
// Both executors write this image: the host one (prepare_weights, then the
// plan's swizzle or the block-scaled scale packing, uploaded piece by piece)
// and the device one (src/cuda/prepare/, straight from the caller's device
// tensors); the tests hold the two to the same bytes.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "mxmoe/prepare.h"

namespace mxmoe {

enum ImagePiece { kW13Codes, kW13Scales, kB13, kW2Codes, kW2Scales, kB2, kRouterWeight, kRouterBias, kImagePieces };

// How the scales are laid out: in the plan's swizzle order (cpu, portable,
// sm90), or packed expert by expert into the Blackwell block-scaled atoms
// (sm100, sm120: blockscaled_scales.h; a plan whose swizzle is kNone).
enum class ScaleImage { kPlanOrder, kBlockscaled };
ScaleImage scale_image_of(BackendKind kind);

// Bytes of each piece: codes at the plan's extents (prefetch rows included),
// scales at the plan's extents (kPlanOrder) or E packed experts
// (kBlockscaled), bf16 biases, and the router (0 bytes without one).
std::array<int64_t, kImagePieces> image_piece_bytes(const PreparePlan& plan, ScaleImage scales, bool has_router);

// The host executor's bytes of piece `piece` of `prepared`'s image.
Status host_image_piece(const PreparedWeights& prepared, ScaleImage scales, ImagePiece piece,
                        std::vector<uint8_t>* out);

}  // namespace mxmoe
