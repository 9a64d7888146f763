// Framework-free launcher of the Blackwell backends (sm100, sm120): device
// pointers and a stream in, Status out; the GEMMs are CUTLASS's block-scaled
// grouped GEMMs of the arch, or the emulation on any GPU (GroupedGemm).
//
// Pipeline on one stream, capturable in a CUDA graph (no host synchronisation):
//   1. router + top-k + softmax, or the caller's routing made safe
//      (launch_check_routing)
//   2. group (token, slot) pairs by expert into 128-row tiles; each pair's x
//      row to MXFP8 in the block-scaled layout (launch_quantize_x_rows)
//   3. both GEMMs' problem descriptors on the device (launch_grouped_problems)
//   4. GEMM1: MXFP8 rows x MXFP4 w13 ([up; gate] halves) -> bf16
//   5. bias13 + SwiGLU + MXFP8 (launch_swiglu_quantize)
//   6. GEMM2: x MXFP4 w2 -> bf16
//   7. bias2, routing weight and the fixed-order combine (launch_combine_rows)
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "cuda/blockscaled/grouped_gemm_args.h"
#include "cuda/common/forward_args.h"
#include "mxmoe/backend.h"
#include "mxmoe/moe.h"
#include "mxmoe/status.h"

namespace mxmoe::blockscaled {

// Prepared weights on the device, from make_plan(kSm100 or kSm120, shape)
// (Hp, Ip multiples of 128; w13 rows [up; gate], each half padded):
//   w13 codes  E2M1 [E][2 Ip][Hp / 2 bytes]   scales [E][block-scaled 2 Ip x Hp / 32]
//   w2  codes  E2M1 [E][Hp][Ip / 2 bytes]     scales [E][block-scaled Hp x Ip / 32]
//   b13 [E, 2 Ip], b2 [E, Hp] bf16; router [E, Hp] bf16 and bias [E] (may be null)
// Each expert's scales take blockscaled_scale_bytes(rows, K / 32) bytes;
// padding holds code 0, scale 127, bias 0.
struct DeviceWeights {
  const char* who = "blockscaled";  // the backend's name, in messages
  MoeShape shape;                   // real (unpadded) shape
  int64_t hidden_padded = 0, intermediate_padded = 0;
  SwigluParams swiglu;
  MxScaleRule mxfp8_scale_rule = MxScaleRule::kTriton;  // of the activations' MXFP8 scales
  const uint8_t* w13_codes = nullptr;
  const uint8_t* w13_scales = nullptr;
  const uint16_t* b13 = nullptr;
  const uint8_t* w2_codes = nullptr;
  const uint8_t* w2_scales = nullptr;
  const uint16_t* b2 = nullptr;
  const uint16_t* router_weight = nullptr;
  const uint16_t* router_bias = nullptr;
};

// The GEMMs and the device they run on.
struct GemmRunner {
  GroupedGemm gemm;
  int sms = 0;  // the device's SM count (persistent GEMMs size their grids by it)
  size_t gemm_workspace = 0;  // gemm.workspace_bytes(E, sms): each GEMM launch's own
};

// Bytes of device workspace moe_forward needs for `tokens` tokens.
size_t workspace_bytes(const DeviceWeights& w, const GemmRunner& gemm, int64_t tokens);

// Enqueues the whole forward on `stream`. `workspace` holds
// workspace_bytes(w, gemm, tokens) bytes, 256-byte aligned; args as
// forward_arg_error wants them. A caller's routing ids outside [0, E) give
// their tokens NaN rows of y.
Status moe_forward(const DeviceWeights& w, const GemmRunner& gemm, const smxx::ForwardArgs& args, void* workspace,
                   size_t workspace_size, cudaStream_t stream);

}  // namespace mxmoe::blockscaled
