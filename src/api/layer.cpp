// MoeLayer::create: validation, the dispatch decision for the layer's device,
// and the CPU or CUDA layer behind it; the checks every layer shares.
#include "mxmoe/layer.h"

#include <algorithm>

#include <fmt/format.h>

#include "api/cpu_layer.h"
#include "api/reference_layer.h"
#include "mxmoe/dispatch.h"
#ifdef MXMOE_WITH_CUDA
#include "api/device_layer.h"
#include "api/host_experts_layer.h"
#endif

namespace mxmoe {

Status MoeLayer::create(const MoeWeightsView& weights, const LayerOptions& options, std::unique_ptr<MoeLayer>* out) {
  if (!out) return Status::InvalidArgument("layer: null output");
  if (options.device < -1)
    return Status::InvalidArgument(fmt::format("layer: device {} is neither a CUDA device index nor -1 (the CPU)",
                                               options.device));
  // Weights in device memory are checked on their device, as they are
  // prepared (src/cuda/prepare/); host weights once the backend is known.
  int weights_on = -1;
#ifdef MXMOE_WITH_CUDA
  MXMOE_RETURN_IF_ERROR(weights_device(weights, &weights_on));
#endif
  if (weights_on >= 0 && options.device != weights_on)
    return Status::InvalidArgument(fmt::format("layer: the weights are on CUDA device {}; the layer is asked for {}",
                                               weights_on,
                                               options.device < 0 ? std::string("the CPU")
                                                                  : fmt::format("CUDA device {}", options.device)));
  MXMOE_RETURN_IF_ERROR(validate_weights(weights));
  if ((weights.router_weight == nullptr) != (weights.router_bias == nullptr))
    return Status::InvalidArgument("layer: router weight and bias must be given together (or neither)");
  DispatchInput in = dispatch_input_for_device(options.backend, weights.shape, options.device);
  in.activations = options.activations.format;
  DispatchResult pick;
  MXMOE_RETURN_IF_ERROR(choose_backend(in, &pick));
  const bool forced = !in.override_name.empty() && in.override_name != "auto";
  if (pick.backend == BackendKind::kCpu && options.device >= 0 && forced) {
#ifdef MXMOE_WITH_CUDA
    return create_host_experts_layer(pick.reason, weights, options, out);
#else
    return Status::Unsupported("layer: experts in host memory for a GPU's activations need CUDA, which this build has not");
#endif
  }
  if (pick.backend == BackendKind::kCpu || pick.backend == BackendKind::kReference) {
    if (options.device >= 0)
      return Status::Unsupported(fmt::format(
          "layer: no GPU backend can run on CUDA device {} ({}); backend \"cpu\" keeps the experts in host memory "
          "and computes them on the CPU",
          options.device, pick.reason));
    // The cpu backend checks the values in its packing pass (one read of
    // the weights, not two).
    if (pick.backend == BackendKind::kCpu) return create_cpu_layer(pick.reason, weights, out);
    MXMOE_RETURN_IF_ERROR(validate_weight_values(weights));
    return create_reference_layer(pick.reason, weights, options.activations, out);
  }
#ifdef MXMOE_WITH_CUDA
  if (weights_on < 0) MXMOE_RETURN_IF_ERROR(validate_weight_values(weights));
  return create_device_layer(pick.backend, pick.reason, weights, options, out);
#else
  return Status::Unsupported(fmt::format("layer: {} needs CUDA, which this build has not", backend_name(pick.backend)));
#endif
}

size_t MoeLayer::workspace_bytes(int64_t max_tokens) const {
  // The backends' tile choices change with T, so a smaller T can need more
  // bytes than a larger one: the maximum over every T.
  size_t most = 0;
  for (int64_t t = 1; t <= max_tokens; ++t) most = std::max(most, forward_workspace_bytes(t));
  return most;
}

Status MoeLayer::check_common(const LayerForwardArgs& a, const void* workspace, size_t workspace_size) const {
  const char* who = backend_name(backend_);
  if (a.tokens < 0) return Status::InvalidArgument(fmt::format("{}: tokens = {} is negative", who, a.tokens));
  if ((a.topk_ids == nullptr) != (a.topk_weights == nullptr))
    return Status::InvalidArgument(fmt::format("{}: topk_ids and topk_weights must be given together", who));
  if (!a.topk_ids && !has_router_)
    return Status::InvalidArgument(fmt::format("{}: no routing given and the weights have no router", who));
  if (a.y_dtype != OutputDtype::kBf16 && a.y_dtype != OutputDtype::kFp32)
    return Status::InvalidArgument(fmt::format("{}: y_dtype is neither bf16 nor fp32", who));
  if (a.tokens > 0 && (!a.x || !a.y)) return Status::InvalidArgument(fmt::format("{}: null {}", who, !a.x ? "x" : "y"));
  if (a.tokens > 0) {
    const size_t need = forward_workspace_bytes(a.tokens);
    if (need > 0 && (!workspace || workspace_size < need))
      return Status::InvalidArgument(fmt::format(
          "{}: workspace of {} bytes, a forward of {} tokens needs {} (size it with workspace_bytes(max_tokens))", who,
          workspace ? workspace_size : 0, a.tokens, need));
  }
  return Status::Ok();
}

}  // namespace mxmoe
