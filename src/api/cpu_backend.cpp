#include "api/cpu_backend.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "mxmoe/reference.h"

namespace mxmoe {
namespace {

class CpuBackend final : public Backend {
 public:
  CpuBackend(const MoeWeightsView& w, const ActivationOptions& a) : w_(w) { options_.activations = a; }
  BackendKind kind() const override { return BackendKind::kCpu; }

  Status forward_host(const float* x, int64_t tokens, const RoutingView* routing,
                      float* y) override {
    // As the GPU backends: a forward of no tokens is a caller's mistake here,
    // though the reference itself takes it as a no-op.
    if (tokens <= 0) return Status::InvalidArgument("cpu: tokens must be positive");
    return reference_forward(w_, x, tokens, routing, y, options_);
  }

  Status time_forward(int64_t tokens, int routing_sets, int iterations, uint64_t seed, double /*min_warmup_s*/,
                      double power_window_s, ForwardTiming* out) override {
    if (tokens <= 0 || !out) return Status::InvalidArgument("cpu: timing needs positive tokens and an output");
    const MoeShape& s = w_.shape;
    std::vector<Routing> sets;
    for (int i = 0; i < std::max(routing_sets, 1); ++i)
      sets.push_back(make_random_routing(tokens, s.experts, s.topk, seed + uint64_t(i)));
    std::vector<float> x(size_t(tokens * s.hidden), 0.5f), y(x.size());
    std::vector<double> times;
    for (int it = 0; it < std::max(iterations, 1); ++it) {
      const RoutingView r = sets[size_t(it) % sets.size()].view();
      const auto t0 = std::chrono::steady_clock::now();
      MXMOE_RETURN_IF_ERROR(reference_forward(w_, x.data(), tokens, &r, y.data(), options_));
      times.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(times.begin(), times.end());
    *out = ForwardTiming{};
    out->median_us = times[times.size() / 2];
    out->min_us = times.front();
    out->iterations = int(times.size());
    if (power_window_s > 0) out->power_note = "the CPU backend measures no board power";
    return Status::Ok();
  }

 private:
  MoeWeightsView w_;  // the caller keeps the weights alive
  ReferenceOptions options_;
};

}  // namespace

Status create_cpu_backend(const MoeWeightsView& weights, const ActivationOptions& activations,
                          std::unique_ptr<Backend>* out) {
  MXMOE_RETURN_IF_ERROR(validate_weights(weights));
  *out = std::make_unique<CpuBackend>(weights, activations);
  return Status::Ok();
}

}  // namespace mxmoe
