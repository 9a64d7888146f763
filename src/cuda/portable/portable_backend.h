// Entry point of the `portable` CUDA backend (mma.sync, SM80+), compiled only
// when the build has CUDA.
#pragma once

#include <cstdint>
#include <memory>

#include "cuda/common/device_backend.h"
#include "cuda/portable/portable_launcher.h"
#include "cuda/prepare/device_image.h"
#include "mxmoe/backend.h"
#include "mxmoe/prepare.h"

namespace mxmoe {

struct PortableOptions {
  DeviceBackendOptions device;  // poisoned margins and workspace (tests)
  // Heuristic choices fixed (tests, benchmarks). Where a field is 0,
  // MXMOE_DOWN_COMBINE_WARPS (8, 16 or split) and MXMOE_DECODE_GEMM1_WARPS (4,
  // 8 or 16) are read instead.
  portable::Overrides overrides;
};

// Prepares `weights` with the portable plan and uploads them to the current
// CUDA device.
Status create_portable_backend(const MoeWeightsView& weights, std::unique_ptr<Backend>* out);
Status create_portable_backend(const MoeWeightsView& weights, const PortableOptions& options,
                               std::unique_ptr<Backend>* out);

namespace portable {

// Prepared weights on the current device: allocations owned by `storage`
// (freed when the last copy of it goes), that `view` points into.
struct UploadedWeights {
  DeviceWeights view;
  std::shared_ptr<const void> storage;
};

// The portable kernels' view of a device image of a portable or sm90 plan
// (src/cuda/prepare/device_image.h; the same layout): view.shape is the
// plan's shape, the router pointers are null when the image holds no router;
// `out` shares the image's allocations.
Status weights_from_image(const smxx::DeviceImage& image, UploadedWeights* out);

// The portable forward over a device image of a portable plan.
Status make_forward(const smxx::DeviceImage& image, std::unique_ptr<smxx::DeviceForward>* out,
                    const Overrides& overrides = {});

// Uploads `prepared` (a portable plan), each tensor inside
// `poison_margin_bytes` of poison (see DeviceBackendOptions; 0 for none), and
// returns the portable forward over it on the current device; `overrides` as
// in PortableOptions.
Status make_forward(const PreparedWeights& prepared, int64_t poison_margin_bytes,
                    std::unique_ptr<smxx::DeviceForward>* out, const Overrides& overrides = {});

// `o` with its unset fields read from the environment (PortableOptions).
Overrides overrides_from_env(Overrides o);

}  // namespace portable

}  // namespace mxmoe
