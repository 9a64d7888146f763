// CUTLASS's own host reference for block-scaled GEMMs
// (cutlass::reference::host::Gemm3x with GettBlockScalingMainloopParams, the
// reference CUTLASS checks its SM100 / SM120 kernels against) run over OUR
// bytes: MXFP8 activations from mxfp8_quantize_row (E4M3, row-major [M, K]),
// MXFP4 weights as the checkpoint packs them ([N, K] rows, LOW nibble = even
// element, i.e. CUTLASS's column-major B), and both operands' E8M0 scales
// packed by pack_blockscaled_scales, read through the layouts of
// Sm1xxBlockScaledConfig<32>. Its D must be our dequantised GEMM.
//
// Gemm3x dequantises each element as float(value) * float(scale) and
// accumulates the products in fp32 along K in order, one fma per element. An
// E4M3 value has 4 significant bits, an E2M1 value 2 and the scales are powers
// of two, so every product is exact in fp32 and the only rounding is that of
// the running sum: D equals, bit for bit, our dequantised rows summed in fp32
// in K order, and lies within K u sum_k |a_k b_k| (u = 2^-24) of the fp64 sum.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cutlass_host_intrinsics.h"  // before any CUTLASS header

#include "cute/tensor.hpp"
#include "cutlass/bfloat16.h"
#include "cutlass/detail/layout.hpp"
#include "cutlass/detail/sm100_blockscaled_layout.hpp"
#include "cutlass/float8.h"
#include "cutlass/float_subbyte.h"
#include "cutlass/layout/matrix.h"
#include "cutlass/util/packed_stride.hpp"
#include "cutlass/util/reference/host/gett.hpp"
#include "mxmoe/format.h"
#include "prepare/blockscaled_scales.h"

namespace mxmoe {
namespace {

// The operand types and layouts of the Blackwell GEMMs (src/cuda/sm1xx/).
using MxA = cutlass::mx_float8_t<cutlass::float_e4m3_t>;
using MxB = cutlass::mx_float4_t<cutlass::float_e2m1_t>;
using StrideA = cutlass::detail::TagToStrideA_t<cutlass::layout::RowMajor>;     // [M, K], K contiguous
using StrideB = cutlass::detail::TagToStrideB_t<cutlass::layout::ColumnMajor>;  // [N, K], K contiguous
using StrideD = cutlass::detail::TagToStrideC_t<cutlass::layout::RowMajor>;     // [M, N], N contiguous
using Config = cutlass::detail::Sm1xxBlockScaledConfig<kMxBlock>;

// One GEMM's operands in our formats.
struct Operands {
  int64_t m = 0, n = 0, k = 0;
  std::vector<uint8_t> a_codes;   // [m, k] E4M3
  std::vector<uint8_t> a_scales;  // [m, k / 32] E8M0, dense
  std::vector<uint8_t> b_codes;   // [n, k / 2] packed E2M1
  std::vector<uint8_t> b_scales;  // [n, k / 32] E8M0, dense
  std::vector<uint8_t> sfa, sfb;  // a_scales, b_scales packed for the MMAs
  int64_t k_blocks() const { return k / kMxBlock; }
};

void pack_scales(Operands& op) {
  const int64_t kb = op.k_blocks();
  op.sfa.assign(size_t(blockscaled_scale_bytes(op.m, kb)), 0);
  op.sfb.assign(size_t(blockscaled_scale_bytes(op.n, kb)), 0);
  ASSERT_TRUE(pack_blockscaled_scales(op.a_scales.data(), op.m, kb, kb, op.sfa.data()).ok());
  ASSERT_TRUE(pack_blockscaled_scales(op.b_scales.data(), op.n, kb, kb, op.sfb.data()).ok());
}

// A: N(0, 1) floats times 2^e per MX block (e in [-6, 6], so the rows' E8M0
// scales vary), quantised per row by `rule`. B: uniform E2M1 codes (both
// zeros included) with scales 118..130 (2^-9 .. 2^3, the range of the gpt-oss
// checkpoints' weights).
Operands make_operands(int64_t m, int64_t n, int64_t k, MxScaleRule rule, uint32_t seed) {
  Operands op;
  op.m = m, op.n = n, op.k = k;
  const int64_t kb = op.k_blocks();
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> row(static_cast<size_t>(k));
  op.a_codes.resize(size_t(m * k));
  op.a_scales.resize(size_t(m * kb));
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t b = 0; b < kb; ++b) {
      const float mag = std::ldexp(1.0f, int(rng() % 13) - 6);
      for (int64_t i = 0; i < kMxBlock; ++i) row[size_t(b * kMxBlock + i)] = mag * normal(rng);
    }
    EXPECT_TRUE(mxfp8_quantize_row(row.data(), k, &op.a_codes[size_t(r * k)], &op.a_scales[size_t(r * kb)], rule));
  }
  op.b_codes.resize(size_t(n * k / 2));
  for (auto& byte : op.b_codes) byte = uint8_t(rng());
  op.b_scales.resize(size_t(n * kb));
  for (auto& s : op.b_scales) s = uint8_t(118 + rng() % 13);
  pack_scales(op);
  return op;
}

