// Copies original weights into a plan's padded layout. Padding holds code 0,
// scale 127 and bias 0 (see include/mxmoe/prepare.h for why).
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "mxmoe/format.h"
#include "mxmoe/prepare.h"
#include "prepare/copy_slice.h"
#include "prepare/layout_index.h"

namespace mxmoe {
namespace {

// A plan edited by hand must still describe a layout prepare_slice can fill.
Status check_plan(const PreparePlan& plan) {
  MXMOE_RETURN_IF_ERROR(validate_shape(plan.shape));
  if (plan.hidden_padded < plan.shape.hidden || plan.hidden_padded % kMxBlock != 0 ||
      plan.intermediate_padded < plan.shape.intermediate || plan.intermediate_padded % kMxBlock != 0 ||
      plan.prefetch_rows < 0)
    return Status::InvalidArgument(fmt::format(
        "plan: padded H {} / I {} must be multiples of {} covering the shape, prefetch rows {} >= 0",
        plan.hidden_padded, plan.intermediate_padded, kMxBlock, plan.prefetch_rows));
  if (plan.w13_layout == W13Layout::kInterleavedChunkOrder && plan.intermediate_padded % 64 != 0)
    return Status::InvalidArgument(fmt::format(
        "plan: w13 in chunk K order needs padded I % 64 == 0 (128-wide chunks, a 64-wide last), got {}",
        plan.intermediate_padded));
  PreparePlan expected = plan;
  update_extents(&expected);
  if (expected.w13_codes_bytes != plan.w13_codes_bytes ||
      expected.w13_scales_bytes != plan.w13_scales_bytes ||
      expected.w2_codes_bytes != plan.w2_codes_bytes ||
      expected.w2_scales_bytes != plan.w2_scales_bytes)
    return Status::InvalidArgument("plan: extents are stale (call update_extents after editing)");
  return Status::Ok();
}

// Copies `bytes` from `src` to `dst`; both are rows of one MXFP4 tensor.
void copy_bytes(uint8_t* dst, const uint8_t* src, int64_t bytes) {
  std::memcpy(dst, src, size_t(bytes));
}

}  // namespace

Status prepare_slice(const PreparePlan& plan, const MoeWeightsView& w, const SliceSpec& slice,
                     PreparedWeights* out) {
  MXMOE_RETURN_IF_ERROR(validate_weights(w));
  MXMOE_RETURN_IF_ERROR(check_plan(plan));
  const int64_t E = plan.shape.experts, H = w.shape.hidden, I = w.shape.intermediate;
  const int64_t Hp = plan.hidden_padded, Ip = plan.intermediate_padded;
  const int64_t e0 = slice.expert_begin, j0 = slice.intermediate_begin;
  if (plan.shape.hidden != H)
    return Status::InvalidArgument(
        fmt::format("prepare: the plan is for H = {}, the weights have H = {}", plan.shape.hidden, H));
  if (e0 < 0 || e0 + E > w.shape.experts)
    return Status::InvalidArgument(fmt::format("prepare: experts [{}, {}) outside [0, {})", e0,
                                               e0 + E, w.shape.experts));
  if (j0 < 0 || j0 % kMxBlock != 0)
    return Status::InvalidArgument(
        fmt::format("prepare: intermediate offset {} is not a multiple of {}", j0, kMxBlock));

  out->plan = plan;
  MoeWeights& p = out->weights;
  p.shape = plan.padded_shape();
  p.swiglu = w.swiglu;
  p.w13_layout = plan.w13_layout;
  // Allocation == readable extent, pre-filled with the neutral padding.
  p.w13_codes.assign(size_t(plan.w13_codes_bytes), 0);
  p.w13_scales.assign(size_t(plan.w13_scales_bytes), kE8M0Neutral);
  p.w2_codes.assign(size_t(plan.w2_codes_bytes), 0);
  p.w2_scales.assign(size_t(plan.w2_scales_bytes), kE8M0Neutral);
  p.b13.assign(size_t(E * 2 * Ip), 0);
  p.b2.assign(size_t(E * Hp), 0);

  // Real columns of this slice: [j0, j_end) of the original.
  const int64_t j_end = std::clamp(I, j0, j0 + Ip);
  const int64_t w13_code_row = Hp / 2, w13_scale_row = Hp / kMxBlock;
  const int64_t w2_code_row = Ip / 2, w2_scale_row = Ip / kMxBlock;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t se = e0 + e;
    // Each prepared row gathers its source row (layout_index.h, as the device
    // executor does); rows of columns past the slice keep the padding.
    for (int64_t row = 0; row < 2 * Ip; ++row) {
      const int64_t src = layout::w13_source_row(plan.w13_layout, Ip, row, w.w13_layout, I, j0, j_end);
      if (src < 0) continue;
      const int64_t d = e * 2 * Ip + row;
      copy_bytes(p.w13_codes.data() + d * w13_code_row, w.w13.code_row(se, src), H / 2);
      copy_bytes(p.w13_scales.data() + d * w13_scale_row, w.w13.scale_row(se, src), H / kMxBlock);
      p.b13[size_t(d)] = w.b13[se * w.b13_expert_stride + src];
    }
    for (int64_t h = 0; h < H; ++h) {
      const int64_t d = e * Hp + h;
      // Both j0 and j_end are multiples of 32: whole scale blocks, whole bytes.
      copy_bytes(p.w2_codes.data() + d * w2_code_row, w.w2.code_row(se, h) + j0 / 2,
                 (j_end - j0) / 2);
      copy_bytes(p.w2_scales.data() + d * w2_scale_row, w.w2.scale_row(se, h) + j0 / kMxBlock,
                 (j_end - j0) / kMxBlock);
      if (slice.with_b2) p.b2[size_t(d)] = w.b2[se * w.b2_expert_stride + h];
    }
  }
  if (slice.with_router) {
    copy_router(w, e0, E, Hp, &p);
  } else {
    p.router_weight.clear();
    p.router_bias.clear();
  }
  return Status::Ok();
}

void copy_router(const MoeWeightsView& w, int64_t e0, int64_t E, int64_t Hp, MoeWeights* out) {
  out->router_weight.clear();
  out->router_bias.clear();
  if (!w.router_weight || !w.router_bias) return;
  const int64_t H = w.shape.hidden;
  out->router_weight.assign(size_t(E * Hp), 0);
  for (int64_t e = 0; e < E; ++e)
    std::copy(w.router_weight + (e0 + e) * H, w.router_weight + (e0 + e + 1) * H,
              out->router_weight.begin() + e * Hp);
  out->router_bias.assign(w.router_bias + e0, w.router_bias + e0 + E);
}

Status prepare_weights(const PreparePlan& plan, const MoeWeightsView& w, PreparedWeights* out) {
  const MoeShape& s = w.shape;
  if (s.experts != plan.shape.experts || s.hidden != plan.shape.hidden ||
      s.intermediate != plan.shape.intermediate)
    return Status::InvalidArgument("prepare_weights: the plan was made for another shape");
  return prepare_slice(plan, w, SliceSpec{}, out);
}

}  // namespace mxmoe
