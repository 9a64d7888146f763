// Framework-free launcher API of the sm90 backend (Hopper, sm_90a): device
// pointers and a stream in, Status out. The Backend object (sm90_backend.cpp)
// and the tests call these; none of them allocates or synchronises.
//
// Pipeline on one stream, capturable in a CUDA graph, on the wgmma path:
//   1. router + top-k + softmax (only when no precomputed routing is passed)
//   2. group (token, slot) pairs by expert into token tiles (is_token_tile: 16 to 192)
//   3. pack: gather each tile row's x into the byte image of the GEMMs'
//      shared-memory stages (sm90_layout.h), zeros for padding rows and K >= H
//   4. GEMM1 (wgmma, w13, bias, SwiGLU) -> packed activations
//   5. GEMM2 (wgmma, w2, bias) -> one bf16 row per (token, slot) pair
//   6. combine: each token sums its k rows times their routing weights in
//      slot order (no atomics)
// Steps 1 and 2 are the portable backend's kernels (src/cuda/common). On
// the decode path (heuristics.h) the whole forward is the portable one, on
// the same weights.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "cuda/portable/portable_launcher.h"
#include "cuda/sm90/heuristics.h"
#include "mxmoe/status.h"

namespace mxmoe::sm90 {

// Weights on the device in the layout of make_plan(BackendKind::kSm90, shape):
// the portable layout (see portable::DeviceWeights), H and I padded to
// multiples of 64, codes in 128-row tiles (kMmaRowTiles128).
struct DeviceWeights {
  portable::DeviceWeights base;
  // Whether some E8M0 scale byte of the tensor is >= 128: such scales need a
  // second bf16 multiply in the dequantisation. true is always correct.
  bool w13_large_scales = true;
  bool w2_large_scales = true;
};

using ForwardArgs = smxx::ForwardArgs;

// The configuration the heuristics pick for `tokens` tokens of these weights.
Config choose_config(const DeviceWeights& w, int64_t tokens, const Overrides& overrides = {});

// Bytes of device workspace moe_forward needs for `tokens` tokens under `cfg`.
size_t workspace_bytes(const DeviceWeights& w, int64_t tokens, const Config& cfg);

// Enqueues the whole forward on `stream`. `workspace` must hold
// workspace_bytes(w, tokens, cfg) bytes, 256-byte aligned; args.x and args.y
// are 16-byte aligned (forward_arg_error). Call init_kernels
// once before the first forward on the wgmma path.
Status moe_forward(const DeviceWeights& w, const Config& cfg, const ForwardArgs& args, void* workspace,
                   size_t workspace_size, cudaStream_t stream);

// Raises the shared-memory limit of the GEMM kernels (once per process and
// device, outside stream capture).
Status init_kernels();

}  // namespace mxmoe::sm90
