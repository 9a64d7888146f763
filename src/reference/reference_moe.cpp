// CPU reference MoE forward. Straightforward loops over the same MXFP4 bytes the
// kernels read; tokens are grouped per expert so each weight row is decoded once
// and reused for every token routed to that expert.
#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>
#include <omp.h>

#include "mxmoe/format.h"
#include "mxmoe/reference.h"
#include "reference/topk.h"

namespace mxmoe {
namespace {

int thread_count(const ReferenceOptions& opt) {
  return opt.threads > 0 ? opt.threads : omp_get_max_threads();
}

// Decodes row r of expert e of an MXFP4 matrix into `out` (cols floats): one
// scale per 32-block, two table lookups per byte. Same values as
// mxfp4_dequantize_row (products of a power of two and an E2M1 value are exact).
void decode_row(const MxMatrixView& m, int64_t e, int64_t r, float* out) {
  float e2m1[16];
  for (int c = 0; c < 16; ++c) e2m1[c] = e2m1_to_float(uint8_t(c));
  const uint8_t* codes = m.code_row(e, r);
  const uint8_t* scales = m.scale_row(e, r);
  for (int64_t b = 0; b < m.cols / kMxBlock; ++b) {
    const float scale = e8m0_to_float(scales[b]);
    for (int i = 0; i < kMxBlock / 2; ++i) {
      const uint8_t byte = codes[b * kMxBlock / 2 + i];
      out[b * kMxBlock + 2 * i] = e2m1[byte & 0xF] * scale;
      out[b * kMxBlock + 2 * i + 1] = e2m1[byte >> 4] * scale;
    }
  }
}

// Dot product with 8 interleaved partial sums (element i goes to sum i % 8; the
// sums are added in a fixed order), so the result does not depend on threads.
template <typename Acc>
Acc dot(const float* w, const Acc* x, int64_t n) {
  Acc part[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) part[j] += Acc(w[i + j]) * x[i + j];
  for (; i < n; ++i) part[i % 8] += Acc(w[i]) * x[i];
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

template <typename Acc>
void route(const MoeWeightsView& w, const float* x, int64_t tokens, Routing* out, int threads) {
  const int64_t E = w.shape.experts, H = w.shape.hidden, K = w.shape.topk;
  out->tokens = tokens;
  out->topk = K;
  out->ids.assign(size_t(tokens * K), 0);
  out->weights.assign(size_t(tokens * K), 0.0f);
  std::vector<float> router(static_cast<size_t>(E * H));
  for (int64_t i = 0; i < E * H; ++i) router[size_t(i)] = bf16_to_float(w.router_weight[i]);

#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<Acc> xt(x + t * H, x + (t + 1) * H);
    std::vector<Acc> logits(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e)
      logits[size_t(e)] = dot(router.data() + e * H, xt.data(), H) + Acc(bf16_to_float(w.router_bias[e]));
    select_topk(logits.data(), E, K, out->ids.data() + t * K, out->weights.data() + t * K);
  }
}

// Replaces x[0, n) (n % 32 == 0) by its MXFP8 value: E4M3 elements, one E8M0
// scale per 32 by `rule`. A row holding NaN or Inf, which the quantizer
// refuses, becomes all NaN, as it would poison a block on a GPU.
template <typename Acc>
void mxfp8_round_trip(Acc* x, int64_t n, MxScaleRule rule) {
  std::vector<float> v(x, x + n), out(static_cast<size_t>(n));
  std::vector<uint8_t> codes(static_cast<size_t>(n)), scales(static_cast<size_t>(n / kMxBlock));
  if (!mxfp8_quantize_row(v.data(), n, codes.data(), scales.data(), rule)) {
    std::fill(x, x + n, Acc(NAN));
    return;
  }
  mxfp8_dequantize_row(codes.data(), scales.data(), n, out.data());
  std::copy(out.begin(), out.end(), x);
}

// GPT-OSS SwiGLU on one gate/up pair.
template <typename Acc>
Acc swiglu(Acc gate, Acc up, const SwigluParams& p) {
  const Acc limit = Acc(p.limit), alpha = Acc(p.alpha);
  const Acc g = std::min(gate, limit);
  const Acc u = std::clamp(up, -limit, limit);
  return g / (Acc(1) + std::exp(-alpha * g)) * (u + Acc(1));
}

template <typename Acc>
void experts_forward(const MoeWeightsView& w, const float* x_in, int64_t tokens, const RoutingView& r,
                     float* y, int threads, const ActivationOptions& activations, bool bf16_products) {
  // A product as the GEMM writes it: bf16 (round to nearest even) or as summed.
  auto product = [bf16_products](Acc v) {
    return bf16_products ? Acc(bf16_to_float(float_to_bf16(float(v)))) : v;
  };
  const int64_t E = w.shape.experts, H = w.shape.hidden, I = w.shape.intermediate, K = r.topk;
  const bool mxfp8 = activations.format == ActivationFormat::kMxfp8;
  // MXFP8: each token's x once, before any expert reads it.
  std::vector<float> xq;
  if (mxfp8) {
    xq.assign(x_in, x_in + tokens * H);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t t = 0; t < tokens; ++t) mxfp8_round_trip(xq.data() + t * H, H, activations.mxfp8_scale_rule);
  }
  const float* x = mxfp8 ? xq.data() : x_in;

