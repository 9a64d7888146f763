#include "cuda/prepare/device_image.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "cuda/common/smxx_moe_kernels.h"
#include "cuda/prepare/smxx_prepare_kernels.h"
#include "mxmoe/format.h"

namespace mxmoe::smxx {
namespace {

// Poison for the margins of each piece: codes 0x77 (+6, +6), scales 0xFF
// (NaN), bf16 NaN words (0x7FC0) around biases and router.
void fill_poison(int piece, std::vector<uint8_t>* bytes) {
  const bool bf16 = piece == kB13 || piece == kB2 || piece >= kRouterWeight;
  const uint8_t byte = piece == kW13Codes || piece == kW2Codes ? 0x77 : kE8M0NaN;
  for (size_t j = 0; j < bytes->size(); ++j) (*bytes)[j] = bf16 ? ((j & 1) ? 0x7F : 0xC0) : byte;
}

// Piece i of an image being written (the forwards see it read-only).
uint8_t* writable(const DeviceImage& img, int i) { return const_cast<uint8_t*>(img.piece[size_t(i)]); }

bool any_large(const std::vector<uint8_t>& scales) {
  return std::any_of(scales.begin(), scales.end(), [](uint8_t s) { return s >= 128; });
}

// The message validate_weight_values gives for the first bad value found.
Status check_error(const MoeWeightsView& w, const SourceChecks& c, const char* who) {
  const MoeShape& s = w.shape;
  for (int t = kCheckW13Scales; t <= kCheckW2Scales; ++t) {
    const unsigned long long at = c.first_bad[t];
    if (at == ~0ull) continue;
    const MxMatrixView& m = t == kCheckW13Scales ? w.w13 : w.w2;
    const int64_t blocks = m.cols / kMxBlock, b = int64_t(at) % blocks, r = int64_t(at) / blocks % m.rows,
                  e = int64_t(at) / blocks / m.rows;
    std::string what = fmt::format("row {}", r);
    if (t == kCheckW13Scales && w.w13_layout == W13Layout::kInterleaved)
      what += fmt::format(" ({} {})", r % 2 ? "up" : "gate", r / 2);
    return Status::InvalidArgument(fmt::format("{} scales: byte 0xFF (NaN) at expert {}, {}, block {} (elements {}..{})",
                                               t == kCheckW13Scales ? "w13" : "w2", e, what, b, b * kMxBlock,
                                               b * kMxBlock + kMxBlock - 1));
  }
  const struct {
    const char* name;
    const uint16_t* v;
    int64_t cols, stride;
  } vectors[4] = {{"b13", w.b13, 2 * s.intermediate, w.b13_expert_stride},
                  {"b2", w.b2, s.hidden, w.b2_expert_stride},
                  {"router weight", w.router_weight, s.hidden, s.hidden},
                  {"router bias", w.router_bias, s.experts, s.experts}};
  for (int t = 0; t < 4; ++t) {
    const unsigned long long at = c.first_bad[kCheckB13 + t];
    if (at == ~0ull) continue;
    const int64_t r = int64_t(at) / vectors[t].cols, i = int64_t(at) % vectors[t].cols;
    uint16_t v = 0;  // NaN or Inf: the one value read back
    MXMOE_RETURN_IF_ERROR(cuda_status(
        cudaMemcpy(&v, vectors[t].v + r * vectors[t].stride + i, 2, cudaMemcpyDeviceToHost), who, "read a bad value"));
    return Status::InvalidArgument(
        fmt::format("{}: non-finite value ({}) at [{}, {}]", vectors[t].name, (v & 0x7Fu) ? "NaN" : "Inf", r, i));
  }
  return Status::Ok();
}

}  // namespace

Status allocate_image(const PreparePlan& plan, ScaleImage scales, bool has_router, int64_t poison_margin_bytes,
                      const char* who, const MemorySource& memory, DeviceImage* out) {
  const auto bytes = image_piece_bytes(plan, scales, has_router);
  // A multiple of 256, so that each piece starts 256-byte aligned.
  const size_t margin = size_t((std::max<int64_t>(poison_margin_bytes, 0) + 255) / 256 * 256);
  auto storage = std::make_shared<ImageMemory>();
  DeviceImage img;
  std::vector<uint8_t> poison(margin);
  for (int i = 0; i < kImagePieces; ++i) {
    const size_t n = size_t(bytes[size_t(i)]);
    if (n == 0) continue;  // no router
    DeviceBuffer& buffer = (*storage)[size_t(i)];
    buffer = DeviceBuffer(memory);
    MXMOE_RETURN_IF_ERROR(buffer.reserve(margin + n + margin));
    uint8_t* at = buffer.as<uint8_t>();
    img.piece[size_t(i)] = at + margin;
    if (margin == 0) continue;
    fill_poison(i, &poison);
    for (uint8_t* m : {at, at + margin + n})
      MXMOE_RETURN_IF_ERROR(cuda_status(
          cudaMemcpyAsync(m, poison.data(), margin, cudaMemcpyHostToDevice, memory.stream), who, "poison margin"));
    // `poison` is refilled for the next piece: the copies must have read it.
    MXMOE_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(memory.stream), who, "poison margin"));
  }
  img.plan = plan;
  img.scales = scales;
  img.has_router = has_router;
  img.storage = std::move(storage);
  *out = std::move(img);
  return Status::Ok();
}