// D = A B^T by CUTLASS's host reference, over the bytes of `op` (nothing
// copied or converted), fp32 accumulation, alpha = 1, no C.
template <class ElementD>
std::vector<ElementD> cutlass_reference_gemm(Operands& op) {
  using namespace cute;
  const int m = int(op.m), n = int(op.n), k = int(op.k);
  auto layout_a = make_layout(make_shape(m, k, 1), cutlass::make_cute_packed_stride(StrideA{}, {m, k, 1}));
  auto layout_b = make_layout(make_shape(n, k, 1), cutlass::make_cute_packed_stride(StrideB{}, {n, k, 1}));
  auto layout_d = make_layout(make_shape(m, n, 1), cutlass::make_cute_packed_stride(StrideD{}, {m, n, 1}));
  // (M, K, L) / (N, K, L) views of the scales: stride 0 over the 32 elements
  // of a block, the 512-byte atoms beyond.
  auto layout_sfa = Config::tile_atom_to_shape_SFA(make_shape(m, n, k, 1));
  auto layout_sfb = Config::tile_atom_to_shape_SFB(make_shape(m, n, k, 1));
  EXPECT_EQ(int64_t(cosize(layout_sfa)), int64_t(op.sfa.size()));
  EXPECT_EQ(int64_t(cosize(layout_sfb)), int64_t(op.sfb.size()));

  // E2M1 is a subbyte type: recast_ptr gives cute's subbyte_iterator, which
  // reads element i from bits [4 (i % 2), 4 (i % 2) + 4) of byte i / 2.
  Tensor a = make_tensor(recast_ptr<typename MxA::DataType>(op.a_codes.data()), layout_a);
  Tensor b = make_tensor(recast_ptr<typename MxB::DataType>(op.b_codes.data()), layout_b);
  Tensor sfa = make_tensor(recast_ptr<typename MxA::ScaleFactorType>(op.sfa.data()), layout_sfa);
  Tensor sfb = make_tensor(recast_ptr<typename MxB::ScaleFactorType>(op.sfb.data()), layout_sfb);
  std::vector<ElementD> out(size_t(op.m * op.n));
  Tensor d = make_tensor(out.data(), layout_d);
  Tensor c = make_tensor(static_cast<ElementD*>(nullptr), layout_d);  // no source: the epilogue skips C

  cutlass::reference::host::GettBlockScalingMainloopParams<float, decltype(a), decltype(sfa), decltype(b),
                                                           decltype(sfb)>
      mainloop{a, sfa, b, sfb};
  cutlass::reference::host::GettBlockScalingEpilogueParams<float, float, float, decltype(c), decltype(d)> epilogue{
      1.0f, 0.0f, c, d};
  cutlass::reference::host::Gemm3x(mainloop, epilogue);
  return out;
}

// Our side, from the dequantised rows.
struct Ours {
  std::vector<float> fp32;      // summed in fp32 along K in order (Gemm3x's order)
  std::vector<double> fp64;     // summed in fp64
  std::vector<double> abs_sum;  // sum_k |a_k b_k|: the scale of the rounding error
};

