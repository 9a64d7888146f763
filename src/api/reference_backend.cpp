#include "api/reference_backend.h"

#include "api/host_timing.h"
#include "mxmoe/reference.h"

namespace mxmoe {
namespace {

class ReferenceBackend final : public Backend {
 public:
  ReferenceBackend(const MoeWeightsView& w, const ActivationOptions& a) : w_(w) {
    options_.fp64 = true;
    options_.activations = a;
  }
  BackendKind kind() const override { return BackendKind::kReference; }

  Status forward_host(const float* x, int64_t tokens, const RoutingView* routing,
                      float* y) override {
    // As the other backends: a forward of no tokens is a caller's mistake
    // here, though the reference itself takes it as a no-op.
    if (tokens <= 0) return Status::InvalidArgument("reference: tokens must be positive");
    return reference_forward(w_, x, tokens, routing, y, options_);
  }

  Status time_forward(int64_t tokens, int routing_sets, int iterations, uint64_t seed, double min_warmup_s,
                      double power_window_s, ForwardTiming* out) override {
    std::vector<float> x(size_t(std::max<int64_t>(tokens, 0) * w_.shape.hidden), 0.5f), y(x.size());
    return time_host_forward(
        w_.shape, tokens, routing_sets, iterations, seed, min_warmup_s, power_window_s,
        [&](const RoutingView& r) { return reference_forward(w_, x.data(), tokens, &r, y.data(), options_); }, out);
  }

 private:
  MoeWeightsView w_;  // the caller keeps the weights alive
  ReferenceOptions options_;
};

}  // namespace

Status create_reference_backend(const MoeWeightsView& weights, const ActivationOptions& activations,
                                std::unique_ptr<Backend>* out) {
  MXMOE_RETURN_IF_ERROR(validate_weights(weights));
  *out = std::make_unique<ReferenceBackend>(weights, activations);
  return Status::Ok();
}

}  // namespace mxmoe
