// The reference MoeLayer: bf16 x rows to fp32, the fp64 reference forward,
// fp32 or bf16 y. The workspace holds the fp32 copies of x and y.
#include "api/reference_layer.h"

#include <cstring>

#include <fmt/format.h>

#include "mxmoe/format.h"
#include "mxmoe/prepare.h"
#include "mxmoe/reference.h"

namespace mxmoe {
namespace {

class ReferenceLayer final : public MoeLayer {
 public:
  ReferenceLayer(std::string reason, PreparedWeights weights, bool has_router, const ActivationOptions& activations)
      : MoeLayer(BackendKind::kReference, std::move(reason), -1, weights.plan.shape, has_router, activations.format),
        weights_(std::move(weights)) {
    options_.fp64 = true;
    options_.activations = activations;
  }

  // fp32 x [T, H] and fp32 y [T, H] (the latter unused for an fp32 y).
  size_t forward_workspace_bytes(int64_t tokens) const override {
    return 2 * size_t(std::max<int64_t>(tokens, 0)) * size_t(shape().hidden) * sizeof(float);
  }

  Status forward(const LayerForwardArgs& a, void* workspace, size_t workspace_size,
                 CUstream_st* /*stream: the CPU forward is synchronous*/) const override {
    MXMOE_RETURN_IF_ERROR(check_common(a, workspace, workspace_size));
    const int64_t T = a.tokens, H = shape().hidden, k = shape().topk;
    if (T == 0) return Status::Ok();
    const int64_t stride = a.x_row_stride ? a.x_row_stride : H;
    if (stride < H) return Status::InvalidArgument(fmt::format("reference: x_row_stride {} is below H = {}", stride, H));
    float* const x = static_cast<float*>(workspace);
    float* const y32 = a.y_dtype == OutputDtype::kFp32 ? static_cast<float*>(a.y) : x + T * H;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) x[t * H + h] = bf16_to_float(a.x[t * stride + h]);
    const RoutingView routing{a.topk_ids, a.topk_weights, T, k};
    MXMOE_RETURN_IF_ERROR(
        reference_forward(weights_.view(), x, T, a.topk_ids ? &routing : nullptr, y32, options_));
    if (a.y_dtype == OutputDtype::kBf16) {
      uint16_t* const y = static_cast<uint16_t*>(a.y);
      for (int64_t i = 0; i < T * H; ++i) y[i] = float_to_bf16(y32[i]);
    }
    return Status::Ok();
  }

 private:
  PreparedWeights weights_;  // the reference plan's copy: dense, unpadded
  ReferenceOptions options_;
};

}  // namespace

Status create_reference_layer(std::string reason, const MoeWeightsView& weights, const ActivationOptions& activations,
                              std::unique_ptr<MoeLayer>* out) {
  PreparedWeights prep;
  MXMOE_RETURN_IF_ERROR(prepare_weights(make_plan(BackendKind::kReference, weights.shape), weights, &prep));
  const bool has_router = !prep.weights.router_weight.empty();
  *out = std::make_unique<ReferenceLayer>(std::move(reason), std::move(prep), has_router, activations);
  return Status::Ok();
}

}  // namespace mxmoe
