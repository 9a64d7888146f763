#include "cuda/common/host_experts_stream.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "cuda/common/image_forward.h"
#include "cuda/common/smxx_moe_kernels.h"
#include "cuda/prepare/device_image.h"
#include "cuda/prepare/smxx_prepare_kernels.h"
#include "mxmoe/format.h"

namespace mxmoe::smxx {
namespace {

constexpr const char* kWho = "cpu";

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

// A chunk's copies are about this many bytes: large enough that each copy
// runs at the link's rate (64 MB pinned copies: 54.7 GB/s on the H100's
// host), small enough to keep the staging a few percent of the image.
constexpr double kChunkBytes = 64.0 * (1 << 20);

bool any_large(const cpu::HostBuffer& scales) {
  return std::any_of(scales.data(), scales.data() + scales.size(), [](uint8_t s) { return s >= 128; });
}

// An expert's bytes in each per-expert piece of the cpu pack, in image piece
// order kW13Codes .. kB2.
std::array<size_t, 6> pack_expert_bytes(const MoeShape& s) {
  const size_t H = size_t(s.hidden), I = size_t(s.intermediate);
  return {2 * I * H / 2, 2 * I * H / kMxBlock, 2 * I * 2, H * I / 2, H * I / kMxBlock, H * 2};
}

}  // namespace

Status ExpertStream::create(BackendKind kind, const cpu::CpuMoe& moe, std::unique_ptr<ExpertStream>* out) {
  if (kind != BackendKind::kPortable && kind != BackendKind::kSm90)
    return Status::Unsupported(fmt::format("cpu: experts stream to the portable and sm90 kernels, not {}",
                                           backend_name(kind)));
  const MoeShape& s = moe.shape();
  auto st = std::unique_ptr<ExpertStream>(new ExpertStream());
  st->plan_ = make_plan(kind, s);
  if (st->plan_.prefetch_rows != 0)
    return Status::Unsupported(fmt::format("cpu: {}'s plan reads past its experts", backend_name(kind)));
  st->pack_ = &moe.packed();
  const cpu::PackedWeights& p = moe.packed();
  st->has_router_ = moe.has_router();
  st->w13_large_ = any_large(p.w13_scales);
  st->w2_large_ = any_large(p.w2_scales);
  st->swiglu_ = moe.swiglu();

  // The workspace: the image's pieces, two stagings of a chunk, the router's, the
  // backend's own workspace; each 256-byte aligned.
  size_t at = 0;
  const auto image_bytes = image_piece_bytes(st->plan_, ScaleImage::kPlanOrder, st->has_router_);
  for (int i = 0; i < kImagePieces; ++i) {
    st->piece_offset_[size_t(i)] = at;
    at += align256(size_t(image_bytes[size_t(i)]));
  }
  const auto per_expert = pack_expert_bytes(s);
  size_t expert_bytes = 0;
  for (size_t b : per_expert) expert_bytes += b;
  // Whole 128-row tiles of the sm90 order in every chunk: an even number of
  // experts (w2's Hp rows an expert may end half-way into a tile; an odd E
  // pads Hp to 128, plan_sm90).
  int64_t chunk = std::max<int64_t>(2, int64_t(kChunkBytes / double(expert_bytes)) / 2 * 2);
  st->chunk_experts_ = std::min<int64_t>(chunk, s.experts);
  for (auto& stage : st->stage_offset_)
    for (size_t i = 0; i < 6; ++i) {
      stage[i] = at;
      at += align256(per_expert[i] * size_t(st->chunk_experts_));
    }
  st->router_offset_ = at;
  if (st->has_router_) at += align256(p.router_weight.size() * 2) + align256(p.router_bias.size() * 2);
  st->forward_offset_ = at;

  // Biases and router: small, copied to one pinned buffer. The weight
  // buffers: pinned where they are, so that the copies are DMA at the link's
  // rate (and a graph may record them).
  const std::vector<uint16_t>* small[4] = {&p.b13, &p.b2, &p.router_weight, &p.router_bias};
  size_t small_bytes = 0;
  for (auto* v : small) small_bytes += align256(v->size() * 2);
  MXMOE_RETURN_IF_ERROR(cuda_status(cudaHostAlloc(&st->pinned_small_, std::max<size_t>(small_bytes, 256),
                                                  cudaHostAllocDefault),
                                    kWho, "allocate pinned memory for the biases"));
  uint8_t* q = static_cast<uint8_t*>(st->pinned_small_);
  for (size_t i = 0; i < 4; ++i) {
    std::memcpy(q, small[i]->data(), small[i]->size() * 2);
    st->small_[i] = q;
    q += align256(small[i]->size() * 2);
  }
  const cpu::HostBuffer* weights[4] = {&p.w13_codes, &p.w13_scales, &p.w2_codes, &p.w2_scales};
  for (size_t i = 0; i < 4; ++i) {
    const cudaError_t err = cudaHostRegister(weights[i]->data(), weights[i]->size(), cudaHostRegisterDefault);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return Status::OutOfMemory(fmt::format("cpu: cannot pin the {} bytes of the experts' pack for copies to the GPU "
                                             "({}); host_stream_tokens = -1 keeps them unpinned, computed by the CPU",
                                             weights[i]->size(), cudaGetErrorString(err)));
    }
    st->registered_[i] = weights[i]->data();
  }

