// See blockscaled_launcher.h.
#include "cuda/blockscaled/blockscaled_launcher.h"

#include <fmt/format.h>

#include "cuda/blockscaled/blockscaled_types.cuh"
#include "cuda/blockscaled/smxx_blockscaled_kernels.h"
#include "cuda/common/smxx_moe_kernels.h"
#include "prepare/blockscaled_scales.h"

namespace mxmoe::blockscaled {
namespace {

// Workspace offsets of one grouped GEMM's descriptor arrays (E entries each)
// and of its own workspace.
struct GemmArrays {
  size_t shapes = 0, a = 0, b = 0, sfa = 0, sfb = 0, d = 0, stride_a = 0, stride_b = 0, stride_d = 0,
         layout_sfa = 0, layout_sfb = 0, workspace = 0, workspace_bytes = 0;
};

GemmArrays take_gemm(smxx::WorkspaceCursor& ws, int64_t E, size_t gemm_workspace) {
  GemmArrays g;
  const size_t n = size_t(E);
  g.shapes = ws.take(n * sizeof(ProblemShape));
  g.a = ws.take(n * sizeof(void*));
  g.b = ws.take(n * sizeof(void*));
  g.sfa = ws.take(n * sizeof(void*));
  g.sfb = ws.take(n * sizeof(void*));
  g.d = ws.take(n * sizeof(void*));
  g.stride_a = ws.take(n * sizeof(StrideA));
  g.stride_b = ws.take(n * sizeof(StrideB));
  g.stride_d = ws.take(n * sizeof(StrideD));
  g.layout_sfa = ws.take(n * sizeof(LayoutSF));
  g.layout_sfb = ws.take(n * sizeof(LayoutSF));
  g.workspace = ws.take(gemm_workspace);
  g.workspace_bytes = gemm_workspace;
  return g;
}

// Every workspace piece of a forward of T tokens: the schedule (128-row
// tiles), then per GEMM its A rows and their scales, its bf16 D rows, its
// descriptors and CUTLASS's workspace.
struct Layout {
  smxx::ScheduleOffsets schedule;
  size_t a1 = 0, sfa1 = 0, d1 = 0, a2 = 0, sfa2 = 0, d2 = 0;
  GemmArrays g1, g2;
  size_t total = 0;
};

Layout make_layout(const DeviceWeights& w, const GemmRunner& gemm, int64_t T) {
  const int64_t E = w.shape.experts, Hp = w.hidden_padded, Ip = w.intermediate_padded;
  smxx::WorkspaceCursor ws;
  Layout l;
  l.schedule = smxx::take_schedule(ws, T, w.shape.topk, E, kRowTile);
  const int64_t rows = l.schedule.rows;
  l.a1 = ws.take(size_t(rows * Hp));
  l.sfa1 = ws.take(size_t(blockscaled_scale_bytes(rows, Hp / 32)));
  l.d1 = ws.take(size_t(rows * 2 * Ip) * 2);
  l.a2 = ws.take(size_t(rows * Ip));
  l.sfa2 = ws.take(size_t(blockscaled_scale_bytes(rows, Ip / 32)));
  l.d2 = ws.take(size_t(rows * Hp) * 2);
  l.g1 = take_gemm(ws, E, gemm.gemm_workspace);
  l.g2 = take_gemm(ws, E, gemm.gemm_workspace);
  l.total = ws.off;
  return l;
}

GroupedGemmArgs args_in(char* ws, const GemmArrays& g, int64_t E, int64_t n, int64_t k, int64_t rows) {
  GroupedGemmArgs a;
  a.groups = int(E);
  a.n = n;
  a.k = k;
  a.max_rows = rows;
  a.problem_shapes = ws + g.shapes;
  a.a = reinterpret_cast<const void**>(ws + g.a);
  a.b = reinterpret_cast<const void**>(ws + g.b);
  a.sfa = reinterpret_cast<const void**>(ws + g.sfa);
  a.sfb = reinterpret_cast<const void**>(ws + g.sfb);
  a.d = reinterpret_cast<void**>(ws + g.d);
  a.stride_a = ws + g.stride_a;
  a.stride_b = ws + g.stride_b;
  a.stride_d = ws + g.stride_d;
  a.layout_sfa = ws + g.layout_sfa;
  a.layout_sfb = ws + g.layout_sfb;
  return a;
}

Status check_shape(const DeviceWeights& w) {
  const MoeShape& s = w.shape;
  const int64_t Hp = w.hidden_padded, Ip = w.intermediate_padded;
  if (s.experts < 1 || s.experts > smxx::kMaxExperts)
    return Status::Unsupported(fmt::format("{}: {} experts, at most {} supported", w.who, s.experts,
                                           smxx::kMaxExperts));
  if (s.topk < 1 || s.topk > smxx::kMaxTopk || s.topk > s.experts)
    return Status::Unsupported(fmt::format("{}: topk = {} outside [1, min(8, experts)]", w.who, s.topk));
  // K tiles and scale atoms of 128 (4 MX blocks), N tiles of 128.
  if (s.hidden % 32 != 0 || Hp % 128 != 0 || Ip % 128 != 0 || Hp < s.hidden || Ip < s.intermediate)
    return Status::InvalidArgument(fmt::format(
        "{}: H = {} must be a multiple of 32 and padded H = {}, I = {} multiples of 128", w.who, s.hidden, Hp, Ip));
  return Status::Ok();
}

}  // namespace

size_t workspace_bytes(const DeviceWeights& w, const GemmRunner& gemm, int64_t tokens) {
  return make_layout(w, gemm, tokens).total;
}

Status moe_forward(const DeviceWeights& w, const GemmRunner& gemm, const smxx::ForwardArgs& a, void* workspace,
                   size_t workspace_size, cudaStream_t stream) {
  const char* who = w.who;
  MXMOE_RETURN_IF_ERROR(check_shape(w));
  const int64_t T = a.tokens, E = w.shape.experts, k = w.shape.topk, H = w.shape.hidden;
  const int64_t Hp = w.hidden_padded, Ip = w.intermediate_padded;
  if (T <= 0) return Status::InvalidArgument(fmt::format("{}: tokens = {} must be positive", who, T));
  if (T * k >= (int64_t(1) << 31) / 2)
    return Status::Unsupported(fmt::format("{}: tokens * topk = {} too large", who, T * k));
  if (!a.x || (!a.y && !a.y_bf16) || !workspace)
    return Status::InvalidArgument(fmt::format("{}: null x, y or workspace", who));
  if (const std::string_view m = smxx::forward_arg_error(a, H); !m.empty())
    return Status::InvalidArgument(fmt::format("{}: {}", who, m));
  if ((a.topk_ids == nullptr) != (a.topk_weights == nullptr))
    return Status::InvalidArgument(fmt::format("{}: pass both topk ids and weights, or neither", who));
  const Layout l = make_layout(w, gemm, T);
  if (workspace_size < l.total)
    return Status::InvalidArgument(fmt::format("{}: workspace of {} bytes, {} needed", who, workspace_size, l.total));
  if (reinterpret_cast<uintptr_t>(workspace) % 256 != 0)
    return Status::InvalidArgument(fmt::format("{}: workspace must be 256-byte aligned", who));
  const int64_t x_stride = smxx::x_row_stride(a, H);
  char* ws = static_cast<char*>(workspace);
  auto bytes = [ws](size_t off) { return reinterpret_cast<uint8_t*>(ws + off); };
  auto bf16 = [ws](size_t off) { return reinterpret_cast<uint16_t*>(ws + off); };

  // 1. Routing into the schedule's arrays. The kernels here start only after
  // the one before them ends (no programmatic overlap), so none waits.
  const smxx::Schedule sch = smxx::schedule_in(workspace, l.schedule);
  if (a.topk_ids) {
    MXMOE_RETURN_IF_ERROR(
        smxx::launch_check_routing(a.topk_ids, a.topk_weights, T * k, E, sch.ids, sch.weights, false, stream, who));
  } else {
    if (!w.router_weight || !w.router_bias)
      return Status::InvalidArgument(fmt::format("{}: no routing given and the weights have no router", who));
    MXMOE_RETURN_IF_ERROR(smxx::launch_router_topk(a.x, T, H, x_stride, w.router_weight, Hp, w.router_bias, E, k,
                                                   sch.ids, sch.weights, false, stream, who));
  }
  // 2. Pairs by expert in 128-row tiles, and their x rows in MXFP8.
  MXMOE_RETURN_IF_ERROR(smxx::launch_group_by_expert(sch.ids, nullptr, T * k, E, kRowTile, sch, false, stream, who));
  const GroupedRows rows{sch.sorted_pair, sch.tile_expert, sch.num_tiles, l.schedule.rows};
  const MxScaleRule rule = w.mxfp8_scale_rule;
  MXMOE_RETURN_IF_ERROR(
      launch_quantize_x_rows(a.x, x_stride, H, Hp, k, rows, rule, bytes(l.a1), bytes(l.sfa1), stream, who));
  // 3. Both GEMMs' descriptors.
  GemmOperands g1{2 * Ip, Hp, bytes(l.a1), bytes(l.sfa1), w.w13_codes, w.w13_scales, bf16(l.d1),
                  args_in(ws, l.g1, E, 2 * Ip, Hp, rows.max_rows)};
  GemmOperands g2{Hp, Ip, bytes(l.a2), bytes(l.sfa2), w.w2_codes, w.w2_scales, bf16(l.d2),
                  args_in(ws, l.g2, E, Hp, Ip, rows.max_rows)};
  MXMOE_RETURN_IF_ERROR(launch_grouped_problems(rows, E, g1, g2, stream, who));
  // 4-6. GEMM1, SwiGLU and MXFP8, GEMM2.
  MXMOE_RETURN_IF_ERROR(gemm.gemm.run(g1.out, ws + l.g1.workspace, l.g1.workspace_bytes, gemm.sms, stream));
  MXMOE_RETURN_IF_ERROR(
      launch_swiglu_quantize(bf16(l.d1), w.b13, Ip, w.swiglu, rows, rule, bytes(l.a2), bytes(l.sfa2), stream, who));
  MXMOE_RETURN_IF_ERROR(gemm.gemm.run(g2.out, ws + l.g2.workspace, l.g2.workspace_bytes, gemm.sms, stream));
  // 7. Each token's k rows in slot order.
  return launch_combine_rows(bf16(l.d2), Hp, w.b2, sch.pair_row, sch.ids, sch.weights, T, k, H, a.y, a.y_bf16,
                             stream, who);
}

}  // namespace mxmoe::blockscaled
