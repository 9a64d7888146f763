// Entry point of the `sm90` CUDA backend (wgmma, Hopper), compiled only when
// the build carries sm_90a code.
#pragma once

#include <memory>

#include "cuda/common/device_backend.h"
#include "cuda/prepare/device_image.h"
#include "cuda/sm90/heuristics.h"
#include "mxmoe/backend.h"
#include "mxmoe/prepare.h"

namespace mxmoe {

struct Sm90Options {
  DeviceBackendOptions device;  // poisoned margins and workspace (tests)
  // Path, token tile and the decode path's choices instead of the
  // heuristics' (tests, benchmarks). Where a field is 0, MXMOE_SM90_PATH
  // (decode | wgmma), MXMOE_SM90_TILE (a token tile of is_token_tile) and the
  // portable backend's variables (PortableOptions) are read instead.
  sm90::Overrides overrides;
};

// Prepares `weights` with the sm90 plan and uploads them to the current CUDA
// device, which must be an SM90 GPU.
Status create_sm90_backend(const MoeWeightsView& weights, std::unique_ptr<Backend>* out);
Status create_sm90_backend(const MoeWeightsView& weights, const Sm90Options& options, std::unique_ptr<Backend>* out);

namespace sm90 {

// Uploads `prepared` (an sm90 plan or shard) and returns the sm90 forward
// over it on the current device, which must be an SM90 GPU; `overrides` as in
// Sm90Options.
Status make_forward(const PreparedWeights& prepared, int64_t poison_margin_bytes, const Overrides& overrides,
                    std::unique_ptr<smxx::DeviceForward>* out);
// The same over a device image of an sm90 plan (src/cuda/prepare/device_image.h).
Status make_forward(const smxx::DeviceImage& image, const Overrides& overrides,
                    std::unique_ptr<smxx::DeviceForward>* out);

}  // namespace sm90

}  // namespace mxmoe
