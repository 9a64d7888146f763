// The device executor of a preparation plan: kernels that write each piece of
// a layer's device image (src/prepare/device_image.h) straight from the
// caller's weights in device memory, one destination word or byte a thread,
// through the index functions the host executor uses
// (src/prepare/layout_index.h). They need no memory beyond the image itself.
// Each launcher enqueues one kernel on `stream` and neither allocates nor
// synchronises.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "mxmoe/moe.h"
#include "mxmoe/prepare.h"
#include "mxmoe/status.h"

namespace mxmoe::smxx {

// Which source row a prepared row of one weight tensor copies: rows [e * rows,
// (e + 1) * rows) are expert e's; past experts * rows lie the prefetch rows.
// w13 rows go through the two W13Layouts (layout::w13_source_row); w2 row h
// copies source row h while h < src_rows.
struct RowMap {
  int64_t experts = 0, rows = 0;  // prepared rows an expert
  bool w13 = false;
  W13Layout dst_layout = W13Layout::kInterleaved, src_layout = W13Layout::kInterleaved;
  int64_t dst_I = 0, src_I = 0;   // w13: intermediate columns, prepared and source
  int64_t src_rows = 0;           // w2: the source's rows (H)
};

// One MXFP4 source tensor in device memory (MxMatrixView's strides) and the
// prepared tensor's padded K. A source in the cpu backend's order (a cpu
// pack's experts, streamed to the device) has cpu16 set: its rows lie in
// 16-row groups of WeightSwizzle::kCpuRowGroups16, an expert
// code_expert_stride and scale_expert_stride bytes (the row strides unused).
struct GatherMatrix {
  MxMatrixView src;
  RowMap map;
  int64_t cols_padded = 0;
  bool cpu16 = false;
};

// Codes: `bytes` (a multiple of 4) in `swizzle` order; padding 0.
Status launch_gather_codes(const GatherMatrix& m, WeightSwizzle swizzle, uint8_t* out, int64_t bytes,
                           cudaStream_t stream);
// Scales: `bytes` in the plan's `swizzle` order, or (blockscaled) packed
// expert by expert into the block-scaled atoms; padding 127.
Status launch_gather_scales(const GatherMatrix& m, WeightSwizzle swizzle, bool blockscaled, uint8_t* out,
                            int64_t bytes, cudaStream_t stream);
// A bf16 vector per prepared row (b13, b2, the router's weight rows): entry
// i of prepared row R is src[e * expert_stride + source_row * row_stride + i]
// for i < src_cols, else 0; `cols_padded` entries a row.
Status launch_gather_bf16(const uint16_t* src, const RowMap& map, int64_t expert_stride, int64_t row_stride,
                          int64_t src_cols, int64_t cols_padded, uint16_t* out, int64_t count, cudaStream_t stream);

// What the checks found, in device memory: for each tensor the smallest
// logical index (row-major over the view's [experts, rows, cols] or the
// vector) of a bad value (0xFF scale byte, non-finite bf16), UINT64_MAX
// where none; and whether some scale byte is >= 128 (sm90's dequantisation
// needs its two-multiply path then).
enum CheckedTensor { kCheckW13Scales, kCheckW2Scales, kCheckB13, kCheckB2, kCheckRouterWeight, kCheckRouterBias,
                     kCheckedTensors };
struct SourceChecks {
  unsigned long long first_bad[kCheckedTensors];
  unsigned int large_scales[2];  // w13, w2
};
// Initialises `checks` and enqueues the checks of every tensor of `w`.
Status launch_check_source(const MoeWeightsView& w, SourceChecks* checks, cudaStream_t stream);

}  // namespace mxmoe::smxx
