// Preparation plans: padded shapes, w13 layout and readable extents per backend.
// Each backend has one plan function; kernel work changes its backend's entry
// (alignment, overreach, layout, swizzle) and nothing else.
#include <numeric>

#include "mxmoe/format.h"
#include "mxmoe/prepare.h"

namespace mxmoe {
namespace {

int64_t round_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

PreparePlan base_plan(BackendKind backend, const MoeShape& shape) {
  const BackendAlignment a = backend_alignment(backend);
  PreparePlan p;
  p.backend = backend;
  p.shape = shape;
  p.hidden_padded = round_up(shape.hidden, a.hidden);
  p.intermediate_padded = round_up(shape.intermediate, a.intermediate);
  p.prefetch_rows = backend_overreach(backend).prefetch_rows;
  return p;
}

// reference: its loops read exactly the real rows; interleaved as loaded.
PreparePlan plan_reference(const MoeShape& shape) { return base_plan(BackendKind::kReference, shape); }

// cpu: the SIMD kernels (src/cpu/) take a 16-row group over one 32-wide MX
// block at a time, one vector lane a row: codes and scales in that order
// (kCpuRowGroups16), and w13's gates and ups in alternate 16-row groups
// (kBlockedGateUp16) so that the lanes of a gate vector and of the next up
// vector are the same columns and the SwiGLU needs no shuffle.
PreparePlan plan_cpu(const MoeShape& shape) {
  PreparePlan p = base_plan(BackendKind::kCpu, shape);
  p.w13_layout = W13Layout::kBlockedGateUp16;
  p.swizzle = WeightSwizzle::kCpuRowGroups16;
  return p;
}

// portable: the mma.sync kernel reads the interleaved rows so one warp's N tile
// holds gate_j and up_j side by side and applies SwiGLU in registers; codes in
// fragment order so a warp's loads are contiguous (dense 64-byte pieces at a
// row stride measured 1.2 TB/s on the decode GEMV, H200).
PreparePlan plan_portable(const MoeShape& shape) {
  PreparePlan p = base_plan(BackendKind::kPortable, shape);
  p.swizzle = WeightSwizzle::kMmaRowGroups16;
  return p;
}

// sm90: the wgmma kernel reads the portable kernel's words (interleaved gate/up
// rows, codes in mma fragment order with permuted bits, scales in the fragment
// scale order): the wgmma A fragment of a warp is the mma.m16n8k16 A fragment
// of its 16 rows, so the same words feed both, and the sm90 backend's decode
// path (the portable GEMV, given the layout's strides) runs on the weights the
// wgmma path uses, without a second copy. The 8 groups of a 128-row tile are interleaved by K
// chunk (kMmaRowTiles128) so that a pipeline stage is one 8 KB bulk copy, not
// eight of 1 KB: at 16-token tiles the eight copies held gpt-oss-120b T = 256
// at 719 us against 546-596 us for one (H200). The K order this implies on
// the activation side is applied by the sm90 kernels that write activations
// (src/cuda/sm90/sm90_layout.h). w13's (gate, up) pairs are in that K order
// within each chunk of I (kInterleavedChunkOrder), so that GEMM1's 128-row
// tile holds the intermediate columns of one half of a GEMM2 stage and its
// outputs leave as one bulk copy.
PreparePlan plan_sm90(const MoeShape& shape) {
  PreparePlan p = base_plan(BackendKind::kSm90, shape);
  p.swizzle = WeightSwizzle::kMmaRowTiles128;
  p.w13_layout = W13Layout::kInterleavedChunkOrder;
  // The 128-row tiles of the layout run over all E * Hp rows of w2, so an
  // expert may start half-way into one (Hp % 128 == 64); their count must be
  // whole, which an odd E needs Hp % 128 == 0 for. (w13 has 2 Ip rows an
  // expert, a multiple of 128.)
  if (shape.experts % 2 != 0) p.hidden_padded = round_up(shape.hidden, 128);
  return p;
}

// sm100 / sm120: CUTLASS-style grouped GEMMs whose fused SwiGLU epilogue
// takes the two halves of the N dimension as [up; gate].
PreparePlan plan_stacked(BackendKind backend, const MoeShape& shape) {
  PreparePlan p = base_plan(backend, shape);
  p.w13_layout = W13Layout::kStackedUpGate;
  return p;
}

}  // namespace

BackendAlignment backend_alignment(BackendKind kind) {
  switch (kind) {
    // reference: any MX-block shape. cpu: 16-row groups over 32-wide blocks;
    // rows are 2I and H, both multiples of 32 already.
    case BackendKind::kCpu:
    case BackendKind::kReference: return {32, 32};
    // portable: 64-row weight tiles (N) and 64-wide K steps (two scale blocks).
    case BackendKind::kPortable: return {64, 64};
    // sm90: K is walked in 128-wide chunks with a 64-wide tail (one MX block
    // per lane of a row group, or half of one), and N in 128-row tiles of
    // which an expert's last may hold 64 rows: both padded dimensions are
    // multiples of 64, so H = 2880 is not padded (triton_kernels' Hopper path
    // walks it in 128-wide K tiles to 2944 and reads 2 scale bytes past each
    // row). An odd expert count pads H to 128 (plan_sm90).
    case BackendKind::kSm90: return {64, 64};
    // tcgen05 / sm120 block-scaled MMA: 128-wide K tiles (four scale blocks
    // per TMA box) and 128-row N tiles, as for sm90.
    case BackendKind::kSm100:
    case BackendKind::kSm120: return {128, 128};
  }
  return {32, 32};
}

TileOverreach backend_overreach(BackendKind kind) {
  switch (kind) {
    case BackendKind::kCpu:
    case BackendKind::kReference:
    case BackendKind::kPortable: return {0};  // loads are issued only for tiles in range
    // sm90: the producer issues exactly the K chunks of the tiles it walks and
    // one scale block per tile, all inside the tile's 128 rows; nothing is
    // requested ahead of the loop test.
    case BackendKind::kSm90: return {0};
    // TMA pipelines issue the next stage's 128-row box before the loop test;
    // at the last tile of the last expert that box lies past the stack.
    case BackendKind::kSm100:
    case BackendKind::kSm120: return {128};
  }
  return {0};
}

void update_extents(PreparePlan* p) {
  const int64_t E = p->shape.experts, Hp = p->hidden_padded, Ip = p->intermediate_padded;
  const int64_t w13_rows = E * 2 * Ip + p->prefetch_rows;
  const int64_t w2_rows = E * Hp + p->prefetch_rows;
  p->w13_codes_bytes = w13_rows * (Hp / 2);
  p->w13_scales_bytes = w13_rows * (Hp / kMxBlock);
  p->w2_codes_bytes = w2_rows * (Ip / 2);
  p->w2_scales_bytes = w2_rows * (Ip / kMxBlock);
}

int64_t PreparePlan::prepared_bytes() const {
  const int64_t bias_bytes = 2 * shape.experts * (2 * intermediate_padded + hidden_padded);
  return w13_codes_bytes + w13_scales_bytes + w2_codes_bytes + w2_scales_bytes + bias_bytes;
}

int64_t original_bytes(const MoeShape& s) {
  PreparePlan p;
  p.shape = s;
  p.hidden_padded = s.hidden;
  p.intermediate_padded = s.intermediate;
  update_extents(&p);
  return p.prepared_bytes();
}

PreparePlan make_plan(BackendKind backend, const MoeShape& shape) {
  PreparePlan p;
  switch (backend) {
    case BackendKind::kCpu: p = plan_cpu(shape); break;
    case BackendKind::kReference: p = plan_reference(shape); break;
    case BackendKind::kPortable: p = plan_portable(shape); break;
    case BackendKind::kSm90: p = plan_sm90(shape); break;
    case BackendKind::kSm100:
    case BackendKind::kSm120: p = plan_stacked(backend, shape); break;
  }
  update_extents(&p);
  return p;
}

int64_t tensor_parallel_intermediate(BackendKind backend, int64_t intermediate, int size) {
  const int64_t a = std::lcm(int64_t(kMxBlock), backend_alignment(backend).intermediate);
  return round_up(intermediate, int64_t(size) * a);
}

}  // namespace mxmoe
