// The sm90 forward: the shared router and grouping kernels, the pack kernel,
// the two wgmma GEMMs and the combine of their bf16 pair rows, or the portable
// forward on the decode path.
#include "cuda/sm90/sm90_launcher.h"

#include <algorithm>

#include <cuda_bf16.h>
#include <fmt/format.h>

#include "cuda/common/pdl.cuh"
#include "cuda/common/smxx_moe_kernels.h"
#include "cuda/sm90/sm90_layout.h"
#include "cuda/sm90/sm90_mxfp4_gemm_launch.h"

namespace mxmoe::sm90 {
namespace {

constexpr const char* kWho = "sm90";
constexpr int kPackThreads = 256;  // 8 warps, one task each at a time
constexpr int kCombineThreads = 128;

// Step 3, by warp tasks (grid-stride): task (m, c) writes chunk c of tile rows
// [8m, 8m + 8), which is one 1024-byte swizzle atom per 64-wide half
// (sm90_layout.h; token tiles are multiples of 8 rows, so the 8 rows share a
// tile and are rows n0 .. n0 + 7, n0 % 8 = 0). Store s of lane L is the
// 16-byte slot 32s + L of those 2 KB (half s / 2, row n0 + 4 (s % 2) + L / 8,
// position L % 8), so each store instruction writes four whole 128-byte lines;
// a 64-wide tail chunk has only half 0 (stores 0 and 1).
// The slot at position i of row n holds operand piece q = i ^ (n % 8) of the
// half, p = 8h + q, whose word t is the x word at piece_word_element(p, t, width):
// four 4-byte loads, which the 8 rows' 2 KB of x serve from L1. Padding rows
// (sorted pair -1) and columns at or past H (a multiple of 32) are zeros.
// (Lanes that each stored their own four pieces of a row wrote every 32-byte
// sector in two 16-byte halves from different instructions, and the kernel
// ran at a third of the DRAM bandwidth.)
// It also zeroes the GEMMs' two item counters: every earlier kernel,
// the previous forward's GEMMs included, has completed once it passes its wait.
__global__ void __launch_bounds__(kPackThreads)
sm90_pack_activations(const uint16_t* __restrict__ x, int H, int64_t x_stride, int topk,
                      const int32_t* __restrict__ sorted_pair,
                      const int32_t* __restrict__ num_tiles, int bn, int k_padded, uint8_t* __restrict__ out,
                      int32_t* __restrict__ item_counters) {
  smxx::wait_for_previous_kernels();  // the schedule comes from the grouping kernel
  smxx::allow_next_kernel();
  if (blockIdx.x == 0 && threadIdx.x < 2) item_counters[threadIdx.x] = 0;
  const int chunks = chunk_count(k_padded), lane = threadIdx.x % 32, i = lane % 8;
  const int tasks = *num_tiles * (bn / 8) * chunks, warps = gridDim.x * (kPackThreads / 32);
  for (int task = blockIdx.x * (kPackThreads / 32) + threadIdx.x / 32; task < tasks; task += warps) {
    const int m = task / chunks, c = task - m * chunks, tile = 8 * m / bn, n0 = 8 * m - tile * bn;
    const int width = chunk_width(k_padded, c);
    uint8_t* const atom =
        out + tile * packed_tile_bytes(bn, k_padded) + int64_t(c) * stage_bytes(bn) + n0 * 128 + 16 * lane;
    // The lane's two rows: nn = L / 8 (stores 0, 2) and 4 + L / 8 (stores 1, 3).
    const uint32_t* src[2];
    for (int r = 0; r < 2; ++r) {
      const int pair = sorted_pair[8 * m + 4 * r + lane / 8];
      src[r] = pair >= 0 ? reinterpret_cast<const uint32_t*>(x + int64_t(pair / topk) * x_stride + c * kChunk) : nullptr;
    }
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      const int h = s / 2, nn = 4 * (s % 2) + lane / 8, p = 8 * h + (i ^ nn);
      if (64 * h >= width) break;
      const uint32_t* row = src[s % 2];
      uint32_t v[4];
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const int e = piece_word_element(p, t, width);  // element of the chunk
        v[t] = row != nullptr && c * kChunk + e < H ? __ldg(row + e / 2) : 0u;
      }
      *reinterpret_cast<uint4*>(atom + h * bn * 128 + 512 * (s % 2)) = make_uint4(v[0], v[1], v[2], v[3]);
    }
  }
}

// Eight consecutive outputs: fp32 in two 16-byte stores, bf16 (rounded to
// nearest even) in one.
__device__ __forceinline__ void store8(float* dst, const float (&s)[8]) {
  reinterpret_cast<float4*>(dst)[0] = make_float4(s[0], s[1], s[2], s[3]);
  reinterpret_cast<float4*>(dst)[1] = make_float4(s[4], s[5], s[6], s[7]);
}
__device__ __forceinline__ void store8(uint16_t* dst, const float (&s)[8]) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(s[2 * i], s[2 * i + 1]);
    w[i] = *reinterpret_cast<const uint32_t*>(&v);
  }
  *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
}

