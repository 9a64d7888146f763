// The CPU kernels, written once over the 16-lane operations `Ops` of one
// instruction set (cpu_avx512_ops.h; the Ops structs of
// cpu_avx2_kernels.cpp and cpu_scalar_kernels.cpp).
// A lane is a row of a 16-row weight group (kCpuRowGroups16): a group's
// block of 32 K is decoded once and dotted with each token of a register
// tile, so a decoded weight is used by up to Ops::kTile tokens.
//
// Included only by the cpu_<isa>_kernels.cpp files, each compiled with its
// own -m flags: everything here has internal linkage, so that the linker
// never merges a function compiled for one instruction set into the code of
// another (inline functions with external linkage are merged by name); a
// CTest checks that each path's object exports only its kernel table
// (scripts/check-isa-objects.sh).
//
// Every Ops gives the same results bit for bit: integer block sums are
// exact, and the float operations (IEEE add, mul, div, fma with one
// rounding, x86's min/max and round-to-nearest-even conversions) are the
// same, in the same order, with the same reduction trees.
#pragma once

#include <cstdint>
#include <cstring>

#include "cpu/cpu_kernels.h"

namespace mxmoe::cpu {
namespace {

inline RowPtr row_of(const QuantRows& q, int64_t r) {
  return {q.hi + r * q.k, q.lo + r * q.k, q.scale + r * (q.k / 32), q.corr + r * (q.k / 32)};
}

template <class Ops>
struct Impl {
  using F = typename Ops::F;
  using I = typename Ops::I;
  static constexpr int kTile = Ops::kTile;
  // Each block's codes and scales are asked for this far ahead (16 blocks):
  // the hardware prefetchers alone left a thread's stream partly waiting on
  // DRAM. gpt-oss-120b-shaped experts at T = 1, avx512_vnni, 2 threads (EPYC
  // Zen 4 host, 2026-12-02; best / median of six rounds of 200 forwards):
  // none 1.39 / 1.93 ms, 1 KiB 1.32 / 1.79, 4 KiB 1.14 / 1.68, 16 KiB 1.28 / 1.70.
  static constexpr int64_t kPrefetchBytes = 4096;

  // e^z for the SwiGLU's sigmoid: Cephes' expf (range reduction by ln 2 in
  // two parts, a degree-5 polynomial; at most 8.1e-8 off the double exp,
  // relative, over the range), with plain multiplies and adds so that every
  // path rounds alike. z is clamped to
  // [-87, 88], where 2^n stays a normal float; NaN passes the clamps.
  static F exp(F z) {
    z = Ops::max(Ops::set1(-87.0f), Ops::min(Ops::set1(88.0f), z));
    const F n = Ops::floor(Ops::add(Ops::mul(z, Ops::set1(1.44269504088896341f)), Ops::set1(0.5f)));
    const F r = Ops::sub(Ops::sub(z, Ops::mul(n, Ops::set1(0.693359375f))), Ops::mul(n, Ops::set1(-2.12194440e-4f)));
    F p = Ops::set1(1.9875691500e-4f);
    for (const float c : {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f})
      p = Ops::add(Ops::mul(p, r), Ops::set1(c));
    const F y = Ops::add(Ops::add(Ops::mul(Ops::mul(p, r), r), r), Ops::set1(1.0f));
    const F two_n = Ops::from_bits(Ops::template slli<23>(Ops::iadd(Ops::cvt_round(n), Ops::iset1(127))));
    return Ops::mul(y, two_n);
  }

  // GPT-OSS SwiGLU: min(gate, limit) * sigmoid(alpha g) * (clamp(up) + 1).
  // min / max take the data second, so a NaN passes.
  static F swiglu(F gate, F up, const SwigluParams& p) {
    const F limit = Ops::set1(p.limit), one = Ops::set1(1.0f);
    const F g = Ops::min(limit, gate);
    const F u = Ops::max(Ops::set1(-p.limit), Ops::min(limit, up));
    const F e = exp(Ops::mul(Ops::set1(-p.alpha), g));
    return Ops::mul(Ops::div(g, Ops::add(one, e)), Ops::add(u, one));
  }

