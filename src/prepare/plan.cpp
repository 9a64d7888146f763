// Preparation plans: padded shapes and readable extents per backend.
#include "mxmoe/format.h"
#include "mxmoe/prepare.h"

namespace mxmoe {
namespace {
int64_t round_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }
}  // namespace

BackendAlignment backend_alignment(BackendKind kind) {
  switch (kind) {
    case BackendKind::kCpu: return {32, 32};
    // portable: 64-row weight tiles (N) and 64-wide K steps (two scale blocks).
    case BackendKind::kPortable: return {64, 64};
    case BackendKind::kSm90:
    case BackendKind::kSm100:
    case BackendKind::kSm120: return {128, 128};
  }
  return {32, 32};
}

PreparePlan make_plan(BackendKind backend, const MoeShape& shape) {
  const BackendAlignment a = backend_alignment(backend);
  PreparePlan p;
  p.backend = backend;
  p.shape = shape;
  p.hidden_padded = round_up(shape.hidden, a.hidden);
  p.intermediate_padded = round_up(shape.intermediate, a.intermediate);
  p.w13_layout = W13Layout::kInterleaved;
  const int64_t E = shape.experts, Hp = p.hidden_padded, Ip = p.intermediate_padded;
  p.w13_codes_bytes = E * 2 * Ip * Hp / 2;
  p.w13_scales_bytes = E * 2 * Ip * Hp / kMxBlock;
  p.w2_codes_bytes = E * Hp * Ip / 2;
  p.w2_scales_bytes = E * Hp * Ip / kMxBlock;
  return p;
}

}  // namespace mxmoe
