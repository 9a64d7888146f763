// Framework-free launcher API of the portable backend: device pointers and a
// stream in, Status out. The Backend object (portable_backend.cpp), the tests
// and any binding call these functions; none of them allocates or synchronises.
//
// Pipeline on one stream, capturable in a CUDA graph (no host synchronisation):
//   1. router + top-k + softmax (only when no precomputed routing is passed)
//   2. group (token, slot) pairs by expert: counts, scan, stable scatter,
//      per-expert padding to the token tile, tile schedule on the device
//   3. GEMM1 (gather x rows, MXFP4 w13 dequantised in registers, bias, SwiGLU)
//   4. GEMM2 (w2, bias, times the routing weight) into one row per pair
//   5. combine: each token sums its k rows in slot order (no atomics)
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "cuda/common/forward_args.h"
#include "cuda/portable/heuristics.h"
#include "cuda/common/smxx_moe_kernels.h"
#include "mxmoe/moe.h"
#include "mxmoe/prepare.h"
#include "mxmoe/status.h"

namespace mxmoe::portable {

// Prepared weights on the device, in the dense padded layout of
// make_plan(BackendKind::kPortable, shape):
//   w13 codes [E, 2Ip, Hp/2], scales [E, 2Ip, Hp/32], rows interleaved gate/up
//   w2  codes [E, Hp, Ip/2],  scales [E, Hp, Ip/32]
//   b13 [E, 2Ip], b2 [E, Hp] bf16; router [E, Hp] bf16 and bias [E] (may be null)
// Hp and Ip are multiples of 64; padding holds code 0, scale 127, bias 0. The
// codes are in the plan's fragment order (`swizzle`: kMmaRowGroups16, or
// kMmaRowTiles128 for an sm90 plan, applied by swizzle_codes), the scales in
// the fragment scale order (swizzle_scales: a lane's four scales of a chunk
// in one word, each 32-row block where its dense rows were); biases dense.
struct DeviceWeights {
  MoeShape shape;  // real (unpadded) shape
  WeightSwizzle swizzle = WeightSwizzle::kMmaRowGroups16;
  int64_t hidden_padded = 0, intermediate_padded = 0;
  // kInterleaved or kInterleavedChunkOrder (the sm90 plan's): GEMM1 stores
  // the output of its row pair q at column q, or chunk_order_pair_column.
  W13Layout w13_layout = W13Layout::kInterleaved;
  SwigluParams swiglu;
  const uint8_t* w13_codes = nullptr;
  const uint8_t* w13_scales = nullptr;
  const uint16_t* b13 = nullptr;
  const uint8_t* w2_codes = nullptr;
  const uint8_t* w2_scales = nullptr;
  const uint16_t* b2 = nullptr;
  const uint16_t* router_weight = nullptr;
  const uint16_t* router_bias = nullptr;
};

using ForwardArgs = smxx::ForwardArgs;

// Largest expert count the grouping kernel's shared-memory tables hold.
inline constexpr int64_t kMaxExperts = smxx::kMaxExperts;

// Bytes of device workspace moe_forward needs for `tokens` tokens.
size_t workspace_bytes(const DeviceWeights& w, int64_t tokens);

// Step 1 alone: router + top-k + softmax of x (bf16 [tokens, H]) over all
// w.shape.experts experts into ids and weights [tokens, w.shape.topk]. Needs
// only w's shape, hidden_padded and router pointers; for callers that route
// on one device and run the experts elsewhere. x is 16-byte aligned.
Status route_topk(const DeviceWeights& w, const uint16_t* x, int64_t tokens, int32_t* ids,
                  float* weights, cudaStream_t stream);

// Enqueues the whole forward on `stream`. `workspace` must hold
// workspace_bytes(w, tokens) bytes, 256-byte aligned; args.x and args.y are
// 16-byte aligned (forward_arg_error). A caller's routing ids outside [0, E)
// give their tokens NaN rows of y (launch_check_routing).
// `overrides` fixes choices the heuristics make otherwise (tests, benchmarks,
// the sm90 backend's decode path).
Status moe_forward(const DeviceWeights& w, const ForwardArgs& args, void* workspace,
                   size_t workspace_size, cudaStream_t stream, const Overrides& overrides = {});

}  // namespace mxmoe::portable