  // Block `block` of row `row` of q from 32 values (see QuantRows).
  static void quantize_block(F v0, F v1, const QuantRows& q, int64_t row, int64_t block) {
    int8_t* hi = q.hi + row * q.k + 32 * block;
    int8_t* lo = q.lo + row * q.k + 32 * block;
    float& scale = q.scale[row * (q.k / 32) + block];
    int32_t& corr = q.corr[row * (q.k / 32) + block];
    // |v| as integers: NaN and Inf order above every finite value.
    const I magnitude = Ops::iset1(0x7FFFFFFF);
    const int32_t amax_bits =
        Ops::hmax(Ops::imax(Ops::iand(Ops::to_bits(v0), magnitude), Ops::iand(Ops::to_bits(v1), magnitude)));
    // Below 2^-100 a block is flushed to zero: 32512 / amax would overflow
    // near 2^-113, and such values lie 100 binades below activations of O(1).
    constexpr int32_t kTinyBits = (127 - 100) << 23, kInfBits = 0x7F800000;
    if (amax_bits < kTinyBits || amax_bits >= kInfBits) {
      std::memset(hi, 0, 32);
      std::memset(lo, 0, 32);
      scale = amax_bits >= kInfBits ? __builtin_nanf("") : 0.0f;
      corr = 0;
      return;
    }
    float amax;
    std::memcpy(&amax, &amax_bits, sizeof amax);
    const F inv = Ops::set1(kQuantMax / amax);
    const I q0 = Ops::cvt_round(Ops::mul(v0, inv)), q1 = Ops::cvt_round(Ops::mul(v1, inv));
    const I h0 = Ops::template srai<8>(Ops::iadd(q0, Ops::iset1(128)));
    const I h1 = Ops::template srai<8>(Ops::iadd(q1, Ops::iset1(128)));
    Ops::store_i8(hi, h0);
    Ops::store_i8(hi + 16, h1);
    Ops::store_i8(lo, Ops::isub(q0, Ops::template slli<8>(h0)));
    Ops::store_i8(lo + 16, Ops::isub(q1, Ops::template slli<8>(h1)));
    scale = amax / (2.0f * kQuantMax);
    corr = -kCodeBias * Ops::hsum(Ops::iadd(q0, q1));
  }

  // sums[n] = the exact integer sums of one 32-wide block b of a group with
  // rows[n] (and the block's corr): an instruction set's own order where it
  // has one (Ops::block_sums: AVX2, whose 16 registers cannot hold a whole
  // decoded block), else the block decoded once and dotted with each row.
  template <int N>
  static void block_sums(const uint8_t* codes, const RowPtr* rows, int64_t b, I* sums) {
    if constexpr (requires { Ops::template block_sums<N>(codes, rows, b, sums); }) {
      Ops::template block_sums<N>(codes, rows, b, sums);
    } else {
      const typename Ops::Block w = Ops::decode(codes);
#pragma GCC unroll 16
      for (int n = 0; n < N; ++n) sums[n] = Ops::dot(w, rows[n].hi + 32 * b, rows[n].lo + 32 * b, rows[n].corr[b]);
    }
  }

  // Asks for block b's codes and scales kPrefetchBytes ahead.
  static void prefetch_block(const uint8_t* codes, const uint8_t* scales, int64_t b) {
    for (int l = 0; l < 4; ++l) __builtin_prefetch(codes + 256 * b + kPrefetchBytes + 64 * l, 0, 3);
    __builtin_prefetch(scales + 16 * b + kPrefetchBytes / 16, 0, 3);
  }

  // total + one block's exact integer sums times the activation's scale
  // times the rows' weight scales: the float step of every block, the amx
  // path's too (so that its bits are avx512_vnni's).
  static F add_block(F total, I sums, float act_scale, F row_scales) {
    return Ops::fma(Ops::mul(Ops::cvt(sums), Ops::set1(act_scale)), row_scales, total);
  }

  // out[n] = the 16 rows of one group dotted with rows[n] over `blocks` MX
  // blocks: per block, the exact integer sum times the activation's scale
  // times the rows' weight scales, added up in fp32.
  template <int N>
  static void dot_group(const uint8_t* codes, const uint8_t* scales, int64_t blocks, const RowPtr* rows, F* out) {
    F total[N];
#pragma GCC unroll 16
    for (int n = 0; n < N; ++n) total[n] = Ops::zero();
    for (int64_t b = 0; b < blocks; ++b) {
      prefetch_block(codes, scales, b);
      I sums[N];
      block_sums<N>(codes + 256 * b, rows, b, sums);
      const F row_scales = Ops::row_scales(scales + 16 * b);
#pragma GCC unroll 16
      for (int n = 0; n < N; ++n)
        total[n] = add_block(total[n], sums[n], rows[n].scale[b], row_scales);
    }
#pragma GCC unroll 16
    for (int n = 0; n < N; ++n) out[n] = total[n];
  }

  // dot_group for 1 <= n <= kTile rows, the tile size a compile-time constant.
  template <int N = kTile>
  static void dot_rows(int n, const uint8_t* codes, const uint8_t* scales, int64_t blocks, const RowPtr* rows,
                       F* out) {
    if constexpr (N > 1)
      if (n < N) return dot_rows<N - 1>(n, codes, scales, blocks, rows, out);
    dot_group<N>(codes, scales, blocks, rows, out);
  }

