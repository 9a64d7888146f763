// CPU reference MoE forward: the oracle every backend is checked against.
// It dequantizes the same MXFP4 bytes the kernels read and computes in fp32
// (or fp64 for tests), multithreaded over tokens/experts.
#pragma once

#include <cstdint>

#include "mxmoe/backend.h"
#include "mxmoe/moe.h"
#include "mxmoe/status.h"

namespace mxmoe {

struct ReferenceOptions {
  bool fp64 = false;  // accumulate in double (tests); fp32 otherwise
  int threads = 0;    // 0 = all hardware threads
  // kMxfp8: x (each token's row) and each pair's SwiGLU output are replaced by
  // their MXFP8 values (E4M3, scales per `activations.mxfp8_scale_rule`)
  // before the GEMM that reads them; the router still reads x as given.
  ActivationOptions activations;
  // Each GEMM product (x W13^T per gate/up column, a W2^T per output) rounded
  // to bf16 before its bias is added, as GEMMs with a bf16 D write them (the
  // sm100 and sm120 backends): the reference of those pipelines' exact path.
  bool bf16_gemm_products = false;
};

// Router: logits = x W^T + b (fp32 accumulate), top-k with ties to the lower id,
// softmax over the k selected. x: float [T, H]. Fills `out` ([T, k]).
Status reference_route(const MoeWeightsView& w, const float* x, int64_t tokens, Routing* out,
                       const ReferenceOptions& opt = {});

// y [T, H] = MoE(x [T, H]). `routing` may be null (then the router runs).
Status reference_forward(const MoeWeightsView& w, const float* x, int64_t tokens,
                         const RoutingView* routing, float* y, const ReferenceOptions& opt = {});

}  // namespace mxmoe