// Step 6. y[t] = sum over slots j in order of route_w[t, j] * ypair[t * k +
// j] (GEMM2's bf16 rows, one per pair), in fp32. Block (t, b) takes 8-column
// groups [b, b + 1) * kCombineThreads of token t, one a thread, whose k
// 16-byte loads are all issued before the sums: one L2 round trip a thread.
// (A block walking a token's H with one slot's load at a time made up to 3k
// round trips a thread: 4% of 20b T = 512, docs/PERF.md s54.) No atomics: the
// sum's order is fixed.
template <typename Out>
__global__ void __launch_bounds__(kCombineThreads)
sm90_combine(const uint16_t* __restrict__ ypair, const float* __restrict__ route_w, int k, int H,
             Out* __restrict__ y) {
  smxx::wait_for_previous_kernels();  // GEMM2's rows
  smxx::allow_next_kernel();
  const int64_t tok = blockIdx.x;
  const int c = blockIdx.y * kCombineThreads + threadIdx.x;
  if (c < H / 8) {
    uint4 v[smxx::kMaxTopk];
    float wj[smxx::kMaxTopk];
#pragma unroll
    for (int j = 0; j < smxx::kMaxTopk; ++j)
      if (j < k) {
        wj[j] = route_w[tok * k + j];
        v[j] = __ldg(reinterpret_cast<const uint4*>(ypair + (tok * k + j) * H) + c);
      }
    float s[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int j = 0; j < smxx::kMaxTopk; ++j) {
      if (j >= k) break;
      const uint32_t words[4] = {v[j].x, v[j].y, v[j].z, v[j].w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&words[i]));
        s[2 * i] = fmaf(wj[j], f.x, s[2 * i]);
        s[2 * i + 1] = fmaf(wj[j], f.y, s[2 * i + 1]);
      }
    }
    store8(y + tok * H + 8 * c, s);
  }
}

// Workspace carve-up (every piece 256-byte aligned): the schedule, then the
// packed x, GEMM1's packed output, GEMM2's bf16 rows (one per pair), the
// GEMMs' item counters.
struct Layout : smxx::ScheduleOffsets {
  size_t x_packed = 0, act = 0, ypair = 0, item_counters = 0, total = 0;
};

Layout make_layout(const DeviceWeights& dw, int64_t T, int tile) {
  const portable::DeviceWeights& w = dw.base;
  Layout l;
  const int64_t E = w.shape.experts, k = w.shape.topk, H = w.shape.hidden;
  smxx::WorkspaceCursor ws;
  static_cast<smxx::ScheduleOffsets&>(l) = smxx::take_schedule(ws, T, k, E, tile);
  l.x_packed = ws.take(size_t(l.rows * w.hidden_padded) * 2);
  l.act = ws.take(size_t(l.rows * w.intermediate_padded) * 2);
  l.ypair = ws.take(size_t(T * k * H) * 2);
  l.item_counters = ws.take(2 * sizeof(int32_t));
  l.total = ws.off;
  return l;
}

Status cuda_status(cudaError_t err, const char* what) { return smxx::cuda_status(err, kWho, what); }

