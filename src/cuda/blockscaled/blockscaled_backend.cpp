// The Blackwell backends as Backend objects: the weights of a stacked plan
// ([up; gate] halves) with their scales packed into the block-scaled layout
// expert by expert, uploaded in one allocation (optionally inside poisoned
// margins), and driven through the shared device backend.
#include "cuda/blockscaled/blockscaled_backend.h"

#include <algorithm>
#include <vector>

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "cuda/blockscaled/smxx_emulated_grouped_gemm.h"
#include "cuda/common/smxx_moe_kernels.h"
#include "cuda/common/upload_pieces.h"
#include "mxmoe/format.h"
#include "prepare/blockscaled_scales.h"
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

// The dense scales ([E][rows][k_blocks], then the plan's neutral rows) packed
// expert by expert.
Status packed_scales(const std::vector<uint8_t>& dense, int64_t E, int64_t rows, int64_t k_blocks,
                     std::vector<uint8_t>* out) {
  const int64_t per = blockscaled_scale_bytes(rows, k_blocks);
  if (int64_t(dense.size()) < E * rows * k_blocks)
    return Status::InvalidArgument("block-scaled scales: fewer dense scales than the plan's experts hold");
  out->resize(size_t(E * per));
  for (int64_t e = 0; e < E; ++e)
    MXMOE_RETURN_IF_ERROR(pack_blockscaled_scales(dense.data() + e * rows * k_blocks, rows, k_blocks, k_blocks,
                                                  out->data() + e * per));
  return Status::Ok();
}

class BlockscaledForward final : public smxx::DeviceForward {
 public:
  BlockscaledForward(DeviceWeights w, GemmRunner gemm, std::shared_ptr<smxx::DeviceBuffer> storage)
      : w_(w), gemm_(gemm), storage_(std::move(storage)) {}
  size_t workspace_bytes(int64_t tokens) const override { return blockscaled::workspace_bytes(w_, gemm_, tokens); }
  Status forward(const smxx::ForwardArgs& a, void* ws, size_t bytes, cudaStream_t stream) const override {
    return moe_forward(w_, gemm_, a, ws, bytes, stream);
  }

 private:
  DeviceWeights w_;
  GemmRunner gemm_;
  std::shared_ptr<smxx::DeviceBuffer> storage_;
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
  const char* who = backend_name(kind);
  MXMOE_RETURN_IF_ERROR(check_device(kind, emulate_gemm));
  if (activations.format != ActivationFormat::kMxfp8)
    return Status::Unsupported(fmt::format("{}: its GEMMs consume mxfp8 activations, not {}", who,
                                           activation_format_name(activations.format)));
  const PreparePlan& plan = prep.plan;
  if (plan.w13_layout != W13Layout::kStackedUpGate || plan.swizzle != WeightSwizzle::kNone ||
      plan.hidden_padded % 128 != 0 || plan.intermediate_padded % 128 != 0)
    return Status::InvalidArgument(fmt::format("{}: weights must come from its plan ([up; gate], padded to 128)", who));
  const MoeWeights& p = prep.weights;
  const int64_t E = plan.shape.experts, Hp = plan.hidden_padded, Ip = plan.intermediate_padded;
  GemmRunner gemm;
  gemm.gemm = emulate_gemm ? emulated_grouped_gemm() : *arch_gemm(kind);
  MXMOE_RETURN_IF_ERROR(smxx::sm_count(who, &gemm.sms));
  gemm.gemm_workspace = gemm.gemm.workspace_bytes(int(E), gemm.sms);

  // Only the scales change layout (packed expert by expert); the other
  // tensors go up straight from the prepared weights, so the host holds no
  // second copy of the codes.
  std::vector<uint8_t> w13_scales, w2_scales;
  MXMOE_RETURN_IF_ERROR(packed_scales(p.w13_scales, E, 2 * Ip, Hp / kMxBlock, &w13_scales));
  MXMOE_RETURN_IF_ERROR(packed_scales(p.w2_scales, E, Hp, Ip / kMxBlock, &w2_scales));
  const void* src_of[] = {p.w13_codes.data(), w13_scales.data(), p.b13.data(), p.w2_codes.data(),
                          w2_scales.data(),   p.b2.data(),       p.router_weight.data(), p.router_bias.data()};
  std::vector<smxx::UploadPiece> pieces = {
      {p.w13_codes.size(), 0x77, false},     {w13_scales.size(), kE8M0NaN, false}, {p.b13.size() * 2, 0, true},
      {p.w2_codes.size(), 0x77, false},      {w2_scales.size(), kE8M0NaN, false},  {p.b2.size() * 2, 0, true},
      {p.router_weight.size() * 2, 0, true}, {p.router_bias.size() * 2, 0, true}};
  const size_t margin = size_t((std::max<int64_t>(poison_margin_bytes, 0) + 255) / 256 * 256);
  auto storage = std::make_shared<smxx::DeviceBuffer>();
  MXMOE_RETURN_IF_ERROR(storage->reserve(smxx::lay_out_pieces(&pieces, margin)));
  uint8_t* dev = storage->as<uint8_t>();
  MXMOE_RETURN_IF_ERROR(smxx::write_margins(dev, pieces, margin, who));
  for (size_t i = 0; i < pieces.size(); ++i)
    if (pieces[i].bytes)
      MXMOE_RETURN_IF_ERROR(cuda_check(
          cudaMemcpy(dev + pieces[i].off, src_of[i], pieces[i].bytes, cudaMemcpyHostToDevice), who, "upload"));
  DeviceWeights w;
  w.who = who;
  w.shape = plan.shape;
  w.hidden_padded = Hp;
  w.intermediate_padded = Ip;
  w.swiglu = p.swiglu;
  w.mxfp8_scale_rule = activations.mxfp8_scale_rule;
  w.w13_codes = dev + pieces[0].off;
  w.w13_scales = dev + pieces[1].off;
  w.b13 = reinterpret_cast<const uint16_t*>(dev + pieces[2].off);
  w.w2_codes = dev + pieces[3].off;
  w.w2_scales = dev + pieces[4].off;
  w.b2 = reinterpret_cast<const uint16_t*>(dev + pieces[5].off);
  if (!p.router_weight.empty()) {
    w.router_weight = reinterpret_cast<const uint16_t*>(dev + pieces[6].off);
    w.router_bias = reinterpret_cast<const uint16_t*>(dev + pieces[7].off);
  }
  *out = std::make_unique<BlockscaledForward>(w, gemm, std::move(storage));
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
