#include "cuda/prepare/staged_weights.h"

#include <fmt/format.h>

#include "api/device_layer.h"
#include "cuda/common/smxx_moe_kernels.h"
#include "mxmoe/format.h"

namespace mxmoe {
namespace {

// A view's tensors: name, pointer, bytes from the pointer to its last element.
struct Span {
  const char* name;
  const void* ptr;
  int64_t bytes;
};

int64_t matrix_bytes(int64_t experts, int64_t rows, int64_t row_bytes, int64_t row_stride, int64_t expert_stride) {
  return (experts - 1) * expert_stride + (rows - 1) * row_stride + row_bytes;
}

std::vector<Span> spans(const MoeWeightsView& w) {
  const MoeShape& s = w.shape;
  const MxMatrixView* m[2] = {&w.w13, &w.w2};
  std::vector<Span> out;
  const char* names[2][2] = {{"w13 codes", "w13 scales"}, {"w2 codes", "w2 scales"}};
  for (int t = 0; t < 2; ++t) {
    const MxMatrixView& v = *m[t];
    out.push_back({names[t][0], v.codes,
                   matrix_bytes(v.experts, v.rows, v.cols / 2, v.code_row_stride, v.code_expert_stride)});
    out.push_back({names[t][1], v.scales,
                   matrix_bytes(v.experts, v.rows, v.cols / kMxBlock, v.scale_row_stride, v.scale_expert_stride)});
  }
  out.push_back({"b13", w.b13, 2 * ((s.experts - 1) * w.b13_expert_stride + 2 * s.intermediate)});
  out.push_back({"b2", w.b2, 2 * ((s.experts - 1) * w.b2_expert_stride + s.hidden)});
  if (w.router_weight) out.push_back({"router weight", w.router_weight, 2 * s.experts * s.hidden});
  if (w.router_bias) out.push_back({"router bias", w.router_bias, 2 * s.experts});
  return out;
}

// The CUDA device whose memory `p` is, or -1 for host memory (pageable,
// pinned or managed: the host can read it).
int device_of(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();  // not sticky: an unregistered pointer is host memory
    return -1;
  }
  return attr.type == cudaMemoryTypeDevice ? attr.device : -1;
}

}  // namespace

Status weights_device(const MoeWeightsView& w, int* device) {
  MXMOE_RETURN_IF_ERROR(validate_weights(w));
  const std::vector<Span> all = spans(w);
  int first = -2;
  const char* first_name = "";
  for (const Span& t : all) {
    const int d = device_of(t.ptr);
    if (first == -2) {
      first = d;
      first_name = t.name;
    } else if (d != first) {
      auto where = [](int i) { return i < 0 ? std::string("host memory") : fmt::format("CUDA device {}", i); };
      return Status::InvalidArgument(fmt::format("layer: {} is in {} but {} in {}: give every tensor from one place",
                                                 first_name, where(first), t.name, where(d)));
    }
  }
  *device = first;
  return Status::Ok();
}

namespace smxx {

Status stage_weights(const MoeWeightsView& w, int device, const char* who, StagedWeights* out) {
  int where = -1;
  MXMOE_RETURN_IF_ERROR(weights_device(w, &where));
  out->view = w;
  out->stream = nullptr;
  out->copy.reset();
  if (where == device) {
    // The caller's writes may be on any of its streams: wait for them all
    // (once, at set-up) before the legacy stream reads the tensors.
    return cuda_status(cudaDeviceSynchronize(), who, "wait for the weights' writes");
  }
  if (where >= 0)
    return Status::InvalidArgument(
        fmt::format("{}: the weights are on CUDA device {}; the layer is asked for CUDA device {}", who, where, device));
  // Host weights: each tensor copied whole into one staging allocation, the
  // view's strides kept.
  const std::vector<Span> all = spans(w);
  std::vector<size_t> at;
  size_t total = 0;
  for (const Span& t : all) {
    at.push_back(total);
    total += (size_t(t.bytes) + 255) / 256 * 256;
  }
  auto copy = std::make_shared<DeviceBuffer>();
  MXMOE_RETURN_IF_ERROR(copy->reserve(total));
  MoeWeightsView& v = out->view;
  for (size_t i = 0; i < all.size(); ++i) {
    uint8_t* dst = copy->as<uint8_t>() + at[i];
    MXMOE_RETURN_IF_ERROR(cuda_status(cudaMemcpy(dst, all[i].ptr, size_t(all[i].bytes), cudaMemcpyHostToDevice), who,
                                      "stage the weights"));
    const void* p = all[i].ptr;
    if (p == w.w13.codes) v.w13.codes = dst;
    if (p == w.w13.scales) v.w13.scales = dst;
    if (p == w.w2.codes) v.w2.codes = dst;
    if (p == w.w2.scales) v.w2.scales = dst;
    if (p == w.b13) v.b13 = reinterpret_cast<const uint16_t*>(dst);
    if (p == w.b2) v.b2 = reinterpret_cast<const uint16_t*>(dst);
    if (p == w.router_weight) v.router_weight = reinterpret_cast<const uint16_t*>(dst);
    if (p == w.router_bias) v.router_bias = reinterpret_cast<const uint16_t*>(dst);
  }
  out->copy = std::move(copy);
  return Status::Ok();
}

}  // namespace smxx
}  // namespace mxmoe