  MXMOE_RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(&st->copies_, cudaStreamNonBlocking), kWho,
                                    "create the copies' stream"));
  for (cudaEvent_t* e : {&st->forked_, &st->copied_[0], &st->copied_[1], &st->relaid_[0], &st->relaid_[1]})
    MXMOE_RETURN_IF_ERROR(
        cuda_status(cudaEventCreateWithFlags(e, cudaEventDisableTiming), kWho, "create the copies' events"));
  DeviceImage sizing;
  sizing.plan = st->plan_;
  sizing.swiglu = st->swiglu_;
  sizing.has_router = st->has_router_;
  MXMOE_RETURN_IF_ERROR(make_image_forward(kind, sizing, {}, &st->sizing_));
  *out = std::move(st);
  return Status::Ok();
}

ExpertStream::~ExpertStream() {
  for (cudaEvent_t e : {forked_, copied_[0], copied_[1], relaid_[0], relaid_[1]})
    if (e) cudaEventDestroy(e);
  if (copies_) cudaStreamDestroy(copies_);
  for (void* p : registered_)
    if (p) cudaHostUnregister(p);
  if (pinned_small_) cudaFreeHost(pinned_small_);
}

size_t ExpertStream::workspace_bytes(int64_t tokens) const {
  return forward_offset_ + align256(sizing_->workspace_bytes(tokens));
}

Status ExpertStream::copy_chunk(int64_t e0, int64_t e1, int buffer, uint8_t* ws) const {
  const auto per_expert = pack_expert_bytes(plan_.shape);
  const uint8_t* src[6] = {pack_->w13_codes.data(), pack_->w13_scales.data(), small_[0],
                           pack_->w2_codes.data(),  pack_->w2_scales.data(),  small_[1]};
  for (size_t i = 0; i < 6; ++i)
    MXMOE_RETURN_IF_ERROR(cuda_status(
        cudaMemcpyAsync(ws + stage_offset_[size_t(buffer)][i], src[i] + size_t(e0) * per_expert[i],
                        size_t(e1 - e0) * per_expert[i], cudaMemcpyHostToDevice, copies_),
        kWho, "copy experts to the GPU"));
  return Status::Ok();
}

Status ExpertStream::relay_chunk(int64_t e0, int64_t e1, int buffer, uint8_t* ws, cudaStream_t stream) const {
  const MoeShape& s = plan_.shape;
  const int64_t n = e1 - e0, H = s.hidden, I = s.intermediate;
  const int64_t Hp = plan_.hidden_padded, Ip = plan_.intermediate_padded;
  const auto per_expert = pack_expert_bytes(s);
  uint8_t* stage[6];
  for (size_t i = 0; i < 6; ++i) stage[i] = ws + stage_offset_[size_t(buffer)][i];
  // The chunk's experts start at expert e0 of each image piece.
  auto piece = [&](int i, int64_t expert_bytes) { return ws + piece_offset_[size_t(i)] + size_t(e0 * expert_bytes); };
  const RowMap w13_rows{n, 2 * Ip, true, plan_.w13_layout, W13Layout::kBlockedGateUp16, Ip, I, 0};
  const RowMap w2_rows{n, Hp, false, W13Layout::kInterleaved, W13Layout::kInterleaved, 0, 0, H};
  MxMatrixView w13_src{stage[0], stage[1], n, 2 * I, H, 0, int64_t(per_expert[0]), 0, int64_t(per_expert[1])};
  MxMatrixView w2_src{stage[3], stage[4], n, H, I, 0, int64_t(per_expert[3]), 0, int64_t(per_expert[4])};
  const GatherMatrix w13{w13_src, w13_rows, Hp, true}, w2{w2_src, w2_rows, Ip, true};
  MXMOE_RETURN_IF_ERROR(launch_gather_codes(w13, plan_.swizzle, piece(kW13Codes, 2 * Ip * Hp / 2),
                                            n * 2 * Ip * Hp / 2, stream));
  MXMOE_RETURN_IF_ERROR(launch_gather_scales(w13, plan_.swizzle, false, piece(kW13Scales, 2 * Ip * Hp / kMxBlock),
                                             n * 2 * Ip * Hp / kMxBlock, stream));
  MXMOE_RETURN_IF_ERROR(launch_gather_codes(w2, plan_.swizzle, piece(kW2Codes, Hp * Ip / 2), n * Hp * Ip / 2, stream));
  MXMOE_RETURN_IF_ERROR(launch_gather_scales(w2, plan_.swizzle, false, piece(kW2Scales, Hp * Ip / kMxBlock),
                                             n * Hp * Ip / kMxBlock, stream));
  MXMOE_RETURN_IF_ERROR(launch_gather_bf16(reinterpret_cast<const uint16_t*>(stage[2]), w13_rows, 2 * I, 1, 1, 1,
                                           reinterpret_cast<uint16_t*>(piece(kB13, 2 * Ip * 2)), n * 2 * Ip, stream));
  return launch_gather_bf16(reinterpret_cast<const uint16_t*>(stage[5]), RowMap{n, 1, false, {}, {}, 0, 0, 1}, H,
                            0, H, Hp, reinterpret_cast<uint16_t*>(piece(kB2, Hp * 2)), n * Hp, stream);
}

