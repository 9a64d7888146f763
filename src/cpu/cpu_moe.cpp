#include "cpu/cpu_moe.h"

#include <omp.h>

#include <fmt/format.h>

#include "cpu/cpu_work.h"
#include "reference/topk.h"

namespace mxmoe::cpu {
namespace {

// The workspace of a forward of T tokens, carved in 64-byte aligned pieces.
struct Workspace {
  QuantRows x, a;
  float* out = nullptr;     // [T k][Hp]
  float* logits = nullptr;  // [T][E] (router)
  int32_t* ids = nullptr;   // [T][k] (router)
  float* weights = nullptr;
  int32_t* offsets = nullptr;  // [E + 1]: expert e's pairs are order[offsets[e], offsets[e + 1])
  int32_t* cursor = nullptr;   // [E]
  int32_t* order = nullptr;    // [T k]
  size_t bytes = 0;

  // With base null, only counts the bytes.
  Workspace(uint8_t* base, const MoeShape& s, int64_t Hp, int64_t Ip, int64_t T, bool router) {
    const int64_t P = T * s.topk;
    auto take = [&](int64_t n) {
      uint8_t* p = base ? base + bytes : nullptr;
      bytes += (size_t(n) + 63) / 64 * 64;
      return p;
    };
    auto rows = [&](int64_t count, int64_t k) {
      QuantRows q;
      q.k = k;
      q.hi = reinterpret_cast<int8_t*>(take(count * k));
      q.lo = reinterpret_cast<int8_t*>(take(count * k));
      q.scale = reinterpret_cast<float*>(take(count * (k / 32) * 4));
      q.corr = reinterpret_cast<int32_t*>(take(count * (k / 32) * 4));
      return q;
    };
    x = rows(T, Hp);
    a = rows(P, Ip);
    out = reinterpret_cast<float*>(take(P * Hp * 4));
    if (router) {
      logits = reinterpret_cast<float*>(take(T * s.experts * 4));
      ids = reinterpret_cast<int32_t*>(take(P * 4));
      weights = reinterpret_cast<float*>(take(P * 4));
    }
    offsets = reinterpret_cast<int32_t*>(take((s.experts + 1) * 4));
    cursor = reinterpret_cast<int32_t*>(take(s.experts * 4));
    order = reinterpret_cast<int32_t*>(take(P * 4));
  }
};

// Pairs grouped by expert, in pair (= token) order within an expert.
void group_pairs(const int32_t* ids, int64_t pairs, int64_t experts, int32_t* offsets, int32_t* cursor,
                 int32_t* order) {
  for (int64_t e = 0; e <= experts; ++e) offsets[e] = 0;
  for (int64_t p = 0; p < pairs; ++p) ++offsets[ids[p] + 1];
  for (int64_t e = 0; e < experts; ++e) offsets[e + 1] += offsets[e];
  for (int64_t e = 0; e < experts; ++e) cursor[e] = offsets[e];
  for (int64_t p = 0; p < pairs; ++p) order[cursor[ids[p]]++] = int32_t(p);
}

}  // namespace

const Kernels& kernels_for(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAmx: return amx_kernels();
    case CpuIsa::kAvx512Vnni: return avx512_vnni_kernels();
    case CpuIsa::kAvx512: return avx512_kernels();
    case CpuIsa::kAvx2: return avx2_kernels();
    case CpuIsa::kScalar: break;
  }
  return scalar_kernels();
}

Status CpuMoe::create(const MoeWeightsView& weights, CpuIsa isa, std::unique_ptr<CpuMoe>* out) {
  if (!cpu_isa_supported(isa))
    return Status::Unsupported(fmt::format("cpu: the {} kernels need {}, which this CPU lacks", cpu_isa_name(isa),
                                           cpu_isa_features(isa)));
  // The kernels read an E8M0 byte as a float exponent, 0xFF as Inf, not NaN:
  // the packing checks the values (validate_weight_values' messages).
  const PreparePlan plan = make_plan(BackendKind::kCpu, weights.shape);
  PackedWeights packed;
  MXMOE_RETURN_IF_ERROR(pack_cpu_weights(plan, weights, &packed));
  auto m = std::unique_ptr<CpuMoe>(new CpuMoe());
  m->plan_ = plan;
  m->kernels_ = &kernels_for(isa);
  m->packed_ = std::move(packed);
  m->swiglu_ = weights.swiglu;
  *out = std::move(m);
  return Status::Ok();
}

