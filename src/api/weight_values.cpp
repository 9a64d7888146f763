// validate_weight_values: the value checks a layer makes before it prepares
// weights that did not come through the checkpoint loader (which makes the
// same checks while it maps the files).
#include <cstring>

#include <fmt/format.h>

#include "mxmoe/format.h"
#include "mxmoe/layer.h"

namespace mxmoe {
namespace {

// The first 0xFF (NaN) scale of `m`, named by expert, row and MX block.
Status check_scales(const char* name, const MxMatrixView& m, bool interleaved_gate_up) {
  const int64_t blocks = m.cols / kMxBlock;
  for (int64_t e = 0; e < m.experts; ++e)
    for (int64_t r = 0; r < m.rows; ++r) {
      const uint8_t* row = m.scale_row(e, r);
      const void* hit = std::memchr(row, kE8M0NaN, size_t(blocks));
      if (!hit) continue;
      const int64_t b = static_cast<const uint8_t*>(hit) - row;
      std::string what = fmt::format("row {}", r);
      if (interleaved_gate_up) what += fmt::format(" ({} {})", r % 2 ? "up" : "gate", r / 2);
      return Status::InvalidArgument(fmt::format("{} scales: byte 0xFF (NaN) at expert {}, {}, block {} (elements "
                                                 "{}..{})",
                                                 name, e, what, b, b * kMxBlock, b * kMxBlock + kMxBlock - 1));
    }
  return Status::Ok();
}

// The first Inf or NaN of `rows` rows of `n` bf16 values, `stride` apart.
Status check_finite(const char* name, const uint16_t* v, int64_t rows, int64_t n, int64_t stride) {
  if (!v) return Status::Ok();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i)
      if ((v[r * stride + i] & 0x7F80u) == 0x7F80u)
        return Status::InvalidArgument(fmt::format("{}: non-finite value ({}) at [{}, {}]", name,
                                                   (v[r * stride + i] & 0x7Fu) ? "NaN" : "Inf", r, i));
  return Status::Ok();
}

}  // namespace

Status validate_weight_values(const MoeWeightsView& w) {
  MXMOE_RETURN_IF_ERROR(validate_weights(w));
  const MoeShape& s = w.shape;
  MXMOE_RETURN_IF_ERROR(check_scales("w13", w.w13, w.w13_layout == W13Layout::kInterleaved));
  MXMOE_RETURN_IF_ERROR(check_scales("w2", w.w2, false));
  MXMOE_RETURN_IF_ERROR(check_finite("b13", w.b13, s.experts, 2 * s.intermediate, w.b13_expert_stride));
  MXMOE_RETURN_IF_ERROR(check_finite("b2", w.b2, s.experts, s.hidden, w.b2_expert_stride));
  MXMOE_RETURN_IF_ERROR(check_finite("router weight", w.router_weight, s.experts, s.hidden, s.hidden));
  return check_finite("router bias", w.router_bias, 1, s.experts, s.experts);
}

}  // namespace mxmoe