  // Pairs (token, slot) grouped by expert, in token order within an expert.
  std::vector<std::vector<int64_t>> pairs(static_cast<size_t>(E));
  for (int64_t p = 0; p < tokens * K; ++p) pairs[size_t(r.ids[p])].push_back(p);

  std::vector<Acc> out(static_cast<size_t>(tokens * K * H), Acc(0));  // per (token, slot) expert output
  for (int64_t e = 0; e < E; ++e) {
    const auto& list = pairs[size_t(e)];
    const int64_t n = int64_t(list.size());
    if (n == 0) continue;
    std::vector<Acc> xs(static_cast<size_t>(n * H));
    for (int64_t i = 0; i < n; ++i)
      std::copy(x + (list[size_t(i)] / K) * H, x + (list[size_t(i)] / K + 1) * H, xs.begin() + i * H);

    // GEMM1 + SwiGLU: each thread takes whole gate/up row pairs.
    std::vector<Acc> act(static_cast<size_t>(n * I));
#pragma omp parallel num_threads(threads)
    {
      std::vector<float> gate_row(static_cast<size_t>(H)), up_row(static_cast<size_t>(H));
#pragma omp for schedule(static)
      for (int64_t j = 0; j < I; ++j) {
        const int64_t gr = w13_gate_row(w.w13_layout, I, j), ur = w13_up_row(w.w13_layout, I, j);
        decode_row(w.w13, e, gr, gate_row.data());
        decode_row(w.w13, e, ur, up_row.data());
        const Acc bg = Acc(bf16_to_float(w.b13[e * w.b13_expert_stride + gr]));
        const Acc bu = Acc(bf16_to_float(w.b13[e * w.b13_expert_stride + ur]));
        for (int64_t i = 0; i < n; ++i) {
          const Acc g = product(dot(gate_row.data(), xs.data() + i * H, H)) + bg;
          const Acc u = product(dot(up_row.data(), xs.data() + i * H, H)) + bu;
          act[size_t(i * I + j)] = swiglu(g, u, w.swiglu);
        }
      }
    }
    if (mxfp8)  // each pair's SwiGLU output, as GEMM2 reads it
#pragma omp parallel for num_threads(threads) schedule(static)
      for (int64_t i = 0; i < n; ++i) mxfp8_round_trip(act.data() + i * I, I, activations.mxfp8_scale_rule);
    // GEMM2 + bias, unweighted; the routing weight is applied in the combine.
#pragma omp parallel num_threads(threads)
    {
      std::vector<float> row(static_cast<size_t>(I));
#pragma omp for schedule(static)
      for (int64_t h = 0; h < H; ++h) {
        decode_row(w.w2, e, h, row.data());
        const Acc b = Acc(bf16_to_float(w.b2[e * w.b2_expert_stride + h]));
        for (int64_t i = 0; i < n; ++i)
          out[size_t(list[size_t(i)] * H + h)] = product(dot(row.data(), act.data() + i * I, I)) + b;
      }
    }
  }
  // Combine in slot order: y[t] = sum_k weight[t, k] * out[t, k].
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      Acc s = 0;
      for (int64_t k = 0; k < K; ++k) s += Acc(r.weights[t * K + k]) * out[size_t((t * K + k) * H + h)];
      y[t * H + h] = float(s);
    }
  }
}

}  // namespace

Status reference_route(const MoeWeightsView& w, const float* x, int64_t tokens, Routing* out,
                       const ReferenceOptions& opt) {
  MXMOE_RETURN_IF_ERROR(validate_shape(w.shape));
  if (!w.router_weight || !w.router_bias)
    return Status::InvalidArgument("router: weights not present (pass routing instead)");
  if (tokens < 0 || (tokens > 0 && !x)) return Status::InvalidArgument("router: bad input");
  if (opt.fp64) route<double>(w, x, tokens, out, thread_count(opt));
  else route<float>(w, x, tokens, out, thread_count(opt));
  return Status::Ok();
}

Status reference_forward(const MoeWeightsView& w, const float* x, int64_t tokens,
                         const RoutingView* routing, float* y, const ReferenceOptions& opt) {
  MXMOE_RETURN_IF_ERROR(validate_weights(w));
  if (tokens < 0) return Status::InvalidArgument(fmt::format("tokens must be >= 0, got {}", tokens));
  if (tokens == 0) return Status::Ok();
  if (!x || !y) return Status::InvalidArgument("reference_forward: null x or y");
  Routing computed;
  RoutingView r;
  if (routing) {
    if (routing->tokens != tokens)
      return Status::InvalidArgument(fmt::format("routing has {} tokens, x has {}", routing->tokens, tokens));
    if (routing->topk <= 0 || routing->topk > w.shape.experts)
      return Status::InvalidArgument(fmt::format("routing topk {} outside [1, {}]", routing->topk, w.shape.experts));
    MXMOE_RETURN_IF_ERROR(validate_routing(*routing, w.shape.experts));
    r = *routing;
  } else {
    MXMOE_RETURN_IF_ERROR(reference_route(w, x, tokens, &computed, opt));
    r = computed.view();
  }
  if (opt.fp64) experts_forward<double>(w, x, tokens, r, y, thread_count(opt), opt.activations, opt.bf16_gemm_products);
  else experts_forward<float>(w, x, tokens, r, y, thread_count(opt), opt.activations, opt.bf16_gemm_products);
  return Status::Ok();
}

}  // namespace mxmoe