Status CpuMoe::create(const MoeWeightsView& weights, std::unique_ptr<CpuMoe>* out) {
  CpuIsa isa;
  MXMOE_RETURN_IF_ERROR(choose_cpu_isa(&isa, nullptr));
  return create(weights, isa, out);
}

size_t CpuMoe::workspace_bytes(int64_t tokens) const {
  if (tokens <= 0) return 0;
  return Workspace(nullptr, shape(), plan_.hidden_padded, plan_.intermediate_padded, tokens, has_router()).bytes;
}

Status CpuMoe::forward(const LayerForwardArgs& args, void* workspace, size_t workspace_size, int threads) const {
  const MoeShape& s = shape();
  const int64_t T = args.tokens, E = s.experts, H = s.hidden, k = s.topk;
  const int64_t Hp = plan_.hidden_padded, Ip = plan_.intermediate_padded;
  if (T == 0) return Status::Ok();
  const int64_t stride = args.x_row_stride ? args.x_row_stride : H;
  if (stride < H) return Status::InvalidArgument(fmt::format("cpu: x_row_stride {} is below H = {}", stride, H));
  const bool router = args.topk_ids == nullptr;
  if (!router) MXMOE_RETURN_IF_ERROR(validate_routing({args.topk_ids, args.topk_weights, T, k}, E));
  const Workspace ws(static_cast<uint8_t*>(workspace), s, Hp, Ip, T, router);
  if (workspace_size < ws.bytes)
    return Status::InvalidArgument(fmt::format("cpu: workspace of {} bytes, {} tokens need {}", workspace_size, T, ws.bytes));
  const int32_t* ids = router ? ws.ids : args.topk_ids;
  const float* weights = router ? ws.weights : args.topk_weights;
  const Kernels& K = *kernels_;
  const PackedWeights& w = packed_;
  const Gemm1Args g1{{w.w13_codes.data(), w.w13_scales.data(), 2 * Ip / 16, Hp / 32}, w.b13.data(), 2 * Ip, swiglu_,
                     ws.x, k, ws.a};
  const Gemm2Args g2{{w.w2_codes.data(), w.w2_scales.data(), Hp / 16, Ip / 32}, w.b2.data(), Hp, ws.a, ws.out, Hp};

#pragma omp parallel num_threads(threads > 0 ? threads : omp_get_max_threads())
  {
    const int t = omp_get_thread_num(), n = omp_get_num_threads();
    const Range rows = share(T, t, n);
    K.quantize_bf16(args.x, stride, H, rows.begin, rows.end, ws.x);
    if (router) {
      const Range logits = share(T * E, t, n);
      K.router(args.x, stride, w.router_weight.data(), Hp, w.router_bias.data(), H, E, logits.begin, logits.end,
               ws.logits);
#pragma omp barrier
      for (int64_t i = rows.begin; i < rows.end; ++i)
        select_topk(ws.logits + i * E, E, k, ws.ids + i * k, ws.weights + i * k);
    }
#pragma omp barrier
#pragma omp single
    group_pairs(ids, T * k, E, ws.offsets, ws.cursor, ws.order);
    auto rows_of = [&](int64_t e) {
      return ExpertRows{e, ws.order + ws.offsets[e], ws.offsets[e + 1] - ws.offsets[e]};
    };
    for_each_span(ws.offsets, E, Ip / 32, t, n,
                  [&](const Span& sp) { K.gemm1(g1, rows_of(sp.expert), sp.begin, sp.end); });
#pragma omp barrier
    for_each_span(ws.offsets, E, Hp / 16, t, n,
                  [&](const Span& sp) { K.gemm2(g2, rows_of(sp.expert), sp.begin, sp.end); });
#pragma omp barrier
    K.combine(ws.out, Hp, weights, k, H, rows.begin, rows.end, args.y, args.y_dtype);
  }
  return Status::Ok();
}

}  // namespace mxmoe::cpu
