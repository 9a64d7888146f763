// The per-call arguments of a CUDA backend's forward (device pointers).
#pragma once

#include <cstdint>
#include <string_view>

namespace mxmoe::smxx {

struct ForwardArgs {
  const uint16_t* x = nullptr;       // bf16 [T, H] (real H, row stride H)
  int64_t tokens = 0;
  const int32_t* topk_ids = nullptr;     // [T, k]; null: run the router
  const float* topk_weights = nullptr;   // [T, k]; null together with topk_ids
  float* y = nullptr;                // fp32 [T, H]
};

inline bool aligned_16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The first of x and y that is not 16-byte aligned, or "" when both are: the
// router and the decode GEMMs read x rows 16 bytes at a time, and the combine
// kernels write y rows so (H is a multiple of 32, so every row is aligned).
inline std::string_view misaligned_arg(const ForwardArgs& a) {
  if (!aligned_16(a.x)) return "x";
  if (!aligned_16(a.y)) return "y";
  return "";
}

}  // namespace mxmoe::smxx
