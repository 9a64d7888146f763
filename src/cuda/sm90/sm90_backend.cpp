// The sm90 backend as a Backend object: prepares the weights with the sm90
// plan, uploads them as the portable backend does (same layout), and drives
// the sm90 forward through the shared device backend.
#include "cuda/sm90/sm90_backend.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "cuda/portable/portable_backend.h"
#include "cuda/sm90/sm90_launcher.h"
#include "mxmoe/prepare.h"

namespace mxmoe {
namespace {

Status cuda_check(cudaError_t err, const char* what) { return smxx::cuda_status(err, "sm90", what); }

sm90::Overrides overrides_from_env(sm90::Overrides o) {
  if (o.path == 0)
    if (const char* v = std::getenv("MXMOE_SM90_PATH")) {
      const std::string s(v);
      o.path = s == "decode" ? 1 : s == "wgmma" ? 2 : 0;
    }
  if (o.token_tile == 0)
    if (const char* v = std::getenv("MXMOE_SM90_TILE")) o.token_tile = std::atoi(v);
  o.decode = portable::overrides_from_env(o.decode);
  return o;
}

class Sm90Forward final : public smxx::DeviceForward {
 public:
  Sm90Forward(portable::UploadedWeights up, bool w13_large, bool w2_large, const sm90::Overrides& o)
      : storage_(std::move(up.storage)), overrides_(o) {
    w_.base = up.view;
    w_.w13_large_scales = w13_large;
    w_.w2_large_scales = w2_large;
  }
  size_t workspace_bytes(int64_t tokens) const override {
    return sm90::workspace_bytes(w_, tokens, sm90::choose_config(w_, tokens, overrides_));
  }
  Status forward(const smxx::ForwardArgs& a, void* ws, size_t bytes, cudaStream_t stream) const override {
    return sm90::moe_forward(w_, sm90::choose_config(w_, a.tokens, overrides_), a, ws, bytes, stream);
  }

 private:
  std::shared_ptr<const void> storage_;  // the allocations w_ points into
  sm90::DeviceWeights w_;
  sm90::Overrides overrides_;
};

}  // namespace

Status create_sm90_backend(const MoeWeightsView& weights, const Sm90Options& options, std::unique_ptr<Backend>* out) {
  if (!out) return Status::InvalidArgument("sm90: null output");
  MXMOE_RETURN_IF_ERROR(validate_weights(weights));
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return Status::Unsupported("sm90: no CUDA device");
  }
  int dev = 0, major = 0, minor = 0;
  MXMOE_RETURN_IF_ERROR(cuda_check(cudaGetDevice(&dev), "cudaGetDevice"));
  MXMOE_RETURN_IF_ERROR(cuda_check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), "attribute"));
  MXMOE_RETURN_IF_ERROR(cuda_check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev), "attribute"));
  if (major != 9 || minor != 0)
    return Status::Unsupported(fmt::format("sm90: needs an SM90 GPU, device {} is SM{}{}", dev, major, minor));
  const int64_t margin = (std::max<int64_t>(options.device.poison_margin_bytes, 0) + 255) / 256 * 256;
  PreparedWeights prep;
  MXMOE_RETURN_IF_ERROR(prepare_weights(make_plan(BackendKind::kSm90, weights.shape), weights, &prep));
  std::unique_ptr<smxx::DeviceForward> forward;
  MXMOE_RETURN_IF_ERROR(sm90::make_forward(prep, margin, options.overrides, &forward));
  const bool has_router = !prep.weights.router_weight.empty();
  return smxx::make_device_backend(BackendKind::kSm90, weights.shape, has_router, margin, std::move(forward), out);
}

Status sm90::make_forward(const PreparedWeights& prepared, int64_t poison_margin_bytes, const Overrides& overrides,
                          std::unique_ptr<smxx::DeviceForward>* out) {
  smxx::DeviceImage image;
  MXMOE_RETURN_IF_ERROR(smxx::upload_image(prepared, ScaleImage::kPlanOrder, poison_margin_bytes, "sm90", {}, &image));
  return make_forward(image, overrides, out);
}

Status sm90::make_forward(const smxx::DeviceImage& image, const Overrides& overrides,
                          std::unique_ptr<smxx::DeviceForward>* out) {
  MXMOE_RETURN_IF_ERROR(init_kernels());
  portable::UploadedWeights up;
  MXMOE_RETURN_IF_ERROR(portable::weights_from_image(image, &up));
  *out = std::make_unique<Sm90Forward>(std::move(up), image.w13_large_scales, image.w2_large_scales,
                                       overrides_from_env(overrides));
  return Status::Ok();
}

Status create_sm90_backend(const MoeWeightsView& weights, std::unique_ptr<Backend>* out) {
  return create_sm90_backend(weights, Sm90Options{}, out);
}

}  // namespace mxmoe
