// The portable backend as a Backend object: prepares and uploads the weights
// (optionally inside poisoned margins) and drives them through the shared
// device backend (workspace, timing loop).
#include "cuda/portable/portable_backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "cuda/common/upload_pieces.h"
#include "cuda/portable/portable_launcher.h"
#include "mxmoe/format.h"
#include "mxmoe/prepare.h"

namespace mxmoe {
namespace {

Status cuda_check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Status::CudaError(fmt::format("portable: {}: {}", what, cudaGetErrorString(err)));
}
#define PORTABLE_CUDA(expr) MXMOE_RETURN_IF_ERROR(cuda_check((expr), #expr))

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

Status portable::upload_weights(const PreparedWeights& prep, int64_t poison_margin_bytes,
                                UploadedWeights* out) {
  const PreparePlan& plan = prep.plan;
  const MoeWeights& p = prep.weights;
  const size_t margin = size_t((std::max<int64_t>(poison_margin_bytes, 0) + 255) / 256 * 256);
  DeviceWeights& dw = out->view;
  dw = DeviceWeights{};
  dw.shape = plan.shape;
  dw.hidden_padded = plan.hidden_padded;
  dw.intermediate_padded = plan.intermediate_padded;
  dw.swiglu = p.swiglu;
  dw.w13_layout = plan.w13_layout;  // moe_forward checks it is one the kernels read
  if (plan.swizzle != WeightSwizzle::kMmaRowGroups16 && plan.swizzle != WeightSwizzle::kMmaRowTiles128)
    return Status::InvalidArgument("portable: the kernels read codes in fragment order; the plan has none");
  dw.swizzle = plan.swizzle;
  // One allocation holds every tensor, each inside its own poisoned margins.
  const void* src_of[] = {p.w13_codes.data(), p.w13_scales.data(), p.b13.data(), p.w2_codes.data(),
                          p.w2_scales.data(), p.b2.data(), p.router_weight.data(), p.router_bias.data()};
  std::vector<smxx::UploadPiece> pieces = {
      {p.w13_codes.size(), 0x77, false},       {p.w13_scales.size(), kE8M0NaN, false},
      {p.b13.size() * 2, 0, true},             {p.w2_codes.size(), 0x77, false},
      {p.w2_scales.size(), kE8M0NaN, false},   {p.b2.size() * 2, 0, true},
      {p.router_weight.size() * 2, 0, true},   {p.router_bias.size() * 2, 0, true},
  };
  auto storage = std::make_shared<smxx::DeviceBuffer>();
  MXMOE_RETURN_IF_ERROR(storage->reserve(smxx::lay_out_pieces(&pieces, margin)));
  uint8_t* dev = storage->as<uint8_t>();
  MXMOE_RETURN_IF_ERROR(smxx::write_margins(dev, pieces, margin, "portable"));
  // Each piece goes up on its own, so the host holds at most one staging chunk
  // beside the prepared weights (not a second copy of the whole layer).
  const int64_t E = plan.shape.experts;
  const struct { int64_t rows, cols; } code_shape[2] = {
      {E * 2 * plan.intermediate_padded, plan.hidden_padded},   // pieces[0], w13
      {E * plan.hidden_padded, plan.intermediate_padded}};      // pieces[3], w2
  std::vector<uint8_t> stage;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const smxx::UploadPiece& pc = pieces[i];
    if (pc.bytes == 0) continue;
    const bool codes = i == 0 || i == 3, scales = i == 1 || i == 4;
    if (!codes && !scales) {
      PORTABLE_CUDA(cudaMemcpy(dev + pc.off, src_of[i], pc.bytes, cudaMemcpyHostToDevice));
      continue;
    }
    // Codes and scales: the kernels read them in the plan's fragment orders;
    // swizzle whole 128-row tiles (or the last rows) at most 64 MB at a time.
    const auto [rows, cols] = code_shape[i < 3 ? 0 : 1];
    const int64_t row_bytes = codes ? cols / 2 : cols / kMxBlock;
    const int64_t chunk_rows = std::max<int64_t>(128, (int64_t(64) << 20) / row_bytes / 128 * 128);
    const uint8_t* src = static_cast<const uint8_t*>(src_of[i]);
    for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
      const int64_t nr = std::min(chunk_rows, rows - r0);
      stage.resize(size_t(nr * row_bytes));
      MXMOE_RETURN_IF_ERROR(codes ? swizzle_codes(plan.swizzle, src + r0 * row_bytes, nr, cols, stage.data())
                                  : swizzle_scales(plan.swizzle, src + r0 * row_bytes, nr, cols, stage.data()));
      PORTABLE_CUDA(cudaMemcpy(dev + pc.off + r0 * row_bytes, stage.data(), stage.size(), cudaMemcpyHostToDevice));
    }
  }
  const uint8_t* base = storage->as<uint8_t>();
  dw.w13_codes = base + pieces[0].off;
  dw.w13_scales = base + pieces[1].off;
  dw.b13 = reinterpret_cast<const uint16_t*>(base + pieces[2].off);
  dw.w2_codes = base + pieces[3].off;
  dw.w2_scales = base + pieces[4].off;
  dw.b2 = reinterpret_cast<const uint16_t*>(base + pieces[5].off);
  if (!p.router_weight.empty()) {
    dw.router_weight = reinterpret_cast<const uint16_t*>(base + pieces[6].off);
    dw.router_bias = reinterpret_cast<const uint16_t*>(base + pieces[7].off);
  }
  out->storage = std::move(storage);
  return Status::Ok();
}

portable::Overrides portable::overrides_from_env(Overrides o) {
  if (o.down_combine_warps == 0) {
    if (const char* v = std::getenv("MXMOE_DOWN_COMBINE_WARPS"))
      o.down_combine_warps = std::string_view(v) == "split" ? kDownCombineSplit : std::atoi(v);
  }
  if (o.gemm1_warps == 0)
    if (const char* v = std::getenv("MXMOE_DECODE_GEMM1_WARPS")) o.gemm1_warps = std::atoi(v);
  return o;
}

Status portable::make_forward(const PreparedWeights& prepared, int64_t poison_margin_bytes,
                              std::unique_ptr<smxx::DeviceForward>* out, const Overrides& overrides) {
  portable::UploadedWeights up;
  MXMOE_RETURN_IF_ERROR(portable::upload_weights(prepared, poison_margin_bytes, &up));
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
