// Copies original weights into a plan's padded layout. Padding holds code 0,
// scale 127 and bias 0 (see include/mxmoe/prepare.h for why).
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "mxmoe/format.h"
#include "mxmoe/prepare.h"

namespace mxmoe {
namespace {

// Copies row `src_row` of expert e of `src` into row `dst_row` of a dense padded
// stack whose rows are `dst_cols` wide; the rest of the row is padding.
void copy_row(const MxMatrixView& src, int64_t e, int64_t src_row, uint8_t* dst_codes,
              uint8_t* dst_scales, int64_t dst_rows, int64_t dst_cols, int64_t dst_row) {
  const int64_t code_off = (e * dst_rows + dst_row) * (dst_cols / 2);
  const int64_t scale_off = (e * dst_rows + dst_row) * (dst_cols / kMxBlock);
  std::memcpy(dst_codes + code_off, src.code_row(e, src_row), size_t(src.cols / 2));
  std::memcpy(dst_scales + scale_off, src.scale_row(e, src_row), size_t(src.cols / kMxBlock));
}

}  // namespace

Status prepare_weights(const PreparePlan& plan, const MoeWeightsView& w, PreparedWeights* out) {
  MXMOE_RETURN_IF_ERROR(validate_weights(w));
  const MoeShape& s = w.shape;
  if (s.experts != plan.shape.experts || s.hidden != plan.shape.hidden ||
      s.intermediate != plan.shape.intermediate)
    return Status::InvalidArgument("prepare_weights: the plan was made for another shape");
  if (plan.w13_layout != W13Layout::kInterleaved)
    return Status::Unsupported("prepare_weights: only the interleaved w13 layout is implemented");

  const int64_t E = s.experts, H = s.hidden, I = s.intermediate;
  const int64_t Hp = plan.hidden_padded, Ip = plan.intermediate_padded;
  out->plan = plan;
  MoeWeights& p = out->weights;
  p.shape = plan.padded_shape();
  p.swiglu = w.swiglu;
  p.w13_codes.assign(size_t(plan.w13_codes_bytes), 0);
  p.w13_scales.assign(size_t(plan.w13_scales_bytes), kE8M0Neutral);
  p.w2_codes.assign(size_t(plan.w2_codes_bytes), 0);
  p.w2_scales.assign(size_t(plan.w2_scales_bytes), kE8M0Neutral);
  p.b13.assign(size_t(E * 2 * Ip), 0);
  p.b2.assign(size_t(E * Hp), 0);
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t r = 0; r < 2 * I; ++r) {
      copy_row(w.w13, e, r, p.w13_codes.data(), p.w13_scales.data(), 2 * Ip, Hp, r);
      p.b13[size_t(e * 2 * Ip + r)] = w.b13[e * w.b13_expert_stride + r];
    }
    for (int64_t r = 0; r < H; ++r) {
      copy_row(w.w2, e, r, p.w2_codes.data(), p.w2_scales.data(), Hp, Ip, r);
      p.b2[size_t(e * Hp + r)] = w.b2[e * w.b2_expert_stride + r];
    }
  }
  p.router_weight.clear();
  p.router_bias.clear();
  if (w.router_weight && w.router_bias) {
    p.router_weight.assign(size_t(E * Hp), 0);
    for (int64_t e = 0; e < E; ++e)
      std::copy(w.router_weight + e * H, w.router_weight + (e + 1) * H,
                p.router_weight.begin() + e * Hp);
    p.router_bias.assign(w.router_bias, w.router_bias + E);
  }
  return Status::Ok();
}

}  // namespace mxmoe
