#include "api/cpu_layer.h"

#include "cpu/cpu_moe.h"

namespace mxmoe {
namespace {

class CpuLayer final : public MoeLayer {
 public:
  CpuLayer(std::string reason, std::unique_ptr<cpu::CpuMoe> moe)
      : MoeLayer(BackendKind::kCpu, std::move(reason), -1, moe->shape(), moe->has_router()), moe_(std::move(moe)) {}

  size_t forward_workspace_bytes(int64_t tokens) const override { return moe_->workspace_bytes(tokens); }

  Status forward(const LayerForwardArgs& a, void* workspace, size_t workspace_size,
                 CUstream_st* /*stream: the CPU forward is synchronous*/) const override {
    MXMOE_RETURN_IF_ERROR(check_common(a, workspace, workspace_size));
    return moe_->forward(a, workspace, workspace_size);
  }

 private:
  std::unique_ptr<cpu::CpuMoe> moe_;
};

}  // namespace

Status create_cpu_layer(std::string reason, const MoeWeightsView& weights, std::unique_ptr<MoeLayer>* out) {
  std::unique_ptr<cpu::CpuMoe> moe;
  MXMOE_RETURN_IF_ERROR(cpu::CpuMoe::create(weights, &moe));
  *out = std::make_unique<CpuLayer>(std::move(reason), std::move(moe));
  return Status::Ok();
}

}  // namespace mxmoe
