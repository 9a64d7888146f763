// The per-call arguments of a CUDA backend's forward (device pointers).
#pragma once

#include <cstdint>
#include <string_view>

namespace mxmoe::smxx {

struct ForwardArgs {
  const uint16_t* x = nullptr;       // bf16 [T, H] (real H), rows x_stride elements apart
  int64_t x_stride = 0;              // elements; 0 means H (dense rows)
  int64_t tokens = 0;
  const int32_t* topk_ids = nullptr;     // [T, k]; null: run the router
  const float* topk_weights = nullptr;   // [T, k]; null together with topk_ids
  float* y = nullptr;                // fp32 [T, H], or
  uint16_t* y_bf16 = nullptr;        // bf16 [T, H]: exactly one of the two is set
};

inline bool aligned_16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The row stride of x in elements.
inline int64_t x_row_stride(const ForwardArgs& a, int64_t hidden) { return a.x_stride ? a.x_stride : hidden; }

// What the first argument that breaks the kernels' access rules does wrong,
// or "" when none does: the router and the decode GEMMs read x rows 16 bytes at a time (so x
// is 16-byte aligned and its row stride, at least H, a multiple of 8
// elements), and the combine kernels write y rows so (H is a multiple of 32,
// so every row is aligned). Exactly one of y and y_bf16 is set.
inline std::string_view forward_arg_error(const ForwardArgs& a, int64_t hidden) {
  if (!aligned_16(a.x)) return "x must be 16-byte aligned";
  const int64_t stride = x_row_stride(a, hidden);
  if (stride < hidden || stride % 8 != 0) return "x's row stride must be at least H and a multiple of 8 elements";
  if ((a.y == nullptr) == (a.y_bf16 == nullptr)) return "exactly one of y (fp32) and y_bf16 must be given";
  if (!aligned_16(a.y ? static_cast<const void*>(a.y) : a.y_bf16)) return "y must be 16-byte aligned";
  return "";
}

}  // namespace mxmoe::smxx