Status ExpertStream::forward(const ForwardArgs& f, void* workspace, size_t workspace_size, cudaStream_t stream) const {
  if (workspace_size < workspace_bytes(f.tokens))
    return Status::InvalidArgument(fmt::format("cpu: a streamed forward of {} tokens needs {} bytes of workspace, got {}",
                                               f.tokens, workspace_bytes(f.tokens), workspace_size));
  uint8_t* ws = static_cast<uint8_t*>(workspace);
  const MoeShape& s = plan_.shape;
  auto status = [](cudaError_t err) { return cuda_status(err, kWho, "order the copies and the re-laying"); };
  // Chunk c is copied into staging c % 2 once the re-laying of chunk c - 2
  // has read it, and re-laid once copied; the caller's stream has waited for
  // every copy by the end (the join a capture needs).
  MXMOE_RETURN_IF_ERROR(status(cudaEventRecord(forked_, stream)));
  MXMOE_RETURN_IF_ERROR(status(cudaStreamWaitEvent(copies_, forked_, 0)));
  int64_t chunk = 0;
  for (int64_t e0 = 0; e0 < s.experts; e0 += chunk_experts_, ++chunk) {
    const int b = int(chunk % 2);
    const int64_t e1 = std::min(e0 + chunk_experts_, s.experts);
    if (chunk >= 2) MXMOE_RETURN_IF_ERROR(status(cudaStreamWaitEvent(copies_, relaid_[size_t(b)], 0)));
    MXMOE_RETURN_IF_ERROR(copy_chunk(e0, e1, b, ws));
    MXMOE_RETURN_IF_ERROR(status(cudaEventRecord(copied_[size_t(b)], copies_)));
    MXMOE_RETURN_IF_ERROR(status(cudaStreamWaitEvent(stream, copied_[size_t(b)], 0)));
    MXMOE_RETURN_IF_ERROR(relay_chunk(e0, e1, b, ws, stream));
    MXMOE_RETURN_IF_ERROR(status(cudaEventRecord(relaid_[size_t(b)], stream)));
  }
  if (has_router_) {
    const int64_t E = s.experts, H = s.hidden, Hp = plan_.hidden_padded;
    uint8_t* weight = ws + router_offset_;
    uint8_t* bias = weight + align256(size_t(E * H) * 2);
    MXMOE_RETURN_IF_ERROR(cuda_status(
        cudaMemcpyAsync(weight, small_[2], size_t(E * H) * 2, cudaMemcpyHostToDevice, stream), kWho, "copy the router"));
    MXMOE_RETURN_IF_ERROR(cuda_status(
        cudaMemcpyAsync(bias, small_[3], size_t(E) * 2, cudaMemcpyHostToDevice, stream), kWho, "copy the router"));
    MXMOE_RETURN_IF_ERROR(launch_gather_bf16(
        reinterpret_cast<const uint16_t*>(weight), RowMap{E, 1, false, {}, {}, 0, 0, 1}, H, 0, H, Hp,
        reinterpret_cast<uint16_t*>(ws + piece_offset_[kRouterWeight]), E * Hp, stream));
    MXMOE_RETURN_IF_ERROR(launch_gather_bf16(reinterpret_cast<const uint16_t*>(bias),
                                             RowMap{1, 1, false, {}, {}, 0, 0, 1}, 0, 0, E, E,
                                             reinterpret_cast<uint16_t*>(ws + piece_offset_[kRouterBias]), E, stream));
  }
  DeviceImage img;
  img.plan = plan_;
  img.swiglu = swiglu_;
  img.has_router = has_router_;
  img.w13_large_scales = w13_large_;
  img.w2_large_scales = w2_large_;
  const auto bytes = image_piece_bytes(plan_, ScaleImage::kPlanOrder, has_router_);
  for (int i = 0; i < kImagePieces; ++i)
    img.piece[size_t(i)] = bytes[size_t(i)] ? ws + piece_offset_[size_t(i)] : nullptr;
  std::unique_ptr<DeviceForward> backend;
  MXMOE_RETURN_IF_ERROR(make_image_forward(plan_.backend, img, {}, &backend));
  return backend->forward(f, ws + forward_offset_, workspace_size - forward_offset_, stream);
}

}  // namespace mxmoe::smxx