  static void quantize_bf16(const uint16_t* x, int64_t stride, int64_t k_real, int64_t r0, int64_t r1, QuantRows q) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t b = 0; b < q.k / 32; ++b) {
        const bool real = 32 * b < k_real;
        const uint16_t* v = x + r * stride + 32 * b;
        quantize_block(real ? Ops::load_bf16(v) : Ops::zero(), real ? Ops::load_bf16(v + 16) : Ops::zero(), q, r, b);
      }
  }

  static void router(const uint16_t* x, int64_t stride, const uint16_t* w, int64_t w_stride, const uint16_t* bias,
                     int64_t hidden, int64_t experts, int64_t i0, int64_t i1, float* logits) {
    for (int64_t i = i0; i < i1; ++i) {
      const uint16_t* xt = x + (i / experts) * stride;
      const uint16_t* we = w + (i % experts) * w_stride;
      F acc = Ops::zero();
      for (int64_t h = 0; h < hidden; h += 16) acc = Ops::fma(Ops::load_bf16(xt + h), Ops::load_bf16(we + h), acc);
      const uint32_t b = uint32_t(bias[i % experts]) << 16;
      float bf;
      std::memcpy(&bf, &b, sizeof bf);
      logits[i] = Ops::hsum(acc) + bf;
    }
  }

  static void gemm1(const Gemm1Args& a, const ExpertRows& r, int64_t c0, int64_t c1) {
    const int64_t e = r.expert;
    for (int64_t c = c0; c < c1; ++c) {
      const uint16_t* bias = a.b13 + e * a.b13_stride + 64 * c;
      const F gate_bias[2] = {Ops::load_bf16(bias), Ops::load_bf16(bias + 32)};
      const F up_bias[2] = {Ops::load_bf16(bias + 16), Ops::load_bf16(bias + 48)};
      for (int64_t n0 = 0; n0 < r.count; n0 += kTile) {
        const int n = int(r.count - n0 < kTile ? r.count - n0 : kTile);
        RowPtr rows[kTile];
        for (int i = 0; i < n; ++i) rows[i] = row_of(a.x, r.pairs[n0 + i] / a.topk);
        F h[4][kTile];  // gate, up of columns 32c + [0, 16), then of 32c + [16, 32)
        for (int g = 0; g < 4; ++g)
          dot_rows(n, a.w13.group_codes(e, 4 * c + g), a.w13.group_scales(e, 4 * c + g), a.w13.blocks, rows, h[g]);
        for (int i = 0; i < n; ++i) {
          F act[2];
          for (int half = 0; half < 2; ++half)
            act[half] = swiglu(Ops::add(h[2 * half][i], gate_bias[half]), Ops::add(h[2 * half + 1][i], up_bias[half]),
                               a.swiglu);
          quantize_block(act[0], act[1], a.a, r.pairs[n0 + i], c);
        }
      }
    }
  }

  static void gemm2(const Gemm2Args& a, const ExpertRows& r, int64_t g0, int64_t g1) {
    const int64_t e = r.expert;
    for (int64_t g = g0; g < g1; ++g) {
      const F bias = Ops::load_bf16(a.b2 + e * a.b2_stride + 16 * g);
      for (int64_t n0 = 0; n0 < r.count; n0 += kTile) {
        const int n = int(r.count - n0 < kTile ? r.count - n0 : kTile);
        RowPtr rows[kTile];
        for (int i = 0; i < n; ++i) rows[i] = row_of(a.a, r.pairs[n0 + i]);
        F o[kTile];
        dot_rows(n, a.w2.group_codes(e, g), a.w2.group_scales(e, g), a.w2.blocks, rows, o);
        for (int i = 0; i < n; ++i) Ops::storeu(a.out + r.pairs[n0 + i] * a.out_stride + 16 * g, Ops::add(o[i], bias));
      }
    }
  }

  static void combine(const float* out, int64_t out_stride, const float* weights, int64_t topk, int64_t hidden,
                      int64_t t0, int64_t t1, void* y, OutputDtype y_dtype) {
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t h = 0; h < hidden; h += 16) {
        F acc = Ops::zero();
        for (int64_t s = 0; s < topk; ++s)
          acc = Ops::fma(Ops::set1(weights[t * topk + s]), Ops::loadu(out + (t * topk + s) * out_stride + h), acc);
        if (y_dtype == OutputDtype::kFp32) Ops::storeu(static_cast<float*>(y) + t * hidden + h, acc);
        else Ops::store_bf16(static_cast<uint16_t*>(y) + t * hidden + h, acc);
      }
  }

  static constexpr Kernels table(CpuIsa isa) {
    return {isa, &quantize_bf16, &router, &gemm1, &gemm2, &combine};
  }
};

}  // namespace
}  // namespace mxmoe::cpu
