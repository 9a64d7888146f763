// The launcher that enqueues the whole portable forward on one stream: the
// shared router, grouping and combine kernels around the mma.sync GEMMs.
#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

#include "cuda/common/pdl.cuh"
#include "cuda/common/smxx_moe_kernels.h"
#include "cuda/portable/heuristics.h"
#include "cuda/portable/portable_launcher.h"
#include "cuda/portable/sm80_mxfp4_fused_decode.h"
#include "cuda/portable/sm80_mxfp4_gemm.cuh"
#include "cuda/portable/sm80_mxfp4_gemm_launch.h"
#include "prepare/code_strides.h"

namespace mxmoe::portable {
namespace {

// Zeroes GEMM1's tile counts (decode_tile_waits) once every earlier kernel has
// completed, the previous forward's GEMM2 included, which waits on them. A
// kernel rather than a memset: a memset ends the programmatic overlap, so the
// forward's first kernel could not start during the previous kernel's tail.
__global__ void zero_tile_counts(int32_t* __restrict__ counts, int n) {
  smxx::wait_for_previous_kernels();
  smxx::allow_next_kernel();
  for (int i = threadIdx.x; i < n; i += blockDim.x) counts[i] = 0;
}

// Workspace carve-up (every piece 256-byte aligned): the schedule, then
// GEMM1's activations, GEMM2's rows and counts: per-pair, GEMM1's per tile;
// where the one-launch decode may run, its combine counts (T x H / 32).
struct Layout : smxx::ScheduleOffsets {
  size_t act = 0, ypair = 0, counts = 0, total = 0;
  int tile = 8;
  bool per_pair = false;
};

Layout make_layout(const DeviceWeights& w, int64_t T) {
  Layout l;
  const int64_t E = w.shape.experts, k = w.shape.topk, H = w.shape.hidden;
  const int64_t Ip = w.intermediate_padded;
  static const int override_tile = [] {
    const char* v = std::getenv("MXMOE_PORTABLE_TILE");
    return v ? std::atoi(v) : 0;
  }();
  l.tile = token_tile(T, k, E, override_tile);
  smxx::WorkspaceCursor ws;
  static_cast<smxx::ScheduleOffsets&>(l) = smxx::take_schedule(ws, T, k, E, l.tile);
  l.act = ws.take(size_t(l.rows * Ip) * 2);
  l.ypair = ws.take(size_t(l.rows * H) * 4);
  l.per_pair = per_pair_decode(T, k, l.tile);
  const int64_t fused_counts = T * k <= kFusedMaxPairs ? T * (H / 32) : 0;
  l.counts = ws.take(size_t(std::max(l.per_pair ? T * k : 0, fused_counts)) * 4);
  l.total = ws.off;
  return l;
}

constexpr const char* kWho = "portable";
constexpr int64_t kMaxPaddedK = int64_t(1) << 24;

Status cuda_status(cudaError_t err, const char* what) { return smxx::cuda_status(err, kWho, what); }

// Step 1 of moe_forward (and all of route_topk): ids and weights [T, k].
Status launch_router(const DeviceWeights& w, const uint16_t* x, int64_t x_stride, int64_t T, int32_t* ids,
                     float* weights, bool overlap, cudaStream_t stream) {
  if (!w.router_weight || !w.router_bias)
    return Status::InvalidArgument("portable: no routing given and the weights have no router");
  return smxx::launch_router_topk(x, T, w.shape.hidden, x_stride, w.router_weight, w.hidden_padded, w.router_bias,
                                  w.shape.experts, w.shape.topk, ids, weights, overlap, stream, kWho);
}

// GEMM1's parameters (w13 against x rows, SwiGLU into act rows of Ip) on
// the schedule `sch`; the per-pair and fused paths set pair_ids.
// A GEMM's weights: n_rows rows an expert over K = k_padded, codes in the
// plan's fragment order (code_strides), scales in its fragment scale order.
void set_weights(GemmParams& g, const DeviceWeights& w, const uint8_t* codes, const uint8_t* scales,
                 const uint16_t* bias, int64_t n_rows, int64_t k_padded) {
  g.codes = codes;
  g.scales = scales;
  const CodeStrides cs = code_strides(w.swizzle, k_padded / 2);
  g.code_tile_stride = cs.tile;
  g.code_group_stride = cs.group;
  g.code_chunk_stride = cs.chunk;
  g.code_tail_group_stride = cs.tail_group;
  g.scale_row_stride = k_padded / 32;
  g.scale_expert_stride = n_rows * k_padded / 32;
  g.bias = bias;
  g.bias_expert_stride = n_rows;
  g.n_rows = int(n_rows);
  g.k = int(k_padded);
}

GemmParams gemm1_params(const DeviceWeights& w, const ForwardArgs& a, int64_t x_stride, const smxx::Schedule& sch,
                        uint16_t* act) {
  const int64_t Hp = w.hidden_padded, Ip = w.intermediate_padded;
  GemmParams g{};
  set_weights(g, w, w.w13_codes, w.w13_scales, w.b13, 2 * Ip, Hp);
  g.k_valid = int(w.shape.hidden);
  g.act_in = a.x;
  g.act_in_stride = x_stride;
  g.topk = int(w.shape.topk);
  g.sorted_pair = sch.sorted_pair;
  g.tile_expert = sch.tile_expert;
  g.tile_row = sch.tile_row;
  g.num_tiles = sch.num_tiles;
  g.act_out = act;
  g.act_out_stride = Ip;
  g.act_out_chunk_order = w.w13_layout == W13Layout::kInterleavedChunkOrder;
  g.alpha = w.swiglu.alpha;
  g.limit = w.swiglu.limit;
  g.experts = int(w.shape.experts);
  return g;
}

// GEMM2's parameters (w2 against GEMM1's act rows, route_w * (acc + bias)
// into fp32 rows of H), from GEMM1's.
GemmParams gemm2_params(const DeviceWeights& w, const GemmParams& g1, float* ypair, const float* route_w) {
  const int64_t Hp = w.hidden_padded, Ip = w.intermediate_padded;
  GemmParams g = g1;
  set_weights(g, w, w.w2_codes, w.w2_scales, w.b2, Hp, Ip);
  g.k_valid = int(Ip);
  g.act_in = g1.act_out;
  g.act_in_stride = Ip;
  g.act_out = nullptr;
  g.y_out = ypair;
  g.n_valid = int(w.shape.hidden);
  g.route_w = route_w;
  g.tile_done = nullptr;
  return g;
}

}  // namespace

Status route_topk(const DeviceWeights& w, const uint16_t* x, int64_t tokens, int32_t* ids,
                  float* weights, cudaStream_t stream) {
  const int64_t E = w.shape.experts, k = w.shape.topk;
  if (tokens <= 0 || !x || !ids || !weights)
    return Status::InvalidArgument("portable: routing needs tokens > 0 and non-null x, ids, weights");
  if (!smxx::aligned_16(x))  // the router reads x rows 16 bytes at a time
    return Status::InvalidArgument("portable: x must be 16-byte aligned");
  if (E > kMaxExperts || k < 1 || k > smxx::kMaxTopk || k > E)
    return Status::Unsupported(
        fmt::format("portable: router for {} experts, top-{}: at most {} experts, top-8", E, k, kMaxExperts));
  bool overlap = false;
  MXMOE_RETURN_IF_ERROR(smxx::kernels_may_overlap(kWho, &overlap));
  return launch_router(w, x, w.shape.hidden, tokens, ids, weights, overlap, stream);
}

size_t workspace_bytes(const DeviceWeights& w, int64_t tokens) {
  return make_layout(w, tokens).total;
}

Status moe_forward(const DeviceWeights& w, const ForwardArgs& a, void* workspace,
                   size_t workspace_size, cudaStream_t stream, const Overrides& overrides) {
  const MoeShape& s = w.shape;
  const int64_t T = a.tokens, E = s.experts, k = s.topk, H = s.hidden;
  const int64_t Hp = w.hidden_padded, Ip = w.intermediate_padded;
  if (T <= 0) return Status::InvalidArgument(fmt::format("portable: tokens = {} must be positive", T));
  if (E > kMaxExperts)
    return Status::Unsupported(fmt::format("portable: {} experts, at most {} supported", E, kMaxExperts));
  if (k < 1 || k > smxx::kMaxTopk || k > E)
    return Status::Unsupported(fmt::format("portable: topk = {} outside [1, min(8, experts)]", k));
  if (H % 32 != 0 || Hp % 64 != 0 || Ip % 64 != 0 || Hp < H || Ip < s.intermediate)
    return Status::InvalidArgument(fmt::format(
        "portable: H = {} must be a multiple of 32 and Hp = {}, Ip = {} multiples of 64", H, Hp, Ip));
  if (w.w13_layout != W13Layout::kInterleaved && w.w13_layout != W13Layout::kInterleavedChunkOrder)
    return Status::InvalidArgument("portable: w13 must be interleaved (gate, up) row pairs");
  // The decode GEMMs take a K chunk's code offset in 32 bits (at most 64 x K).
  if (Hp > kMaxPaddedK || Ip > kMaxPaddedK)
    return Status::Unsupported(
        fmt::format("portable: padded H = {} and I = {} must be at most {}", Hp, Ip, kMaxPaddedK));
  if (T * k >= (int64_t(1) << 31) / 2)
    return Status::Unsupported(fmt::format("portable: tokens * topk = {} too large", T * k));
  if (!a.x || (!a.y && !a.y_bf16) || !workspace) return Status::InvalidArgument("portable: null x, y or workspace");
  if (const std::string_view m = smxx::forward_arg_error(a, H); !m.empty())
    return Status::InvalidArgument(fmt::format("portable: {}", m));
  const int64_t x_stride = smxx::x_row_stride(a, H);
  if ((a.topk_ids == nullptr) != (a.topk_weights == nullptr))
    return Status::InvalidArgument("portable: pass both topk ids and weights, or neither");
  const Layout l = make_layout(w, T);
  if (workspace_size < l.total)
    return Status::InvalidArgument(
        fmt::format("portable: workspace of {} bytes, {} needed", workspace_size, l.total));
  if (reinterpret_cast<uintptr_t>(workspace) % 256 != 0)
    return Status::InvalidArgument("portable: workspace must be 256-byte aligned");
  // Overlap each kernel's launch with the previous one's tail on SM90+.
  bool overlap = false;
  MXMOE_RETURN_IF_ERROR(smxx::kernels_may_overlap(kWho, &overlap));
  char* ws = static_cast<char*>(workspace);
  auto at = [&](size_t off) { return static_cast<void*>(ws + off); };

  const smxx::Schedule sch = smxx::schedule_in(workspace, l);
  // The router's routing in the schedule's arrays, or the caller's as given:
  // the per-pair GEMMs and the grouping kernel read an id outside [0, E) as
  // expert 0 with weight NaN (launch_check_routing's rule, in the kernels
  // that read the ids rather than in a launch of its own), and the grouping
  // kernel writes the weights checked so into the schedule.
  if (!a.topk_ids) MXMOE_RETURN_IF_ERROR(launch_router(w, a.x, x_stride, T, sch.ids, sch.weights, overlap, stream));
  const int32_t* ids = a.topk_ids ? a.topk_ids : sch.ids;
  const float* rweights = a.topk_ids ? a.topk_weights : sch.weights;
  uint16_t* act = static_cast<uint16_t*>(at(l.act));
  float* ypair = static_cast<float*>(at(l.ypair));
  GemmParams g1 = gemm1_params(w, a, x_stride, sch, act);

  bool cooperative = false;
  if (fused_decode(T, k, overrides.fused_decode)) MXMOE_RETURN_IF_ERROR(smxx::cooperative_launches(kWho, &cooperative));
  if (cooperative) {
    // Both GEMMs read the routing as given (its ids checked in the kernel);
    // pair q's rows of act and ypair lie at q.
    g1.pair_ids = ids;
    const GemmParams g2 = gemm2_params(w, g1, ypair, rweights);
    const FusedDecodeArgs f{ids, T, static_cast<int32_t*>(at(l.counts))};
    return cuda_status(launch_mxfp4_fused_decode(g1, g2, f, a.y, a.y_bf16, stream), "fused decode launch");
  }

  if (!l.per_pair) {
    MXMOE_RETURN_IF_ERROR(
        smxx::launch_group_by_expert(ids, a.topk_weights, T * k, E, l.tile, sch, overlap, stream, kWho));
    rweights = sch.weights;
  }
  if (l.per_pair) g1.pair_ids = ids;
  const int64_t tiles = l.per_pair ? T * k : l.max_tiles;
  const int fused_warps = l.tile == 8 ? down_combine_warps(T, k, E, Ip, overrides.down_combine_warps) : 0;
  DecodeWarps warps;
  if (l.tile == 8) {
    int sms = 0;
    MXMOE_RETURN_IF_ERROR(smxx::sm_count(kWho, &sms));
    warps = decode_warps(T, k, E, g1.n_rows, Hp, sms);
    if (overrides.gemm1_warps != 0) warps.gemm1 = overrides.gemm1_warps;
    if (decode_tile_waits(T, l.per_pair, fused_warps > 0)) {  // GEMM1 counts each tile's finished row blocks from 0
      g1.tile_done = static_cast<int32_t*>(at(l.counts));
      g1.gemm1_row_blocks = int(2 * Ip / GemmConfig<1>::kRowsPerBlock);
      MXMOE_RETURN_IF_ERROR(cuda_status(smxx::launch_kernel(zero_tile_counts, dim3(1), dim3(64), 0, stream, overlap,
                                                           g1.tile_done, int(tiles)),
                                        "tile count reset"));
    }
  }
  MXMOE_RETURN_IF_ERROR(
      cuda_status(launch_mxfp4_moe_gemm(g1, l.tile, warps.gemm1, true, tiles, overlap, stream), "GEMM1 launch"));

  GemmParams g2 = gemm2_params(w, g1, ypair, rweights);
  g2.tile_done = g1.tile_done;  // GEMM2 waits on GEMM1's tile counts
  if (fused_warps > 0) {
    // A block per token reads its k pairs by index: the routing as given (its
    // ids checked in the kernel) and, on expert-grouped tiles, each pair's
    // GEMM1 row from the grouping.
    GemmParams gc = g2;
    gc.pair_ids = ids;
    gc.route_w = a.topk_ids ? a.topk_weights : sch.weights;
    gc.act_row = l.per_pair ? nullptr : sch.pair_row;
    return cuda_status(launch_mxfp4_down_combine(gc, fused_warps, T, a.y, a.y_bf16, overlap, stream),
                       "GEMM2 + combine launch");
  }
  MXMOE_RETURN_IF_ERROR(
      cuda_status(launch_mxfp4_moe_gemm(g2, l.tile, warps.gemm2, false, tiles, overlap, stream), "GEMM2 launch"));

  // Per-pair rows lie at their pair's index (no pair_row).
  return smxx::launch_combine(ypair, l.per_pair ? nullptr : sch.pair_row, T, k, H, a.y, a.y_bf16, overlap, stream,
                              kWho);
}

}  // namespace mxmoe::portable