Status upload_image(const PreparedWeights& prep, ScaleImage scales, int64_t poison_margin_bytes, const char* who,
                    const MemorySource& memory, DeviceImage* out) {
  const PreparePlan& plan = prep.plan;
  const MoeWeights& p = prep.weights;
  DeviceImage img;
  MXMOE_RETURN_IF_ERROR(
      allocate_image(plan, scales, !p.router_weight.empty(), poison_margin_bytes, who, memory, &img));
  img.swiglu = p.swiglu;
  // A copy from pageable memory returns once it has read the source, so
  // `stage` may be refilled; the stream is synchronised before the image is
  // handed out.
  auto put = [&](int i, const void* src, size_t bytes, size_t at = 0) {
    return cuda_status(cudaMemcpyAsync(writable(img, i) + at, src, bytes, cudaMemcpyHostToDevice, memory.stream), who,
                       "upload");
  };
  const int64_t E = plan.shape.experts, Hp = plan.hidden_padded, Ip = plan.intermediate_padded;
  const struct { int piece; const std::vector<uint8_t>* dense; int64_t rows, cols; bool codes; } mx[4] = {
      {kW13Codes, &p.w13_codes, E * 2 * Ip, Hp, true},   {kW13Scales, &p.w13_scales, E * 2 * Ip, Hp, false},
      {kW2Codes, &p.w2_codes, E * Hp, Ip, true},         {kW2Scales, &p.w2_scales, E * Hp, Ip, false}};
  std::vector<uint8_t> stage;
  for (const auto& t : mx) {
    const bool packed = !t.codes && scales == ScaleImage::kBlockscaled;
    if (packed || plan.swizzle == WeightSwizzle::kNone) {
      // Dense codes (prefetch rows included) go up as prepared; block-scaled
      // scales are packed whole (host_image_piece), 1/32 of the codes' bytes.
      if (packed) MXMOE_RETURN_IF_ERROR(host_image_piece(prep, scales, ImagePiece(t.piece), &stage));
      const std::vector<uint8_t>& src = packed ? stage : *t.dense;
      MXMOE_RETURN_IF_ERROR(put(t.piece, src.data(), src.size()));
      continue;
    }
    // The plan's order, 128-row tiles (or the last rows) at most 64 MB at a
    // time: the host holds one staging chunk beside the prepared weights.
    const int64_t row_bytes = t.codes ? t.cols / 2 : t.cols / kMxBlock;
    const int64_t chunk_rows = std::max<int64_t>(128, (int64_t(64) << 20) / row_bytes / 128 * 128);
    for (int64_t r0 = 0; r0 < t.rows; r0 += chunk_rows) {
      const int64_t nr = std::min(chunk_rows, t.rows - r0);
      stage.resize(size_t(nr * row_bytes));
      const uint8_t* src = t.dense->data() + r0 * row_bytes;
      MXMOE_RETURN_IF_ERROR(t.codes ? swizzle_codes(plan.swizzle, src, nr, t.cols, stage.data())
                                    : swizzle_scales(plan.swizzle, src, nr, t.cols, stage.data()));
      MXMOE_RETURN_IF_ERROR(put(t.piece, stage.data(), stage.size(), size_t(r0 * row_bytes)));
    }
    const size_t tail = t.dense->size() - size_t(t.rows * row_bytes);  // prefetch rows, neutral
    if (tail) MXMOE_RETURN_IF_ERROR(put(t.piece, t.dense->data() + t.rows * row_bytes, tail, size_t(t.rows * row_bytes)));
  }
  const std::vector<uint16_t>* bf16[4] = {&p.b13, &p.b2, &p.router_weight, &p.router_bias};
  const int bf16_piece[4] = {kB13, kB2, kRouterWeight, kRouterBias};
  for (int i = 0; i < 4; ++i)
    if (!bf16[i]->empty()) MXMOE_RETURN_IF_ERROR(put(bf16_piece[i], bf16[i]->data(), bf16[i]->size() * 2));
  MXMOE_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(memory.stream), who, "upload"));
  img.w13_large_scales = any_large(p.w13_scales);
  img.w2_large_scales = any_large(p.w2_scales);
  *out = std::move(img);
  return Status::Ok();
}