Status check_args(const DeviceWeights& dw, const Config& cfg, const ForwardArgs& a) {
  const portable::DeviceWeights& w = dw.base;
  const MoeShape& s = w.shape;
  const int64_t T = a.tokens, E = s.experts, k = s.topk, H = s.hidden;
  const int64_t Hp = w.hidden_padded, Ip = w.intermediate_padded;
  if (T <= 0) return Status::InvalidArgument(fmt::format("sm90: tokens = {} must be positive", T));
  if (E > smxx::kMaxExperts)
    return Status::Unsupported(fmt::format("sm90: {} experts, at most {} supported", E, smxx::kMaxExperts));
  if (k < 1 || k > smxx::kMaxTopk || k > E)
    return Status::Unsupported(fmt::format("sm90: topk = {} outside [1, min(8, experts)]", k));
  if (H % 32 != 0 || Hp % kTailChunk != 0 || Ip % kTailChunk != 0 || Hp < H || Ip < s.intermediate ||
      (E * Hp) % kTileRows != 0)
    return Status::InvalidArgument(fmt::format(
        "sm90: H = {} must be a multiple of 32, Hp = {} and Ip = {} multiples of {}, and E * Hp of {}", H, Hp, Ip,
        kTailChunk, kTileRows));
  if (T * k >= (int64_t(1) << 31) / 2)
    return Status::Unsupported(fmt::format("sm90: tokens * topk = {} too large", T * k));
  if (!a.x || (!a.y && !a.y_bf16)) return Status::InvalidArgument("sm90: null x or y");
  if (const std::string_view m = smxx::forward_arg_error(a, H); !m.empty())
    return Status::InvalidArgument(fmt::format("sm90: {}", m));
  if ((a.topk_ids == nullptr) != (a.topk_weights == nullptr))
    return Status::InvalidArgument("sm90: pass both topk ids and weights, or neither");
  if (w.swizzle != WeightSwizzle::kMmaRowTiles128 || w.w13_layout != W13Layout::kInterleavedChunkOrder)
    return Status::InvalidArgument(
        "sm90: codes must be in the sm90 plan's 128-row tile order and w13 in its chunk K order");
  // The GEMMs bulk-copy codes, scales and bias rows: 16-byte aligned sources.
  for (const void* ptr : {static_cast<const void*>(w.w13_codes), static_cast<const void*>(w.w13_scales),
                          static_cast<const void*>(w.b13), static_cast<const void*>(w.w2_codes),
                          static_cast<const void*>(w.w2_scales), static_cast<const void*>(w.b2)})
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0)
      return Status::InvalidArgument("sm90: prepared weight tensors must be 16-byte aligned");
  if (!is_token_tile(cfg.token_tile))
    return Status::InvalidArgument(
        fmt::format("sm90: token tile {} is not one of {}", cfg.token_tile, fmt::join(kTokenTiles, ", ")));
  if (cfg.stages_gemm1 < 2 || cfg.stages_gemm2 < 2 ||
      smem_layout(cfg.token_tile, int(Hp), cfg.stages_gemm1, cfg.staged_output).bytes >
          max_dynamic_smem(cfg.token_tile) ||
      smem_layout(cfg.token_tile, int(Ip), cfg.stages_gemm2, false).bytes > max_dynamic_smem(cfg.token_tile))
    return Status::InvalidArgument(fmt::format("sm90: stages {} / {} do not fit shared memory for Hp = {}, Ip = {}",
                                               cfg.stages_gemm1, cfg.stages_gemm2, Hp, Ip));
  return Status::Ok();
}

}  // namespace

Config choose_config(const DeviceWeights& w, int64_t tokens, const Overrides& overrides) {
  const MoeShape& s = w.base.shape;
  return sm90::choose_config(tokens, s.topk, s.experts, w.base.hidden_padded, w.base.intermediate_padded,
                             overrides);
}

size_t workspace_bytes(const DeviceWeights& w, int64_t tokens, const Config& cfg) {
  if (cfg.path == Path::kPortableDecode) return portable::workspace_bytes(w.base, tokens);
  return make_layout(w, tokens, cfg.token_tile).total;
}

Status init_kernels() { return cuda_status(init_sm90_mxfp4_gemm(), "shared-memory attribute"); }

