// The CUDA MoeLayer: a backend's DeviceForward over weights uploaded to one
// device, behind the checks an engine's call needs (where each pointer lives;
// MoeLayer::check_common the rest) and a guard that launches on the layer's device.
#include "api/device_layer.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "cuda/common/device_backend.h"
#include "cuda/common/eager_graphs.h"
#include "cuda/common/image_forward.h"
#include "cuda/common/layer_device.h"
#include "cuda/prepare/device_image.h"
#include "cuda/prepare/staged_weights.h"
#include "mxmoe/prepare.h"

namespace mxmoe {
namespace {

using smxx::DeviceGuard;

class DeviceLayer final : public MoeLayer {
 public:
  DeviceLayer(BackendKind kind, std::string reason, int device, const MoeShape& shape, bool has_router,
              size_t device_bytes, std::unique_ptr<smxx::DeviceForward> forward)
      : MoeLayer(kind, std::move(reason), device, shape, has_router),
        device_bytes_(device_bytes),
        forward_(std::move(forward)),
        graphs_(records_launches(kind) ? std::make_unique<smxx::EagerGraphs>() : nullptr) {}

  ~DeviceLayer() override {
    DeviceGuard guard;  // the weights and graphs are freed on their device
    (void)guard.enter(device(), who());
    graphs_.reset();
    forward_.reset();
  }

  size_t device_bytes() const override { return device_bytes_; }

  size_t forward_workspace_bytes(int64_t tokens) const override {
    return tokens > 0 ? forward_->workspace_bytes(tokens) : 0;
  }

  Status forward(const LayerForwardArgs& a, void* workspace, size_t workspace_size,
                 CUstream_st* stream) const override {
    MXMOE_RETURN_IF_ERROR(check_common(a, workspace, workspace_size));
    const int64_t T = a.tokens;
    if (T == 0) return Status::Ok();
    MXMOE_RETURN_IF_ERROR(check_on_device("x", a.x));
    MXMOE_RETURN_IF_ERROR(check_on_device("y", a.y));
    MXMOE_RETURN_IF_ERROR(check_on_device("workspace", workspace));
    if (a.topk_ids) {
      MXMOE_RETURN_IF_ERROR(check_on_device("topk_ids", a.topk_ids));
      MXMOE_RETURN_IF_ERROR(check_on_device("topk_weights", a.topk_weights));
    }
    DeviceGuard guard;
    MXMOE_RETURN_IF_ERROR(guard.enter(device(), who()));
    const smxx::ForwardArgs f = smxx::forward_args_of(a);
    if (!graphs_) return forward_->forward(f, workspace, workspace_size, stream);
    smxx::LaunchList launches;
    {
      smxx::LaunchRecording recording(&launches);
      MXMOE_RETURN_IF_ERROR(forward_->forward(f, workspace, workspace_size, stream));
    }
    return graphs_->enqueue(launches, stream, who());
  }

 private:
  const char* who() const { return backend_name(backend()); }

  // Backends whose forwards launch every kernel through smxx::launch_kernel,
  // so that a recording holds all of them (the Blackwell GEMMs launch through
  // CUTLASS).
  static bool records_launches(BackendKind kind) {
    return kind == BackendKind::kPortable || kind == BackendKind::kSm90;
  }

  Status check_on_device(const char* name, const void* ptr) const {
    return smxx::check_on_device(who(), name, ptr, device());
  }

  size_t device_bytes_;
  std::unique_ptr<smxx::DeviceForward> forward_;
  std::unique_ptr<smxx::EagerGraphs> graphs_;  // null: the forward launches directly
};

}  // namespace

Status create_device_layer(BackendKind kind, std::string reason, const MoeWeightsView& weights,
                           const LayerOptions& options, std::unique_ptr<MoeLayer>* out) {
  const char* who = backend_name(kind);
  const int device = options.device;
  DeviceGuard guard;
  MXMOE_RETURN_IF_ERROR(guard.enter(device, who));
  // The weights are prepared on the device (src/cuda/prepare/): straight from
  // the caller's device memory, or from host memory staged there first.
  const smxx::MemorySource memory{options.allocator, device, options.stream};
  smxx::StagedWeights staged;
  MXMOE_RETURN_IF_ERROR(smxx::stage_weights(weights, memory, who, &staged));
  smxx::DeviceImage image;
  MXMOE_RETURN_IF_ERROR(
      smxx::prepare_image(make_plan(kind, weights.shape), scale_image_of(kind), staged.view, 0, who, memory, &image));
  staged.copy.release();  // the staging copy goes before the forward is built
  std::unique_ptr<smxx::DeviceForward> forward;
  MXMOE_RETURN_IF_ERROR(smxx::make_image_forward(kind, image, options.activations, &forward));
  size_t bytes = 0;
  for (const smxx::DeviceBuffer& piece : *image.storage) bytes += piece.bytes();
  *out = std::make_unique<DeviceLayer>(kind, std::move(reason), device, weights.shape, image.has_router, bytes,
                                       std::move(forward));
  return Status::Ok();
}

}  // namespace mxmoe