Status prepare_image(const PreparePlan& plan, ScaleImage scales, const MoeWeightsView& w, int64_t poison_margin_bytes,
                     const char* who, const MemorySource& memory, DeviceImage* out) {
  MXMOE_RETURN_IF_ERROR(validate_weights(w));
  const MoeShape& s = w.shape;
  if (s.experts != plan.shape.experts || s.hidden != plan.shape.hidden || s.intermediate != plan.shape.intermediate)
    return Status::InvalidArgument(fmt::format("{}: the plan was made for another shape", who));
  const bool has_router = w.router_weight && w.router_bias;
  const cudaStream_t stream = memory.stream;
  DeviceBuffer check_buffer(memory);
  MXMOE_RETURN_IF_ERROR(check_buffer.reserve(sizeof(SourceChecks)));
  auto* checks = check_buffer.as<SourceChecks>();
  MXMOE_RETURN_IF_ERROR(launch_check_source(w, checks, stream));
  DeviceImage img;
  MXMOE_RETURN_IF_ERROR(allocate_image(plan, scales, has_router, poison_margin_bytes, who, memory, &img));
  img.swiglu = w.swiglu;
  const auto piece_bytes = image_piece_bytes(plan, scales, has_router);
  const int64_t E = s.experts, Hp = plan.hidden_padded, Ip = plan.intermediate_padded;
  RowMap w13_rows{E, 2 * Ip, true, plan.w13_layout, w.w13_layout, Ip, s.intermediate, 0};
  RowMap w2_rows{E, Hp, false, W13Layout::kInterleaved, W13Layout::kInterleaved, 0, 0, s.hidden};
  const GatherMatrix w13{w.w13, w13_rows, Hp}, w2{w.w2, w2_rows, Ip};
  const bool packed = scales == ScaleImage::kBlockscaled;
  auto at = [&](int i) { return writable(img, i); };
  auto bytes = [&](int i) { return piece_bytes[size_t(i)]; };
  MXMOE_RETURN_IF_ERROR(launch_gather_codes(w13, plan.swizzle, at(kW13Codes), bytes(kW13Codes), stream));
  MXMOE_RETURN_IF_ERROR(launch_gather_scales(w13, plan.swizzle, packed, at(kW13Scales), bytes(kW13Scales), stream));
  MXMOE_RETURN_IF_ERROR(launch_gather_codes(w2, plan.swizzle, at(kW2Codes), bytes(kW2Codes), stream));
  MXMOE_RETURN_IF_ERROR(launch_gather_scales(w2, plan.swizzle, packed, at(kW2Scales), bytes(kW2Scales), stream));
  // b13 follows w13's rows; b2 and the router are rows of one entry / H.
  MXMOE_RETURN_IF_ERROR(launch_gather_bf16(w.b13, RowMap{E, 2 * Ip, true, plan.w13_layout, w.w13_layout, Ip,
                                                         s.intermediate, 0},
                                           w.b13_expert_stride, 1, 1, 1, reinterpret_cast<uint16_t*>(at(kB13)),
                                           E * 2 * Ip, stream));
  MXMOE_RETURN_IF_ERROR(launch_gather_bf16(w.b2, RowMap{E, 1, false, {}, {}, 0, 0, 1}, w.b2_expert_stride, 0,
                                           s.hidden, Hp, reinterpret_cast<uint16_t*>(at(kB2)), E * Hp, stream));
  if (has_router) {
    MXMOE_RETURN_IF_ERROR(launch_gather_bf16(w.router_weight, RowMap{E, 1, false, {}, {}, 0, 0, 1}, s.hidden, 0,
                                             s.hidden, Hp, reinterpret_cast<uint16_t*>(at(kRouterWeight)), E * Hp,
                                             stream));
    MXMOE_RETURN_IF_ERROR(launch_gather_bf16(w.router_bias, RowMap{1, 1, false, {}, {}, 0, 0, 1}, 0, 0, E, E,
                                             reinterpret_cast<uint16_t*>(at(kRouterBias)), E, stream));
  }
  SourceChecks found{};
  MXMOE_RETURN_IF_ERROR(
      cuda_status(cudaMemcpyAsync(&found, checks, sizeof found, cudaMemcpyDeviceToHost, stream), who, "checks"));
  MXMOE_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream), who, "prepare on the device"));
  MXMOE_RETURN_IF_ERROR(check_error(w, found, who));
  img.w13_large_scales = found.large_scales[0] != 0;
  img.w2_large_scales = found.large_scales[1] != 0;
  *out = std::move(img);
  return Status::Ok();
}

}  // namespace mxmoe::smxx
