// The Blackwell backends as Backend objects: the device image of a stacked
// plan ([up; gate] halves, the scales packed into the block-scaled layout
// expert by expert: src/cuda/prepare/device_image.h), driven through the
// shared device backend.
#include "cuda/blockscaled/blockscaled_backend.h"

#include <algorithm>

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "cuda/blockscaled/smxx_emulated_grouped_gemm.h"
#include "cuda/common/smxx_moe_kernels.h"
#include "mxmoe/format.h"
#ifdef MXMOE_WITH_SM100
#include "cuda/sm100/sm100_grouped_gemm.h"
#endif
#ifdef MXMOE_WITH_SM120
#include "cuda/sm120/sm120_grouped_gemm.h"
#endif

namespace mxmoe {
namespace blockscaled {
namespace {

Status cuda_check(cudaError_t err, const char* who, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Status::CudaError(fmt::format("{}: {}: {}", who, what, cudaGetErrorString(err)));
}

class BlockscaledForward final : public smxx::DeviceForward {
 public:
  BlockscaledForward(DeviceWeights w, GemmRunner gemm, std::shared_ptr<const smxx::ImageMemory> storage)
      : w_(w), gemm_(gemm), storage_(std::move(storage)) {}
  size_t workspace_bytes(int64_t tokens) const override { return blockscaled::workspace_bytes(w_, gemm_, tokens); }
  Status forward(const smxx::ForwardArgs& a, void* ws, size_t bytes, cudaStream_t stream) const override {
    return moe_forward(w_, gemm_, a, ws, bytes, stream);
  }

 private:
  DeviceWeights w_;
  GemmRunner gemm_;
  std::shared_ptr<const smxx::ImageMemory> storage_;
};

}  // namespace

const GroupedGemm* arch_gemm(BackendKind kind) {
#ifdef MXMOE_WITH_SM100
  if (kind == BackendKind::kSm100) return &sm100::grouped_gemm();
#endif
#ifdef MXMOE_WITH_SM120
  if (kind == BackendKind::kSm120) return &sm120::grouped_gemm();
#endif
  (void)kind;
  return nullptr;
}

Status check_device(BackendKind kind, bool emulate_gemm) {
  const char* who = backend_name(kind);
  if (kind != BackendKind::kSm100 && kind != BackendKind::kSm120)
    return Status::InvalidArgument(fmt::format("{}: not a block-scaled backend", who));
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return Status::Unsupported(fmt::format("{}: no CUDA device", who));
  }
  int dev = 0, major = 0, minor = 0;
  MXMOE_RETURN_IF_ERROR(cuda_check(cudaGetDevice(&dev), who, "cudaGetDevice"));
  MXMOE_RETURN_IF_ERROR(cuda_check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), who, "attribute"));
  MXMOE_RETURN_IF_ERROR(cuda_check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev), who, "attribute"));
  const int sm = 10 * major + minor;
  if (emulate_gemm) {
    if (sm < 80) return Status::Unsupported(fmt::format("{}: the emulated GEMM needs SM80+, device {} is SM{}", who, dev, sm));
    return Status::Ok();
  }
  const bool right = kind == BackendKind::kSm100 ? (sm == 100 || sm == 103) : (sm == 120 || sm == 121);
  if (!right)
    return Status::Unsupported(fmt::format("{}: needs {}, device {} is SM{}", who,
                                           kind == BackendKind::kSm100 ? "an SM100 or SM103 GPU" : "an SM120 or SM121 GPU",
                                           dev, sm));
  if (!arch_gemm(kind))
    return Status::Unsupported(fmt::format("{}: this build has no sm_{}a code (add {}a to CMAKE_CUDA_ARCHITECTURES and "
                                           "give CUTLASS's headers, MXMOE_CUTLASS_DIR)",
                                           who, kind == BackendKind::kSm100 ? 100 : 120,
                                           kind == BackendKind::kSm100 ? 100 : 120));
  return Status::Ok();
}

