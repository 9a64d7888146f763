#include "cuda/prepare/staged_weights.h"

#include <fmt/format.h>

#include "api/device_layer.h"
#include "cuda/common/smxx_moe_kernels.h"
#include "mxmoe/format.h"

namespace mxmoe {
namespace {

int64_t matrix_bytes(int64_t experts, int64_t rows, int64_t row_bytes, int64_t row_stride, int64_t expert_stride) {
  return (experts - 1) * expert_stride + (rows - 1) * row_stride + row_bytes;
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

std::vector<smxx::WeightSpan> smxx::weight_spans(const MoeWeightsView& w) {
  const MoeShape& s = w.shape;
  std::vector<smxx::WeightSpan> out;
  const MxMatrixView& a = w.w13;
  const MxMatrixView& b = w.w2;
  out.push_back({"w13 codes", a.codes, matrix_bytes(a.experts, a.rows, a.cols / 2, a.code_row_stride, a.code_expert_stride)});
  out.push_back({"w13 scales", a.scales,
                 matrix_bytes(a.experts, a.rows, a.cols / kMxBlock, a.scale_row_stride, a.scale_expert_stride)});
  out.push_back({"w2 codes", b.codes, matrix_bytes(b.experts, b.rows, b.cols / 2, b.code_row_stride, b.code_expert_stride)});
  out.push_back({"w2 scales", b.scales,
                 matrix_bytes(b.experts, b.rows, b.cols / kMxBlock, b.scale_row_stride, b.scale_expert_stride)});
  out.push_back({"b13", w.b13, 2 * ((s.experts - 1) * w.b13_expert_stride + 2 * s.intermediate)});
  out.push_back({"b2", w.b2, 2 * ((s.experts - 1) * w.b2_expert_stride + s.hidden)});
  out.push_back({"router weight", w.router_weight, w.router_weight ? 2 * s.experts * s.hidden : 0});
  out.push_back({"router bias", w.router_bias, w.router_bias ? 2 * s.experts : 0});
  return out;
}

std::vector<int64_t> smxx::staging_offsets(const std::vector<WeightSpan>& spans, int64_t* total) {
  std::vector<int64_t> at;
  int64_t end = 0;
  for (const WeightSpan& t : spans) {
    at.push_back(end);
    end += (t.bytes + 255) / 256 * 256;
  }
  *total = end;
  return at;
}

MoeWeightsView smxx::rebased(const MoeWeightsView& w, const std::vector<const void*>& at) {
  MoeWeightsView v = w;
  v.w13.codes = static_cast<const uint8_t*>(at[0]);
  v.w13.scales = static_cast<const uint8_t*>(at[1]);
  v.w2.codes = static_cast<const uint8_t*>(at[2]);
  v.w2.scales = static_cast<const uint8_t*>(at[3]);
  v.b13 = static_cast<const uint16_t*>(at[4]);
  v.b2 = static_cast<const uint16_t*>(at[5]);
  v.router_weight = w.router_weight ? static_cast<const uint16_t*>(at[6]) : nullptr;
  v.router_bias = w.router_bias ? static_cast<const uint16_t*>(at[7]) : nullptr;
  return v;
}

Status weights_device(const MoeWeightsView& w, int* device) {
  MXMOE_RETURN_IF_ERROR(validate_weights(w));
  int first = -2;
  const char* first_name = "";
  for (const smxx::WeightSpan& t : smxx::weight_spans(w)) {
    if (!t.ptr) continue;
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

Status stage_weights(const MoeWeightsView& w, const MemorySource& memory, const char* who, StagedWeights* out) {
  const int device = memory.device;
  int where = -1;
  MXMOE_RETURN_IF_ERROR(weights_device(w, &where));
  out->view = w;
  out->copy.release();
  if (where == device) {
    // The caller's writes may be on any of its streams: wait for them all
    // (once, at set-up) before the memory's stream reads the tensors.
    return cuda_status(cudaDeviceSynchronize(), who, "wait for the weights' writes");
  }
  if (where >= 0)
    return Status::InvalidArgument(
        fmt::format("{}: the weights are on CUDA device {}; the layer is asked for CUDA device {}", who, where, device));
  // Host weights: each tensor copied whole into one staging allocation, the
  // view's strides kept.
  const std::vector<WeightSpan> all = weight_spans(w);
  int64_t total = 0;
  const std::vector<int64_t> at = staging_offsets(all, &total);
  DeviceBuffer copy(memory);
  MXMOE_RETURN_IF_ERROR(copy.reserve(size_t(total)));
  std::vector<const void*> placed;
  for (size_t i = 0; i < all.size(); ++i) {
    uint8_t* dst = copy.as<uint8_t>() + at[i];
    if (all[i].bytes)
      MXMOE_RETURN_IF_ERROR(cuda_status(
          cudaMemcpyAsync(dst, all[i].ptr, size_t(all[i].bytes), cudaMemcpyHostToDevice, memory.stream), who,
          "stage the weights"));
    placed.push_back(dst);
  }
  out->view = rebased(w, placed);
  out->copy = std::move(copy);
  return Status::Ok();
}

}  // namespace smxx
}  // namespace mxmoe
