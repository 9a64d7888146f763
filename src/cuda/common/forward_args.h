// The per-call arguments of a CUDA backend's forward (device pointers).
#pragma once

#include <cstdint>

namespace mxmoe::smxx {

struct ForwardArgs {
  const uint16_t* x = nullptr;       // bf16 [T, H] (real H, row stride H)
  int64_t tokens = 0;
  const int32_t* topk_ids = nullptr;     // [T, k]; null: run the router
  const float* topk_weights = nullptr;   // [T, k]; null together with topk_ids
  float* y = nullptr;                // fp32 [T, H]
};

}  // namespace mxmoe::smxx
