// The portable backend as a Backend object: prepares and uploads the weights
// (optionally inside poisoned margins) and drives them through the shared
// device backend (workspace, timing loop).
#include "cuda/portable/portable_backend.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "cuda/prepare/device_image.h"
#include "cuda/portable/portable_launcher.h"
#include "mxmoe/format.h"
#include "mxmoe/prepare.h"

namespace mxmoe {
namespace {

Status cuda_check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Status::CudaError(fmt::format("portable: {}: {}", what, cudaGetErrorString(err)));
}

// The portable forward over weights uploaded by upload_weights.
class PortableForward final : public smxx::DeviceForward {
 public:
  PortableForward(portable::UploadedWeights weights, const portable::Overrides& o)
      : w_(std::move(weights)), overrides_(o) {}
  size_t workspace_bytes(int64_t tokens) const override { return portable::workspace_bytes(w_.view, tokens); }
  Status forward(const smxx::ForwardArgs& a, void* ws, size_t bytes, cudaStream_t stream) const override {
    return portable::moe_forward(w_.view, a, ws, bytes, stream, overrides_);
  }

 private:
  portable::UploadedWeights w_;
  portable::Overrides overrides_;
};

}  // namespace

Status portable::weights_from_image(const smxx::DeviceImage& img, UploadedWeights* out) {
  const PreparePlan& plan = img.plan;
  if (plan.swizzle != WeightSwizzle::kMmaRowGroups16 && plan.swizzle != WeightSwizzle::kMmaRowTiles128)
    return Status::InvalidArgument("portable: the kernels read codes in fragment order; the plan has none");
  if (img.scales != ScaleImage::kPlanOrder)
    return Status::InvalidArgument("portable: the kernels read scales in the plan's order");
  DeviceWeights& dw = out->view;
  dw = DeviceWeights{};
  dw.shape = plan.shape;
  dw.hidden_padded = plan.hidden_padded;
  dw.intermediate_padded = plan.intermediate_padded;
  dw.swiglu = img.swiglu;
  dw.w13_layout = plan.w13_layout;  // moe_forward checks it is one the kernels read
  dw.swizzle = plan.swizzle;
  dw.w13_codes = img.piece[kW13Codes];
  dw.w13_scales = img.piece[kW13Scales];
  dw.b13 = reinterpret_cast<const uint16_t*>(img.piece[kB13]);
  dw.w2_codes = img.piece[kW2Codes];
  dw.w2_scales = img.piece[kW2Scales];
  dw.b2 = reinterpret_cast<const uint16_t*>(img.piece[kB2]);
  if (img.has_router) {
    dw.router_weight = reinterpret_cast<const uint16_t*>(img.piece[kRouterWeight]);
    dw.router_bias = reinterpret_cast<const uint16_t*>(img.piece[kRouterBias]);
  }
  out->storage = img.storage;
  return Status::Ok();
}

portable::Overrides portable::overrides_from_env(Overrides o) {
  if (o.down_combine_warps == 0) {
    if (const char* v = std::getenv("MXMOE_DOWN_COMBINE_WARPS"))
      o.down_combine_warps = std::string_view(v) == "split" ? kDownCombineSplit : std::atoi(v);
  }
  if (o.gemm1_warps == 0)
    if (const char* v = std::getenv("MXMOE_DECODE_GEMM1_WARPS")) o.gemm1_warps = std::atoi(v);
  if (o.fused_decode == 0)
    if (const char* v = std::getenv("MXMOE_FUSED_DECODE"))
      o.fused_decode = std::string_view(v) == "1" ? kFusedDecodeOn : std::string_view(v) == "0" ? kFusedDecodeOff : 0;
  return o;
}

Status portable::make_forward(const PreparedWeights& prepared, int64_t poison_margin_bytes,
                              std::unique_ptr<smxx::DeviceForward>* out, const Overrides& overrides) {
  smxx::DeviceImage image;
  MXMOE_RETURN_IF_ERROR(smxx::upload_image(prepared, ScaleImage::kPlanOrder, poison_margin_bytes, "portable", {}, &image));
  return make_forward(image, out, overrides);
}

Status portable::make_forward(const smxx::DeviceImage& image, std::unique_ptr<smxx::DeviceForward>* out,
                              const Overrides& overrides) {
  portable::UploadedWeights up;
  MXMOE_RETURN_IF_ERROR(portable::weights_from_image(image, &up));
  *out = std::make_unique<PortableForward>(std::move(up), overrides_from_env(overrides));
  return Status::Ok();
}

Status create_portable_backend(const MoeWeightsView& weights, const PortableOptions& options,
                               std::unique_ptr<Backend>* out) {
  if (!out) return Status::InvalidArgument("portable: null output");
  MXMOE_RETURN_IF_ERROR(validate_weights(weights));
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return Status::Unsupported("portable: no CUDA device");
  }
  int dev = 0, major = 0;
  MXMOE_RETURN_IF_ERROR(cuda_check(cudaGetDevice(&dev), "cudaGetDevice"));
  MXMOE_RETURN_IF_ERROR(cuda_check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), "attribute"));
  if (major < 8) return Status::Unsupported(fmt::format("portable: needs SM80+, device is SM{}x", major));
  const int64_t margin = (std::max<int64_t>(options.device.poison_margin_bytes, 0) + 255) / 256 * 256;
  PreparedWeights prep;
  MXMOE_RETURN_IF_ERROR(prepare_weights(make_plan(BackendKind::kPortable, weights.shape), weights, &prep));
  std::unique_ptr<smxx::DeviceForward> forward;
  MXMOE_RETURN_IF_ERROR(portable::make_forward(prep, margin, &forward, options.overrides));
  const bool has_router = !prep.weights.router_weight.empty();
  return smxx::make_device_backend(BackendKind::kPortable, weights.shape, has_router, margin, std::move(forward), out);
}

Status create_portable_backend(const MoeWeightsView& weights, std::unique_ptr<Backend>* out) {
  return create_portable_backend(weights, PortableOptions{}, out);
}

}  // namespace mxmoe
