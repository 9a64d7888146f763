#include "prepare/device_image.h"

#include <cstring>

#include "mxmoe/format.h"
#include "prepare/blockscaled_scales.h"

namespace mxmoe {
namespace {

// Rows and K of the MXFP4 tensor behind a codes or scales piece (its E
// experts' dense rows; the plan's prefetch rows follow them).
struct PieceMatrix {
  int64_t rows, cols;
};
PieceMatrix piece_matrix(const PreparePlan& p, ImagePiece piece) {
  const int64_t E = p.shape.experts;
  if (piece == kW13Codes || piece == kW13Scales) return {E * 2 * p.intermediate_padded, p.hidden_padded};
  return {E * p.hidden_padded, p.intermediate_padded};
}

}  // namespace

ScaleImage scale_image_of(BackendKind kind) {
  return kind == BackendKind::kSm100 || kind == BackendKind::kSm120 ? ScaleImage::kBlockscaled
                                                                     : ScaleImage::kPlanOrder;
}

std::array<int64_t, kImagePieces> image_piece_bytes(const PreparePlan& p, ScaleImage scales, bool has_router) {
  const int64_t E = p.shape.experts, Hp = p.hidden_padded, Ip = p.intermediate_padded;
  std::array<int64_t, kImagePieces> b{};
  b[kW13Codes] = p.w13_codes_bytes;
  b[kW2Codes] = p.w2_codes_bytes;
  if (scales == ScaleImage::kBlockscaled) {
    b[kW13Scales] = E * blockscaled_scale_bytes(2 * Ip, Hp / kMxBlock);
    b[kW2Scales] = E * blockscaled_scale_bytes(Hp, Ip / kMxBlock);
  } else {
    b[kW13Scales] = p.w13_scales_bytes;
    b[kW2Scales] = p.w2_scales_bytes;
  }
  b[kB13] = E * 2 * Ip * 2;
  b[kB2] = E * Hp * 2;
  b[kRouterWeight] = has_router ? E * Hp * 2 : 0;
  b[kRouterBias] = has_router ? E * 2 : 0;
  return b;
}

Status host_image_piece(const PreparedWeights& prep, ScaleImage scales, ImagePiece piece, std::vector<uint8_t>* out) {
  const PreparePlan& plan = prep.plan;
  const MoeWeights& w = prep.weights;
  const auto sizes = image_piece_bytes(plan, scales, !w.router_weight.empty());
  out->assign(size_t(sizes[piece]), 0);
  auto copy16 = [&](const std::vector<uint16_t>& v) {
    std::memcpy(out->data(), v.data(), v.size() * 2);
    return Status::Ok();
  };
  const PieceMatrix m = piece_matrix(plan, piece);
  switch (piece) {
    case kW13Codes:
    case kW2Codes: {
      const std::vector<uint8_t>& dense = piece == kW13Codes ? w.w13_codes : w.w2_codes;
      // The swizzle covers the experts' rows; the prefetch rows stay neutral.
      std::memcpy(out->data(), dense.data(), dense.size());
      return swizzle_codes(plan.swizzle, dense.data(), m.rows, m.cols, out->data());
    }
    case kW13Scales:
    case kW2Scales: {
      const std::vector<uint8_t>& dense = piece == kW13Scales ? w.w13_scales : w.w2_scales;
      if (scales == ScaleImage::kPlanOrder) {
        std::memcpy(out->data(), dense.data(), dense.size());
        return swizzle_scales(plan.swizzle, dense.data(), m.rows, m.cols, out->data());
      }
      const int64_t E = plan.shape.experts, rows = m.rows / E, kb = m.cols / kMxBlock;
      const int64_t per = blockscaled_scale_bytes(rows, kb);
      for (int64_t e = 0; e < E; ++e)
        MXMOE_RETURN_IF_ERROR(
            pack_blockscaled_scales(dense.data() + e * rows * kb, rows, kb, kb, out->data() + e * per));
      return Status::Ok();
    }
    case kB13: return copy16(w.b13);
    case kB2: return copy16(w.b2);
    case kRouterWeight: return copy16(w.router_weight);
    case kRouterBias: return copy16(w.router_bias);
    case kImagePieces: break;
  }
  return Status::InvalidArgument("image: unknown piece");
}

}  // namespace mxmoe
