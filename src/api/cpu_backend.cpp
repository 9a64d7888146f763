#include "api/cpu_backend.h"

#include <random>
#include <vector>

#include "api/host_timing.h"
#include "cpu/cpu_moe.h"
#include "mxmoe/format.h"
#include "mxmoe/layer.h"

namespace mxmoe {
namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(std::unique_ptr<cpu::CpuMoe> moe) : moe_(std::move(moe)) {}
  BackendKind kind() const override { return BackendKind::kCpu; }

  // x rounded to bf16, which the kernels consume; y in fp32.
  Status forward_host(const float* x, int64_t tokens, const RoutingView* routing, float* y) override {
    if (tokens <= 0) return Status::InvalidArgument("cpu: tokens must be positive");
    std::vector<uint16_t> xb(size_t(tokens * moe_->shape().hidden));
    for (size_t i = 0; i < xb.size(); ++i) xb[i] = float_to_bf16(x[i]);
    std::vector<uint8_t> ws(moe_->workspace_bytes(tokens));
    LayerForwardArgs a{.x = xb.data(), .tokens = tokens, .y = y, .y_dtype = OutputDtype::kFp32};
    if (routing) {
      if (routing->tokens != tokens || routing->topk != moe_->shape().topk)
        return Status::InvalidArgument("cpu: the routing is not [tokens, topk]");
      a.topk_ids = routing->ids;
      a.topk_weights = routing->weights;
    }
    return moe_->forward(a, ws.data(), ws.size());
  }

  // x: N(0, 1) in bf16 from `seed`; y in bf16, as an engine's layer.
  Status time_forward(int64_t tokens, int routing_sets, int iterations, uint64_t seed, double min_warmup_s,
                      double power_window_s, ForwardTiming* out) override {
    const int64_t H = moe_->shape().hidden, T = std::max<int64_t>(tokens, 0);
    std::vector<uint16_t> x(size_t(T * H)), y(x.size());
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal;
    for (auto& v : x) v = float_to_bf16(normal(rng));
    std::vector<uint8_t> ws(moe_->workspace_bytes(T));
    return time_host_forward(
        moe_->shape(), tokens, routing_sets, iterations, seed, min_warmup_s, power_window_s,
        [&](const RoutingView& r) {
          const LayerForwardArgs a{.x = x.data(), .tokens = tokens, .topk_ids = r.ids, .topk_weights = r.weights,
                                   .y = y.data()};
          return moe_->forward(a, ws.data(), ws.size());
        },
        out);
  }

 private:
  std::unique_ptr<cpu::CpuMoe> moe_;
};

}  // namespace

Status create_cpu_backend(const MoeWeightsView& weights, std::unique_ptr<Backend>* out) {
  std::unique_ptr<cpu::CpuMoe> moe;
  MXMOE_RETURN_IF_ERROR(cpu::CpuMoe::create(weights, &moe));
  *out = std::make_unique<CpuBackend>(std::move(moe));
  return Status::Ok();
}

}  // namespace mxmoe
