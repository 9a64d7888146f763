// The sm90 forward: the shared router / grouping / combine kernels around the
// pack kernel and the two wgmma GEMMs, or the portable forward on the decode
// path.
#include "cuda/sm90/sm90_launcher.h"

#include <algorithm>

#include <fmt/format.h>

#include "cuda/common/pdl.cuh"
#include "cuda/common/smxx_moe_kernels.h"
#include "cuda/sm90/sm90_layout.h"
#include "cuda/sm90/sm90_mxfp4_gemm_launch.h"

namespace mxmoe::sm90 {
namespace {

constexpr const char* kWho = "sm90";
constexpr int kPackThreads = 256;

// Step 3. One thread per (tile row r, 128-K chunk c, 32-wide operand block w):
// it reads the row's physical 8-element pieces (t, w), t = 0..3 (four
// 16-byte loads of x) and writes the operand pieces 4w .. 4w + 3 of the row's
// stage image (four 16-byte stores; pack_pieces). Rows of padding (sorted
// pair -1) and columns at or past H (H is a multiple of 32, so a piece is
// either in or out) are zeros. The thread of (r, 0, 0) also writes the row's
// routing weight (0 for padding) for GEMM2's epilogue.
__global__ void __launch_bounds__(kPackThreads)
sm90_pack_activations(const uint16_t* __restrict__ x, int H, int topk, const int32_t* __restrict__ sorted_pair,
                      const float* __restrict__ route_w, const int32_t* __restrict__ num_tiles, int bn,
                      int k_padded, uint8_t* __restrict__ out, float* __restrict__ row_weight) {
  smxx::wait_for_previous_kernels();  // the schedule comes from the grouping kernel
  smxx::allow_next_kernel();
  const int chunks = k_padded / kChunk;
  const int64_t units = int64_t(*num_tiles) * bn * chunks * 4;
  for (int64_t u = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; u < units; u += int64_t(gridDim.x) * blockDim.x) {
    const int w = int(u & 3);
    const int64_t rc = u >> 2;
    const int c = int(rc % chunks);
    const int64_t r = rc / chunks;
    const int pair = sorted_pair[r];
    if (rc % chunks == 0 && w == 0) row_weight[r] = pair >= 0 ? route_w[pair] : 0.f;
    uint32_t in[4][4];
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const int e = c * kChunk + 32 * t + 8 * w;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (pair >= 0 && e < H) v = __ldg(reinterpret_cast<const uint4*>(x + int64_t(pair / topk) * H + e));
      in[t][0] = v.x;
      in[t][1] = v.y;
      in[t][2] = v.z;
      in[t][3] = v.w;
    }
    uint32_t pieces[4][4];
    pack_pieces(in, pieces);
    uint8_t* stage = out + ((r / bn) * chunks + c) * int64_t(stage_bytes(bn));
    const int n = int(r % bn);
#pragma unroll
    for (int j = 0; j < 4; ++j)
      *reinterpret_cast<uint4*>(stage + stage_offset(bn, n, 8 * (4 * w + j))) =
          make_uint4(pieces[j][0], pieces[j][1], pieces[j][2], pieces[j][3]);
  }
}

// Workspace carve-up (every piece 256-byte aligned): the schedule, then the
// rows' routing weights, the packed x, GEMM1's packed output, GEMM2's rows.
struct Layout : smxx::ScheduleOffsets {
  size_t row_weight = 0, x_packed = 0, act = 0, ypair = 0, total = 0;
};

Layout make_layout(const DeviceWeights& dw, int64_t T, int tile) {
  const portable::DeviceWeights& w = dw.base;
  Layout l;
  const int64_t E = w.shape.experts, k = w.shape.topk, H = w.shape.hidden;
  smxx::WorkspaceCursor ws;
  static_cast<smxx::ScheduleOffsets&>(l) = smxx::take_schedule(ws, T, k, E, tile);
  l.row_weight = ws.take(size_t(l.rows) * 4);
  l.x_packed = ws.take(size_t(l.rows * w.hidden_padded) * 2);
  l.act = ws.take(size_t(l.rows * w.intermediate_padded) * 2);
  l.ypair = ws.take(size_t(l.rows * H) * 4);
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
  if (k < 1 || k > 8 || k > E)
    return Status::Unsupported(fmt::format("sm90: topk = {} outside [1, min(8, experts)]", k));
  if (H % 32 != 0 || Hp % kChunk != 0 || Ip % kChunk != 0 || Hp < H || Ip < s.intermediate)
    return Status::InvalidArgument(fmt::format(
        "sm90: H = {} must be a multiple of 32 and Hp = {}, Ip = {} multiples of {}", H, Hp, Ip, kChunk));
  if (T * k >= (int64_t(1) << 31) / 2)
    return Status::Unsupported(fmt::format("sm90: tokens * topk = {} too large", T * k));
  if (!a.x || !a.y) return Status::InvalidArgument("sm90: null x or y");
  if ((a.topk_ids == nullptr) != (a.topk_weights == nullptr))
    return Status::InvalidArgument("sm90: pass both topk ids and weights, or neither");
  if (w.swizzle != WeightSwizzle::kMmaRowTiles128)
    return Status::InvalidArgument("sm90: codes must be in the sm90 plan's 128-row tile order");
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
      smem_layout(cfg.token_tile, int(Hp), cfg.stages_gemm1).bytes > max_dynamic_smem(cfg.token_tile) ||
      smem_layout(cfg.token_tile, int(Ip), cfg.stages_gemm2).bytes > max_dynamic_smem(cfg.token_tile))
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
  if (cfg.path == Path::kPortableDecode) return portable::moe_forward(dw.base, a, workspace, workspace_size, stream);
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
  bool overlap = false;
  MXMOE_RETURN_IF_ERROR(smxx::kernels_may_overlap(kWho, &overlap));
  int dev = 0, sms = 0;
  MXMOE_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&dev), "cudaGetDevice"));
  MXMOE_RETURN_IF_ERROR(cuda_status(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "SM count"));
  char* ws = static_cast<char*>(workspace);
  auto at = [&](size_t off) { return static_cast<void*>(ws + off); };

  const int32_t* ids = a.topk_ids;
  const float* rweights = a.topk_weights;
  if (!ids) {
    if (!w.router_weight || !w.router_bias)
      return Status::InvalidArgument("sm90: no routing given and the weights have no router");
    int32_t* ids_out = static_cast<int32_t*>(at(l.ids));
    float* w_out = static_cast<float*>(at(l.weights));
    MXMOE_RETURN_IF_ERROR(smxx::launch_router_topk(a.x, T, H, w.router_weight, Hp, w.router_bias, E, k, ids_out,
                                                   w_out, overlap, stream, kWho));
    ids = ids_out;
    rweights = w_out;
  }

  int32_t* sorted_pair = static_cast<int32_t*>(at(l.sorted_pair));
  int32_t* pair_row = static_cast<int32_t*>(at(l.pair_row));
  int32_t* tile_expert = static_cast<int32_t*>(at(l.tile_expert));
  int32_t* num_tiles = static_cast<int32_t*>(at(l.num_tiles));
  MXMOE_RETURN_IF_ERROR(smxx::launch_group_by_expert(ids, T * k, E, tile, sorted_pair, pair_row, tile_expert,
                                                     static_cast<int32_t*>(at(l.tile_row)), num_tiles, overlap,
                                                     stream, kWho));

  uint8_t* x_packed = static_cast<uint8_t*>(at(l.x_packed));
  float* row_weight = static_cast<float*>(at(l.row_weight));
  {
    const int64_t units = l.rows * (Hp / kChunk) * 4;
    const int blocks = int(std::min<int64_t>((units + kPackThreads - 1) / kPackThreads, int64_t(sms) * 16));
    MXMOE_RETURN_IF_ERROR(cuda_status(
        smxx::launch_kernel(sm90_pack_activations, dim3(unsigned(blocks)), dim3(kPackThreads), 0, stream, overlap,
                            a.x, int(H), int(k), static_cast<const int32_t*>(sorted_pair), rweights,
                            static_cast<const int32_t*>(num_tiles), tile, int(Hp), x_packed, row_weight),
        "pack launch"));
  }

  uint8_t* act = static_cast<uint8_t*>(at(l.act));
  float* ypair = static_cast<float*>(at(l.ypair));
  GemmParams g1{};
  g1.codes = w.w13_codes;
  g1.scales = w.w13_scales;
  g1.bias = w.b13;
  g1.n_rows = int(2 * Ip);
  g1.k = int(Hp);
  g1.large_scales = dw.w13_large_scales;
  g1.stages = cfg.stages_gemm1;
  g1.act_in = x_packed;
  g1.row_meta = sorted_pair;
  g1.tile_expert = tile_expert;
  g1.num_tiles = num_tiles;
  g1.act_out = act;
  g1.alpha = w.swiglu.alpha;
  g1.limit = w.swiglu.limit;
  const int blocks = sms * blocks_per_sm(tile);
  const int grid1 = int(std::min<int64_t>(blocks, l.max_tiles * (2 * Ip / kTileRows)));
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
  g2.act_out = nullptr;
  g2.y_out = ypair;
  g2.n_valid = int(H);
  g2.row_meta = row_weight;
  const int grid2 = int(std::min<int64_t>(blocks, l.max_tiles * (Hp / kTileRows)));
  MXMOE_RETURN_IF_ERROR(
      cuda_status(launch_sm90_mxfp4_gemm(g2, tile, false, grid2, overlap, stream), "GEMM2 launch"));

  return smxx::launch_combine(ypair, pair_row, T, k, H, a.y, overlap, stream, kWho);
}

}  // namespace mxmoe::sm90