Status make_forward(BackendKind kind, const PreparedWeights& prep, const ActivationOptions& activations,
                    bool emulate_gemm, int64_t poison_margin_bytes, std::unique_ptr<smxx::DeviceForward>* out) {
  MXMOE_RETURN_IF_ERROR(check_device(kind, emulate_gemm));
  smxx::DeviceImage image;
  MXMOE_RETURN_IF_ERROR(
      smxx::upload_image(prep, ScaleImage::kBlockscaled, poison_margin_bytes, backend_name(kind), {}, &image));
  return make_forward(kind, image, activations, emulate_gemm, out);
}

Status make_forward(BackendKind kind, const smxx::DeviceImage& image, const ActivationOptions& activations,
                    bool emulate_gemm, std::unique_ptr<smxx::DeviceForward>* out) {
  const char* who = backend_name(kind);
  MXMOE_RETURN_IF_ERROR(check_device(kind, emulate_gemm));
  if (activations.format != ActivationFormat::kMxfp8)
    return Status::Unsupported(fmt::format("{}: its GEMMs consume mxfp8 activations, not {}", who,
                                           activation_format_name(activations.format)));
  const PreparePlan& plan = image.plan;
  if (plan.w13_layout != W13Layout::kStackedUpGate || plan.swizzle != WeightSwizzle::kNone ||
      plan.hidden_padded % 128 != 0 || plan.intermediate_padded % 128 != 0 || image.scales != ScaleImage::kBlockscaled)
    return Status::InvalidArgument(fmt::format("{}: weights must come from its plan ([up; gate], padded to 128)", who));
  GemmRunner gemm;
  gemm.gemm = emulate_gemm ? emulated_grouped_gemm() : *arch_gemm(kind);
  MXMOE_RETURN_IF_ERROR(smxx::sm_count(who, &gemm.sms));
  gemm.gemm_workspace = gemm.gemm.workspace_bytes(int(plan.shape.experts), gemm.sms);
  DeviceWeights w;
  w.who = who;
  w.shape = plan.shape;
  w.hidden_padded = plan.hidden_padded;
  w.intermediate_padded = plan.intermediate_padded;
  w.swiglu = image.swiglu;
  w.mxfp8_scale_rule = activations.mxfp8_scale_rule;
  w.w13_codes = image.piece[kW13Codes];
  w.w13_scales = image.piece[kW13Scales];
  w.b13 = reinterpret_cast<const uint16_t*>(image.piece[kB13]);
  w.w2_codes = image.piece[kW2Codes];
  w.w2_scales = image.piece[kW2Scales];
  w.b2 = reinterpret_cast<const uint16_t*>(image.piece[kB2]);
  if (image.has_router) {
    w.router_weight = reinterpret_cast<const uint16_t*>(image.piece[kRouterWeight]);
    w.router_bias = reinterpret_cast<const uint16_t*>(image.piece[kRouterBias]);
  }
  *out = std::make_unique<BlockscaledForward>(w, gemm, image.storage);
  return Status::Ok();
}

}  // namespace blockscaled

Status create_blockscaled_backend(BackendKind kind, const MoeWeightsView& weights,
                                  const ActivationOptions& activations, const BlockscaledOptions& options,
                                  std::unique_ptr<Backend>* out) {
  if (!out) return Status::InvalidArgument(fmt::format("{}: null output", backend_name(kind)));
  MXMOE_RETURN_IF_ERROR(validate_weights(weights));
  MXMOE_RETURN_IF_ERROR(blockscaled::check_device(kind, options.emulate_gemm));
  const int64_t margin = (std::max<int64_t>(options.device.poison_margin_bytes, 0) + 255) / 256 * 256;
  PreparedWeights prep;
  MXMOE_RETURN_IF_ERROR(prepare_weights(make_plan(kind, weights.shape), weights, &prep));
  std::unique_ptr<smxx::DeviceForward> forward;
  MXMOE_RETURN_IF_ERROR(blockscaled::make_forward(kind, prep, activations, options.emulate_gemm, margin, &forward));
  const bool has_router = !prep.weights.router_weight.empty();
  return smxx::make_device_backend(kind, weights.shape, has_router, margin, std::move(forward), out);
}

}  // namespace mxmoe