Status moe_forward(const DeviceWeights& dw, const Config& cfg, const ForwardArgs& a, void* workspace,
                   size_t workspace_size, cudaStream_t stream) {
  if (cfg.path == Path::kPortableDecode)
    return portable::moe_forward(dw.base, a, workspace, workspace_size, stream, cfg.decode);
  MXMOE_RETURN_IF_ERROR(check_args(dw, cfg, a));
  const portable::DeviceWeights& w = dw.base;
  const MoeShape& s = w.shape;
  const int64_t T = a.tokens, E = s.experts, k = s.topk, H = s.hidden;
  const int64_t Hp = w.hidden_padded, Ip = w.intermediate_padded;
  const int tile = cfg.token_tile;
  const Layout l = make_layout(dw, T, tile);
  if (!workspace || workspace_size < l.total)
    return Status::InvalidArgument(fmt::format("sm90: workspace of {} bytes, {} needed", workspace_size, l.total));
  if (reinterpret_cast<uintptr_t>(workspace) % 256 != 0)
    return Status::InvalidArgument("sm90: workspace must be 256-byte aligned");
  const int64_t pack_tasks = l.rows / 8 * chunk_count(Hp);  // (8 tile rows, chunk) pairs, at most
  if (pack_tasks >= (int64_t(1) << 31))                      // the pack kernel's 32-bit task index
    return Status::Unsupported(fmt::format("sm90: {} tile rows of K = {} too large", l.rows, Hp));
  bool overlap = false;
  MXMOE_RETURN_IF_ERROR(smxx::kernels_may_overlap(kWho, &overlap));
  int sms = 0;
  MXMOE_RETURN_IF_ERROR(smxx::sm_count(kWho, &sms));
  char* ws = static_cast<char*>(workspace);
  auto at = [&](size_t off) { return static_cast<void*>(ws + off); };

  const smxx::Schedule sch = smxx::schedule_in(workspace, l);
  // The router's routing in the schedule's arrays, or the caller's as given:
  // the grouping kernel reads an id outside [0, E) as expert 0 and writes
  // the weights into the schedule with NaN for its pair (launch_check_routing's
  // rule, without a launch of its own).
  const int64_t x_stride = smxx::x_row_stride(a, H);
  if (!a.topk_ids) {
    if (!w.router_weight || !w.router_bias)
      return Status::InvalidArgument("sm90: no routing given and the weights have no router");
    MXMOE_RETURN_IF_ERROR(smxx::launch_router_topk(a.x, T, H, x_stride, w.router_weight, Hp, w.router_bias, E, k,
                                                   sch.ids, sch.weights, overlap, stream, kWho));
  }
  MXMOE_RETURN_IF_ERROR(smxx::launch_group_by_expert(a.topk_ids ? a.topk_ids : sch.ids, a.topk_weights, T * k, E, tile,
                                                     sch, overlap, stream, kWho));
  const float* rweights = sch.weights;

  uint8_t* x_packed = static_cast<uint8_t*>(at(l.x_packed));
  int32_t* item_counters = static_cast<int32_t*>(at(l.item_counters));
  {
    constexpr int kTasksPerBlock = kPackThreads / 32;
    const int blocks =
        int(std::min<int64_t>((pack_tasks + kTasksPerBlock - 1) / kTasksPerBlock, int64_t(sms) * 16));
    MXMOE_RETURN_IF_ERROR(cuda_status(
        smxx::launch_kernel(sm90_pack_activations, dim3(unsigned(blocks)), dim3(kPackThreads), 0, stream, overlap,
                            a.x, int(H), x_stride, int(k), static_cast<const int32_t*>(sch.sorted_pair),
                            static_cast<const int32_t*>(sch.num_tiles), tile, int(Hp), x_packed, item_counters),
        "pack launch"));
  }

  uint8_t* act = static_cast<uint8_t*>(at(l.act));
  uint16_t* ypair = static_cast<uint16_t*>(at(l.ypair));
  GemmParams g1{};
  g1.codes = w.w13_codes;
  g1.scales = w.w13_scales;
  g1.bias = w.b13;
  g1.n_rows = int(2 * Ip);
  g1.k = int(Hp);
  g1.large_scales = dw.w13_large_scales;
  g1.stages = cfg.stages_gemm1;
  g1.act_in = x_packed;
  g1.col_pair = sch.sorted_pair;
  g1.tile_expert = sch.tile_expert;
  g1.num_tiles = sch.num_tiles;
  g1.item_counter = item_counters;
  g1.act_out = act;
  g1.staged_output = cfg.staged_output;
  g1.stream_codes = cfg.stream_codes;  // GEMM2 (g2 = g1) too
  g1.alpha = w.swiglu.alpha;
  g1.limit = w.swiglu.limit;
  const int blocks = sms * blocks_per_sm(tile);
  auto row_tiles = [](int64_t rows) { return (rows + kTileRows - 1) / kTileRows; };
  const int grid1 = int(std::min<int64_t>(blocks, l.max_tiles * row_tiles(2 * Ip)));
  MXMOE_RETURN_IF_ERROR(
      cuda_status(launch_sm90_mxfp4_gemm(g1, tile, true, grid1, overlap, stream), "GEMM1 launch"));

  GemmParams g2 = g1;
  g2.codes = w.w2_codes;
  g2.scales = w.w2_scales;
  g2.bias = w.b2;
  g2.n_rows = int(Hp);
  g2.k = int(Ip);
  g2.large_scales = dw.w2_large_scales;
  g2.stages = cfg.stages_gemm2;
  g2.act_in = act;
  g2.item_counter = item_counters + 1;
  g2.act_out = nullptr;
  g2.staged_output = false;
  g2.y_out = ypair;
  g2.n_valid = int(H);
  const int grid2 = int(std::min<int64_t>(blocks, l.max_tiles * row_tiles(Hp)));
  MXMOE_RETURN_IF_ERROR(
      cuda_status(launch_sm90_mxfp4_gemm(g2, tile, false, grid2, overlap, stream), "GEMM2 launch"));

  const dim3 grid(unsigned(T), unsigned((H / 8 + kCombineThreads - 1) / kCombineThreads));
  const uint16_t* const rows = ypair;
  return cuda_status(a.y ? smxx::launch_kernel(sm90_combine<float>, grid, dim3(kCombineThreads), 0, stream, overlap,
                                               rows, rweights, int(k), int(H), a.y)
                         : smxx::launch_kernel(sm90_combine<uint16_t>, grid, dim3(kCombineThreads), 0, stream,
                                               overlap, rows, rweights, int(k), int(H), a.y_bf16),
                     "combine launch");
}

}  // namespace mxmoe::sm90