Ours our_gemm(const Operands& op) {
  const int64_t m = op.m, n = op.n, k = op.k, kb = op.k_blocks();
  std::vector<float> a(size_t(m * k)), b(size_t(n * k));
  for (int64_t r = 0; r < m; ++r)
    mxfp8_dequantize_row(&op.a_codes[size_t(r * k)], &op.a_scales[size_t(r * kb)], k, &a[size_t(r * k)]);
  for (int64_t r = 0; r < n; ++r)
    mxfp4_dequantize_row(&op.b_codes[size_t(r * k / 2)], &op.b_scales[size_t(r * kb)], k, &b[size_t(r * k)]);
  Ours o;
  o.fp32.resize(size_t(m * n));
  o.fp64.resize(size_t(m * n));
  o.abs_sum.resize(size_t(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const float* x = &a[size_t(i * k)];
      const float* w = &b[size_t(j * k)];
      float acc = 0.0f;
      double sum = 0.0, abs_sum = 0.0;
      for (int64_t e = 0; e < k; ++e) {
        const float p = x[e] * w[e];  // exact: 4 x 2 significant bits
        acc += p;
        sum += double(x[e]) * double(w[e]);
        abs_sum += std::fabs(double(x[e]) * double(w[e]));
      }
      o.fp32[size_t(i * n + j)] = acc;
      o.fp64[size_t(i * n + j)] = sum;
      o.abs_sum[size_t(i * n + j)] = abs_sum;
    }
  return o;
}

double l2(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

// CUTLASS's fp32 D against ours: the same bits as our fp32 sum in K order;
// within the rounding bound of fp32 summation of the fp64 sum, elementwise;
// a relative L2 error of at most 1e-6 (2e-7 to 5e-7 on these inputs, K = 768
// to 2944); and not all zeros.
void expect_matches(const std::vector<float>& got, const Ours& ours, int64_t m, int64_t n, int64_t k) {
  ASSERT_EQ(got.size(), size_t(m * n));
  std::vector<double> got64(got.begin(), got.end()), diff(got.size());
  for (size_t i = 0; i < got.size(); ++i) diff[i] = got64[i] - ours.fp64[i];
  const double u = std::ldexp(1.0, -24), norm = l2(ours.fp64);
  ASSERT_GT(l2(got64), 0.0);
  ASSERT_GT(norm, 0.0);
  EXPECT_LE(l2(diff) / norm, 1e-6);
  int64_t mismatches = 0;
  for (int64_t i = 0; i < m * n; ++i) {
    const double bound = 1.01 * double(k) * u * ours.abs_sum[size_t(i)];
    if (std::fabs(diff[size_t(i)]) > bound || std::memcmp(&got[size_t(i)], &ours.fp32[size_t(i)], 4) != 0) {
      if (++mismatches <= 5)
        ADD_FAILURE() << "D[" << i / n << "][" << i % n << "]: CUTLASS " << got[size_t(i)] << ", ours fp32 "
                      << ours.fp32[size_t(i)] << ", fp64 " << ours.fp64[size_t(i)] << " (bound " << bound << ")";
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << m * n << " outputs";
}

struct Shape {
  int64_t m, n, k;
};
// M: one token, either side of a 128-row scale atom. K: 2880 padded to 2944,
// the TP 2 / TP 4 shards of I (1440, 720) padded to 1536 and 768. Gemm3x
// computes 64 x 64 output tiles, M and N rounded up, one scalar fma each.
std::vector<Shape> shapes() {
  std::vector<Shape> out;
  for (const int64_t k : {2944, 1536, 768})
    for (const int64_t n : {128, 256})
      for (const int64_t m : {1, 127, 129}) out.push_back({m, n, k});
  return out;
}

std::string describe(const Shape& s, MxScaleRule rule, uint32_t seed) {
  return "M=" + std::to_string(s.m) + " N=" + std::to_string(s.n) + " K=" + std::to_string(s.k) +
         " rule=" + (rule == MxScaleRule::kOcp ? "ocp" : "triton") + " seed=" + std::to_string(seed);
}

TEST(BlockscaledReferenceGemm, CutlassHostReferenceOnOurBytesIsOurGemm) {
  const std::vector<Shape> all = shapes();
  for (size_t i = 0; i < all.size(); ++i) {
    const Shape s = all[i];
    const MxScaleRule rule = i % 2 ? MxScaleRule::kOcp : MxScaleRule::kTriton;
    const uint32_t seed = 1000 + uint32_t(i);
    SCOPED_TRACE(describe(s, rule, seed));
    Operands op = make_operands(s.m, s.n, s.k, rule, seed);
    expect_matches(cutlass_reference_gemm<float>(op), our_gemm(op), s.m, s.n, s.k);
  }
}

// The bf16 D the grouped GEMMs store: the fp32 result rounded to nearest even.
TEST(BlockscaledReferenceGemm, Bf16OutputIsTheFp32ResultRounded) {
  const Shape s{129, 128, 768};
  const uint32_t seed = 2000;
  SCOPED_TRACE(describe(s, MxScaleRule::kTriton, seed));
  Operands op = make_operands(s.m, s.n, s.k, MxScaleRule::kTriton, seed);
  const std::vector<cutlass::bfloat16_t> d = cutlass_reference_gemm<cutlass::bfloat16_t>(op);
  const Ours ours = our_gemm(op);
  int64_t nonzero = 0;
  for (int64_t i = 0; i < s.m * s.n; ++i) {
    ASSERT_EQ(d[size_t(i)].raw(), float_to_bf16(ours.fp32[size_t(i)])) << "D[" << i / s.n << "][" << i % s.n << "]";
    nonzero += d[size_t(i)].raw() & 0x7FFF ? 1 : 0;
  }
  EXPECT_GT(nonzero, 0);
}

// One packed scale byte raised by one (its block's 32 values doubled), at the
// byte blockscaled_scale_offset names: CUTLASS's D must change in that row of
// A (column of B) and nowhere else, and become our GEMM with that one dense
// scale raised. The positions exercise every term of the offset (a second
// 128-row atom, a 32-row group past the first, a later K atom, a byte past
// the first of its word): were the offset wrong in any, CUTLASS would read
// the raised byte as another (row, block)'s scale, or not at all.
TEST(BlockscaledReferenceGemm, OneCorruptScaleByteChangesOnlyItsBlock) {
  const Shape s{200, 256, 1536};
  const uint32_t seed = 3000;
  SCOPED_TRACE(describe(s, MxScaleRule::kOcp, seed));
  Operands op = make_operands(s.m, s.n, s.k, MxScaleRule::kOcp, seed);
  const int64_t kb = op.k_blocks();
  const std::vector<float> clean = cutlass_reference_gemm<float>(op);
  expect_matches(clean, our_gemm(op), s.m, s.n, s.k);

  // Counts the outputs that differ from `clean` inside and outside the given
  // row (or column, for B).
  auto count_changes = [&](const std::vector<float>& d, bool by_row, int64_t index, int64_t* inside,
                           int64_t* outside) {
    *inside = *outside = 0;
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j) {
        const bool changed = std::memcmp(&d[size_t(i * s.n + j)], &clean[size_t(i * s.n + j)], 4) != 0;
        ((by_row ? i : j) == index ? *inside : *outside) += changed ? 1 : 0;
      }
  };

  {  // A: token row 197 (atom row 1, 32-row group 2, lane 5), block 37 (atom 9, byte 1)
    const int64_t r = 197, blk = 37, at = blockscaled_scale_offset(r, blk, kb);
    SCOPED_TRACE("SFA row " + std::to_string(r) + " block " + std::to_string(blk) + " byte " + std::to_string(at));
    ASSERT_EQ(op.sfa[size_t(at)], op.a_scales[size_t(r * kb + blk)]);
    Operands bad = op;
    bad.sfa[size_t(at)] += 1;
    bad.a_scales[size_t(r * kb + blk)] += 1;
    const std::vector<float> d = cutlass_reference_gemm<float>(bad);
    int64_t inside = 0, outside = 0;
    count_changes(d, true, r, &inside, &outside);
    EXPECT_EQ(outside, 0);
    EXPECT_GT(inside, s.n / 2);
    expect_matches(d, our_gemm(bad), s.m, s.n, s.k);
  }
  {  // B: weight row (output column) 131 (atom row 1, group 0, lane 3), block 6 (atom 1, byte 2)
    const int64_t c = 131, blk = 6, at = blockscaled_scale_offset(c, blk, kb);
    SCOPED_TRACE("SFB row " + std::to_string(c) + " block " + std::to_string(blk) + " byte " + std::to_string(at));
    ASSERT_EQ(op.sfb[size_t(at)], op.b_scales[size_t(c * kb + blk)]);
    Operands bad = op;
    bad.sfb[size_t(at)] += 1;
    bad.b_scales[size_t(c * kb + blk)] += 1;
    const std::vector<float> d = cutlass_reference_gemm<float>(bad);
    int64_t inside = 0, outside = 0;
    count_changes(d, false, c, &inside, &outside);
    EXPECT_EQ(outside, 0);
    EXPECT_GT(inside, s.m / 2);
    expect_matches(d, our_gemm(bad), s.m, s.n, s.k);
  }
}

}  // namespace
}  // namespace mxmoe
