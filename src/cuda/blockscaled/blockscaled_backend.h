// Entry point of the Blackwell backends `sm100` and `sm120`: MXFP8
// activations x MXFP4 weights on the block-scaled tensor cores, through the
// pipeline of blockscaled_launcher.h with the arch's CUTLASS grouped GEMM,
// or, for tests on any SM80+ GPU, with the emulated GEMM in its place.
#pragma once

#include <cstdint>
#include <memory>

#include "cuda/blockscaled/blockscaled_launcher.h"
#include "cuda/common/device_backend.h"
#include "cuda/prepare/device_image.h"
#include "mxmoe/backend.h"
#include "mxmoe/prepare.h"

namespace mxmoe {

struct BlockscaledOptions {
  DeviceBackendOptions device;  // poisoned margins and workspace (tests)
  // Run the emulated grouped GEMM (smxx_emulated_grouped_gemm.h) in place of
  // the arch's CUTLASS GEMM, on any SM80+ GPU: every other kernel and buffer
  // is the backend's own.
  bool emulate_gemm = false;
};

// Prepares `weights` with the plan of `kind` (kSm100 or kSm120) and uploads
// them to the current CUDA device, which must be the arch's GPU unless the
// GEMM is emulated. `activations` must be MXFP8 (its scale rule is used).
Status create_blockscaled_backend(BackendKind kind, const MoeWeightsView& weights,
                                  const ActivationOptions& activations, const BlockscaledOptions& options,
                                  std::unique_ptr<Backend>* out);

namespace blockscaled {

// The arch's CUTLASS GEMM, when this build carries its code; null otherwise.
const GroupedGemm* arch_gemm(BackendKind kind);

// Whether the current device runs `kind`'s GEMM (its CUTLASS GEMM on the
// arch's GPU, or the emulation on SM80+); the reason where not.
Status check_device(BackendKind kind, bool emulate_gemm);

// Uploads `prepared` (a plan of kind) and returns the forward over it on the
// current device.
Status make_forward(BackendKind kind, const PreparedWeights& prepared, const ActivationOptions& activations,
                    bool emulate_gemm, int64_t poison_margin_bytes, std::unique_ptr<smxx::DeviceForward>* out);
// The same over a device image of kind's plan (ScaleImage::kBlockscaled).
Status make_forward(BackendKind kind, const smxx::DeviceImage& image, const ActivationOptions& activations,
                    bool emulate_gemm, std::unique_ptr<smxx::DeviceForward>* out);

}  // namespace blockscaled
}  // namespace mxmoe
