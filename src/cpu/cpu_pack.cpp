#include "cpu/cpu_pack.h"

#include <algorithm>

#include <fmt/format.h>

#include "mxmoe/layer.h"
#include "prepare/copy_slice.h"
#include "prepare/cpu_row_groups.h"
#include "prepare/layout_index.h"

namespace mxmoe::cpu {
namespace {

// Whether `rows` rows of `n` bf16 values, `stride` apart, hold an Inf or NaN
// (exponent bits all ones). No early exit, so the compiler vectorizes it.
bool any_non_finite(const uint16_t* v, int64_t rows, int64_t n, int64_t stride) {
  bool hit = false;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i) hit |= (v[r * stride + i] & 0x7F80u) == 0x7F80u;
  return hit;
}

}  // namespace

Status pack_cpu_weights(const PreparePlan& plan, const MoeWeightsView& w, PackedWeights* out) {
  MXMOE_RETURN_IF_ERROR(validate_weights(w));
  const MoeShape& s = w.shape;
  const int64_t E = s.experts, H = s.hidden, I = s.intermediate;
  if (plan.backend != BackendKind::kCpu || plan.shape.experts != E || plan.hidden_padded != H ||
      plan.intermediate_padded != I || plan.prefetch_rows != 0 || plan.swizzle != WeightSwizzle::kCpuRowGroups16 ||
      plan.w13_layout != W13Layout::kBlockedGateUp16)
    return Status::InvalidArgument(fmt::format(
        "cpu: the weights (E = {}, H = {}, I = {}) are packed by the cpu plan of their shape only", E, H, I));
  PackedWeights p;
  MXMOE_RETURN_IF_ERROR(HostBuffer::allocate(size_t(plan.w13_codes_bytes), true, &p.w13_codes));
  MXMOE_RETURN_IF_ERROR(HostBuffer::allocate(size_t(plan.w13_scales_bytes), true, &p.w13_scales));
  MXMOE_RETURN_IF_ERROR(HostBuffer::allocate(size_t(plan.w2_codes_bytes), true, &p.w2_codes));
  MXMOE_RETURN_IF_ERROR(HostBuffer::allocate(size_t(plan.w2_scales_bytes), true, &p.w2_scales));

  // Prepared w13 row -> source row (the cpu plan's kBlockedGateUp16 from the
  // caller's layout); the same for every expert.
  std::vector<int64_t> w13_source(size_t(2 * I));
  for (int64_t row = 0; row < 2 * I; ++row)
    w13_source[size_t(row)] = layout::w13_source_row(plan.w13_layout, I, row, w.w13_layout, I, 0, I);

  // Each thread writes a contiguous run of groups, so each fills its own
  // huge pages (the kernel zeroes a page on the first write, on the thread
  // that makes it) and reads its own run of the source. The 0xFF scan rides
  // along on the scale bytes already in registers.
  const int64_t groups13 = 2 * I / 16, groups2 = H / 16;
  bool nan_scale = false;
#pragma omp parallel reduction(|| : nan_scale)
  {
#pragma omp for schedule(static) nowait
    for (int64_t g = 0; g < E * groups13; ++g) {
      const int64_t e = g / groups13, row0 = g % groups13 * 16;
      const uint8_t *codes[16], *scales[16];
      for (int r = 0; r < 16; ++r) {
        const int64_t src = w13_source[size_t(row0 + r)];
        codes[r] = w.w13.code_row(e, src);
        scales[r] = w.w13.scale_row(e, src);
      }
      cpu16_group_codes(codes, H, p.w13_codes.data() + g * 8 * H);
      nan_scale = cpu16_group_scales(scales, H / 32, p.w13_scales.data() + g * H / 2) || nan_scale;
    }
#pragma omp for schedule(static)
    for (int64_t g = 0; g < E * groups2; ++g) {
      const int64_t e = g / groups2, row0 = g % groups2 * 16;
      const uint8_t *codes[16], *scales[16];
      for (int r = 0; r < 16; ++r) {
        codes[r] = w.w2.code_row(e, row0 + r);
        scales[r] = w.w2.scale_row(e, row0 + r);
      }
      cpu16_group_codes(codes, I, p.w2_codes.data() + g * 8 * I);
      nan_scale = cpu16_group_scales(scales, I / 32, p.w2_scales.data() + g * I / 2) || nan_scale;
    }
  }
  // The scans only say whether; the full check names the value.
  const bool bad_bias = any_non_finite(w.b13, E, 2 * I, w.b13_expert_stride) ||
                        any_non_finite(w.b2, E, H, w.b2_expert_stride) ||
                        (w.router_weight && any_non_finite(w.router_weight, E, H, H)) ||
                        (w.router_bias && any_non_finite(w.router_bias, 1, E, E));
  if (nan_scale || bad_bias) MXMOE_RETURN_IF_ERROR(validate_weight_values(w));

  p.b13.resize(size_t(E * 2 * I));
  for (int64_t e = 0; e < E; ++e)
    for (int64_t row = 0; row < 2 * I; ++row)
      p.b13[size_t(e * 2 * I + row)] = w.b13[e * w.b13_expert_stride + w13_source[size_t(row)]];
  p.b2.resize(size_t(E * H));
  for (int64_t e = 0; e < E; ++e)
    std::copy(w.b2 + e * w.b2_expert_stride, w.b2 + e * w.b2_expert_stride + H, p.b2.begin() + e * H);
  MoeWeights router;
  copy_router(w, 0, E, H, &router);
  p.router_weight = std::move(router.router_weight);
  p.router_bias = std::move(router.router_bias);
  *out = std::move(p);
  return Status::Ok();
}

}  // namespace mxmoe::cpu
