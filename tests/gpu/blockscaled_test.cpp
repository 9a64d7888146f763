// The Blackwell pipeline (sm100, sm120) on any CUDA GPU: its own kernels
// (MXFP8 rows in the block-scaled layout, the GEMMs' descriptors, SwiGLU +
// requantisation, combine) with the emulated grouped GEMM in place of
// CUTLASS's, which reads the same buffers and descriptors.
//   - stage 2 and stage 3 bit-exactly against the host codec and CUTLASS's
//     scale layouts (padding rows and columns included);
//   - the whole forward against the CPU MXFP8 reference that models the
//     GEMMs' bf16 products (rel L2 <= 1e-3) and against the plain MXFP8
//     reference (<= 2e-2), with poisoned margins and workspace, over edge
//     shapes, token counts and routings;
//   - the arch's own CUTLASS GEMM where the device is an SM100 or SM120 GPU
//     (skipped elsewhere, naming the arch).
// MXMOE_TEST_QUICK=1 keeps a reduced sweep (for the sanitizer runs).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "mxmoe/backend.h"
#include "mxmoe/format.h"
#include "mxmoe/prepare.h"
#include "mxmoe/reference.h"
#include "support/test_support.h"

#ifndef MXMOE_WITH_BLOCKSCALED
TEST(BlockscaledGpu, NotBuilt) {
  GTEST_SKIP() << "GPU test skipped: this build has no block-scaled pipeline (it needs CUDA and CUTLASS's headers)";
}
#else
#include "cuda/blockscaled/blockscaled_backend.h"
#include "cuda/blockscaled/blockscaled_types.cuh"
#include "cuda/blockscaled/smxx_blockscaled_kernels.h"
#include "cuda/common/smxx_moe_kernels.h"
#include "prepare/blockscaled_scales.h"

namespace mxmoe {
namespace {

using testing::describe_case;
using testing::l2_norm;
using testing::quick_sweep;
using testing::random_floats;
using testing::rel_l2;
using testing::round_to_bf16;
using testing::RouteMode;

constexpr int64_t kPoison = 4096;

// A device buffer for the stage tests.
template <typename T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t count, int fill = 0) : n(count) {
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemset(p, fill, std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess);
  }
  explicit Dev(const std::vector<T>& v) : Dev(v.size()) {
    EXPECT_EQ(cudaMemcpy(p, v.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~Dev() { cudaFree(p); }
  std::vector<T> host() const {
    std::vector<T> v(n);
    EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
};

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = float_to_bf16(v[i]);
  return out;
}

// The grouping of `ids` into 128-row tiles on the device, as moe_forward
// runs it, with its schedule copied back.
struct Grouped {
  std::unique_ptr<Dev<char>> ws;
  smxx::Schedule sch{};
  int64_t max_rows = 0;
  std::vector<int32_t> sorted_pair, tile_expert;
  int32_t num_tiles = 0;
};

void group(const std::vector<int32_t>& ids, int64_t T, int64_t k, int64_t E, Grouped* g) {
  smxx::WorkspaceCursor cur;
  const smxx::ScheduleOffsets off = smxx::take_schedule(cur, T, k, E, blockscaled::kRowTile);
  g->ws = std::make_unique<Dev<char>>(cur.off);
  g->sch = smxx::schedule_in(g->ws->p, off);
  g->max_rows = off.rows;
  ASSERT_EQ(cudaMemcpy(g->sch.ids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  const Status st = smxx::launch_group_by_expert(g->sch.ids, nullptr, T * k, E, blockscaled::kRowTile, g->sch, false,
                                                 nullptr, "test");
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  g->sorted_pair.resize(size_t(off.rows));
  g->tile_expert.resize(size_t(off.max_tiles));
  ASSERT_EQ(cudaMemcpy(g->sorted_pair.data(), g->sch.sorted_pair, off.rows * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(g->tile_expert.data(), g->sch.tile_expert, off.max_tiles * 4, cudaMemcpyDeviceToHost),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(&g->num_tiles, g->sch.num_tiles, 4, cudaMemcpyDeviceToHost), cudaSuccess);
}

blockscaled::GroupedRows rows_of(const Grouped& g) {
  return {g.sch.sorted_pair, g.sch.tile_expert, g.sch.num_tiles, g.max_rows};
}

class BlockscaledGpu : public ::testing::Test {
 protected:
  void SetUp() override { MXMOE_SKIP_WITHOUT_GPU(); }
};

// Stage 2: every (token, slot) row's codes and scales as the host codec
// writes them, padding columns (H -> Hp) and padding rows included, and every
// scale byte of the rows the GEMMs read written.
TEST_F(BlockscaledGpu, QuantizedRowsAreTheHostCodecsBytes) {
  const int64_t E = 5, k = 2, H = 160, Hp = 256;
  for (const int64_t T : {1, 3, 130}) {
    for (const MxScaleRule rule : {MxScaleRule::kTriton, MxScaleRule::kOcp}) {
      SCOPED_TRACE("T=" + std::to_string(T) + " rule=" + std::to_string(int(rule)));
      const uint64_t seed = 7 + uint64_t(T);
      // Rows of very different magnitudes, so scales vary block to block.
      std::vector<float> x = random_floats(size_t(T * H), seed);
      for (int64_t i = 0; i < T * H; ++i) x[size_t(i)] *= std::ldexp(1.0f, int(i / 32 % 9) - 4);
      x = round_to_bf16(x);
      const Routing r = make_test_routing(RouteMode::kRandom, T, {E, H, H, k}, seed + 1);
      Grouped g;
      group(r.ids, T, k, E, &g);
      const int64_t kb = Hp / 32, valid = int64_t(g.num_tiles) * 128;
      Dev<uint16_t> dx(to_bf16(x));
      Dev<uint8_t> codes(size_t(g.max_rows * Hp), 0x5A), scales(size_t(blockscaled_scale_bytes(g.max_rows, kb)), 0xAB);
      const Status st = blockscaled::launch_quantize_x_rows(dx.p, H, H, Hp, k, rows_of(g), rule, codes.p, scales.p,
                                                            nullptr, "test");
      ASSERT_TRUE(st.ok()) << st.message();
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<uint8_t> c = codes.host(), s = scales.host();
      std::vector<float> row(static_cast<size_t>(Hp));
      std::vector<uint8_t> want_codes(static_cast<size_t>(Hp)), want_scales(static_cast<size_t>(kb));
      for (int64_t rr = 0; rr < valid; ++rr) {
        const int p = g.sorted_pair[size_t(rr)];
        std::fill(row.begin(), row.end(), 0.0f);
        if (p >= 0) std::copy(x.begin() + (p / k) * H, x.begin() + (p / k + 1) * H, row.begin());
        ASSERT_TRUE(mxfp8_quantize_row(row.data(), Hp, want_codes.data(), want_scales.data(), rule));
        for (int64_t j = 0; j < Hp; ++j)
          ASSERT_EQ(c[size_t(rr * Hp + j)], want_codes[size_t(j)]) << "row " << rr << " col " << j << " pair " << p;
        for (int64_t b = 0; b < kb; ++b)
          ASSERT_EQ(s[size_t(blockscaled_scale_offset(rr, b, kb))], want_scales[size_t(b)])
              << "row " << rr << " block " << b;
      }
      // The rows the GEMMs read are whole scale atoms: no byte left unwritten.
      for (int64_t i = 0; i < blockscaled_scale_bytes(valid, kb); ++i) ASSERT_NE(s[size_t(i)], 0xAB) << "byte " << i;
    }
  }
}

// Stage 3: each expert's problem (M = its tiles x 128, or 0) and operand
// pointers, and scale layouts that, evaluated as CUTLASS evaluates them,
// land on our packing's bytes.
TEST_F(BlockscaledGpu, ProblemDescriptorsPointAtEachExpertsRows) {
  const int64_t E = 6, k = 4, T = 70, N = 256, K = 384;
  Routing r = make_test_routing(RouteMode::kLowExperts, T, {E, K, K, k}, 3);  // experts >= k get no rows
  Grouped g;
  group(r.ids, T, k, E, &g);
  std::vector<int64_t> tiles(size_t(E), 0);
  for (const int32_t id : r.ids) ++tiles[size_t(id)];
  for (int64_t& t : tiles) t = (t + 127) / 128;
  Dev<uint8_t> a(16), sfa(16), b(16), sfb(16);
  Dev<uint16_t> d(16);
  struct Arrays {
    Dev<char> shapes, a, b, sfa, sfb, d, sa, sb, sd, lsfa, lsfb;
    explicit Arrays(int64_t n)
        : shapes(n * sizeof(blockscaled::ProblemShape)), a(n * 8), b(n * 8), sfa(n * 8), sfb(n * 8), d(n * 8),
          sa(n * sizeof(blockscaled::StrideA)), sb(n * sizeof(blockscaled::StrideB)),
          sd(n * sizeof(blockscaled::StrideD)), lsfa(n * sizeof(blockscaled::LayoutSF)),
          lsfb(n * sizeof(blockscaled::LayoutSF)) {}
    blockscaled::GroupedGemmArgs args(int64_t n) {
      blockscaled::GroupedGemmArgs x;
      x.groups = int(n);
      x.problem_shapes = shapes.p;
      x.a = reinterpret_cast<const void**>(a.p);
      x.b = reinterpret_cast<const void**>(b.p);
      x.sfa = reinterpret_cast<const void**>(sfa.p);
      x.sfb = reinterpret_cast<const void**>(sfb.p);
      x.d = reinterpret_cast<void**>(d.p);
      x.stride_a = sa.p;
      x.stride_b = sb.p;
      x.stride_d = sd.p;
      x.layout_sfa = lsfa.p;
      x.layout_sfb = lsfb.p;
      return x;
    }
  } arr1(E), arr2(E);
  blockscaled::GemmOperands g1{N, K, a.p, sfa.p, b.p, sfb.p, d.p, arr1.args(E)};
  blockscaled::GemmOperands g2{K, N, a.p, sfa.p, b.p, sfb.p, d.p, arr2.args(E)};
  const Status st = blockscaled::launch_grouped_problems(rows_of(g), E, g1, g2, nullptr, "test");
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (auto [arr, n, kk] : {std::tuple{&arr1, N, K}, std::tuple{&arr2, K, N}}) {
    SCOPED_TRACE("N=" + std::to_string(n) + " K=" + std::to_string(kk));
    auto as = [](const Dev<char>& v, auto* type) {
      using T = std::remove_pointer_t<decltype(type)>;
      std::vector<char> raw = v.host();
      std::vector<T> out(raw.size() / sizeof(T));
      std::memcpy(static_cast<void*>(out.data()), raw.data(), out.size() * sizeof(T));
      return out;
    };
    const auto shapes = as(arr->shapes, static_cast<blockscaled::ProblemShape*>(nullptr));
    const auto pa = as(arr->a, static_cast<uintptr_t*>(nullptr)), pb = as(arr->b, static_cast<uintptr_t*>(nullptr));
    const auto psfa = as(arr->sfa, static_cast<uintptr_t*>(nullptr));
    const auto psfb = as(arr->sfb, static_cast<uintptr_t*>(nullptr));
    const auto pd = as(arr->d, static_cast<uintptr_t*>(nullptr));
    const auto sa = as(arr->sa, static_cast<blockscaled::StrideA*>(nullptr));
    const auto sd = as(arr->sd, static_cast<blockscaled::StrideD*>(nullptr));
    const auto lsfa = as(arr->lsfa, static_cast<blockscaled::LayoutSF*>(nullptr));
    const auto lsfb = as(arr->lsfb, static_cast<blockscaled::LayoutSF*>(nullptr));
    int64_t row0 = 0;
    for (int64_t e = 0; e < E; ++e) {
      SCOPED_TRACE("expert " + std::to_string(e));
      const int m = int(tiles[size_t(e)] * 128);
      EXPECT_EQ(cute::get<0>(shapes[size_t(e)]), m);
      EXPECT_EQ(cute::get<1>(shapes[size_t(e)]), n);
      EXPECT_EQ(cute::get<2>(shapes[size_t(e)]), kk);
      if (m > 0) {
        EXPECT_EQ(pa[size_t(e)], uintptr_t(a.p) + row0 * kk);
        EXPECT_EQ(psfa[size_t(e)], uintptr_t(sfa.p) + row0 / 128 * blockscaled_k_atoms(kk / 32) * kScaleAtomBytes);
        EXPECT_EQ(pd[size_t(e)], uintptr_t(d.p) + row0 * n * 2);
      }
      EXPECT_EQ(pb[size_t(e)], uintptr_t(b.p) + e * n * kk / 2);
      EXPECT_EQ(psfb[size_t(e)], uintptr_t(sfb.p) + e * blockscaled_scale_bytes(n, kk / 32));
      EXPECT_EQ(cute::get<0>(sa[size_t(e)]), kk);
      EXPECT_EQ(cute::get<0>(sd[size_t(e)]), n);
      // CUTLASS reads scale (row, K element) at layout(row, k, 0).
      for (int row = 0; row < m; row += 13)
        for (int kc = 0; kc < kk; kc += 29)
          ASSERT_EQ(int64_t(lsfa[size_t(e)](row, kc, 0)), blockscaled_scale_offset(row, kc / 32, kk / 32))
              << "A row " << row << " k " << kc;
      for (int col = 0; col < n; col += 7)
        for (int kc = 0; kc < kk; kc += 31)
          ASSERT_EQ(int64_t(lsfb[size_t(e)](col, kc, 0)), blockscaled_scale_offset(col, kc / 32, kk / 32))
              << "B row " << col << " k " << kc;
      row0 += m;
    }
    EXPECT_EQ(row0, int64_t(g.num_tiles) * 128);
  }
}

struct Case {
  BackendKind kind;
  MoeShape shape;
  int64_t tokens;
  RouteMode mode;
  uint64_t seed;
  MxScaleRule rule = MxScaleRule::kTriton;
};

std::string describe(const Case& c) {
  return std::string(backend_name(c.kind)) + " " + describe_case(c.shape, c.tokens, c.mode) +
         " seed=" + std::to_string(c.seed) + " rule=" + (c.rule == MxScaleRule::kOcp ? "ocp" : "ceil");
}

ActivationOptions mxfp8(MxScaleRule rule) { return {ActivationFormat::kMxfp8, rule}; }

// The forward of `c` through `be` against the references; returns y.
std::vector<float> expect_matches(Backend& be, const MoeWeights& w, const std::vector<float>& x, const Case& c) {
  const int64_t n = c.tokens * c.shape.hidden;
  std::vector<float> y(static_cast<size_t>(n)), exact(y.size()), plain(y.size());
  Routing r;
  RoutingView view;
  const RoutingView* rv = nullptr;
  if (c.mode != RouteMode::kRouter) {
    r = make_test_routing(c.mode, c.tokens, c.shape, c.seed + 2);
    view = r.view();
    rv = &view;
  }
  const Status fs = be.forward_host(x.data(), c.tokens, rv, y.data());
  EXPECT_TRUE(fs.ok()) << fs.message();
  ReferenceOptions o;
  o.fp64 = true;
  o.activations = mxfp8(c.rule);
  EXPECT_TRUE(reference_forward(w.view(), x.data(), c.tokens, rv, plain.data(), o).ok());
  o.bf16_gemm_products = true;
  EXPECT_TRUE(reference_forward(w.view(), x.data(), c.tokens, rv, exact.data(), o).ok());
  // The router's top-k on the tensor cores may break a near-tie otherwise than
  // the fp64 router; with given routing the pipeline is the reference's.
  if (c.mode != RouteMode::kRouter) EXPECT_LE(rel_l2(y, exact), 1e-3);
  // Without the bf16 products: about 1% on the H200 (a product rounded to
  // bf16 moves its E4M3 requantisation by one step now and then).
  EXPECT_LE(rel_l2(y, plain), 2e-2);
  EXPECT_GT(l2_norm(y), 0.0);
  return y;
}

// The backend of `kind` over `w`, inside poisoned margins, with the emulated
// GEMM or (emulate = false) the arch's own.
std::unique_ptr<Backend> poisoned_backend(BackendKind kind, const MoeWeights& w, MxScaleRule rule, bool emulate) {
  std::unique_ptr<Backend> be;
  BlockscaledOptions opt;
  opt.device.poison_margin_bytes = kPoison;
  opt.emulate_gemm = emulate;
  const Status cs = create_blockscaled_backend(kind, w.view(), mxfp8(rule), opt, &be);
  EXPECT_TRUE(cs.ok()) << cs.message();
  return be;
}

void check_case(const Case& c, bool emulate = true) {
  SCOPED_TRACE(describe(c));
  const MoeWeights w = make_random_weights(c.shape, c.seed);
  const std::vector<float> x = round_to_bf16(random_floats(size_t(c.tokens * c.shape.hidden), c.seed + 1));
  const std::unique_ptr<Backend> be = poisoned_backend(c.kind, w, c.rule, emulate);
  if (be) expect_matches(*be, w, x, c);
}

TEST_F(BlockscaledGpu, EmulatedPipelineTokenSweep) {
  // (160, 160) pads both to 256; top-k cycles through 1, 2, 4, 8.
  const int64_t Ts[] = {1, 2, 3, 127, 129, 1000};
  const int64_t ks[] = {1, 2, 4, 8};
  int i = 0;
  for (const int64_t T : Ts) {
    if (quick_sweep() && T > 129) continue;
    const BackendKind kind = i % 2 ? BackendKind::kSm120 : BackendKind::kSm100;
    const MxScaleRule rule = i % 3 == 2 ? MxScaleRule::kOcp : MxScaleRule::kTriton;
    check_case({kind, {8, 160, 160, ks[i % 4]}, T, RouteMode::kRandom, uint64_t(200 + i), rule});
    ++i;
  }
}

TEST_F(BlockscaledGpu, EmulatedPipelineRoutings) {
  // Experts without rows, every token on one expert, repeated ids, the router.
  for (const RouteMode mode : {RouteMode::kOneExpert, RouteMode::kLowExperts, RouteMode::kFewExperts,
                               RouteMode::kRepeatedExpert, RouteMode::kRouter})
    check_case({BackendKind::kSm100, {16, 320, 736, 4}, 67, mode, 300 + uint64_t(mode)});
}

TEST_F(BlockscaledGpu, EmulatedPipelineGptOssShapes) {
  // H = I = 2880 (K = 90 MX blocks, padded to 92 = whole scale atoms), and
  // the TP 2 / TP 4 shards of I (1440 -> 1536; 720, which is no whole number
  // of MX blocks, is sharded from 2880 padded to 3072, so 768).
  check_case({BackendKind::kSm120, {32, 2880, 2880, 4}, 3, RouteMode::kRandom, 400});
  if (quick_sweep()) return;
  check_case({BackendKind::kSm100, {32, 2880, 2880, 4}, 129, RouteMode::kRandom, 401});
  check_case({BackendKind::kSm100, {32, 2880, 1440, 4}, 33, RouteMode::kRandom, 402});
  check_case({BackendKind::kSm120, {32, 2880, 768, 4}, 65, RouteMode::kRouter, 403});
}

// A token with NaN in x gets a NaN row of y and no other token is touched.
TEST_F(BlockscaledGpu, NanInputStaysInItsToken) {
  const MoeShape s{8, 160, 160, 2};
  const int64_t T = 5;
  const MoeWeights w = make_random_weights(s, 9);
  std::vector<float> x = round_to_bf16(random_floats(size_t(T * s.hidden), 10));
  x[size_t(1 * s.hidden + 7)] = NAN;
  const Routing r = make_test_routing(RouteMode::kRandom, T, s, 11);
  const std::unique_ptr<Backend> be = poisoned_backend(BackendKind::kSm100, w, MxScaleRule::kTriton, true);
  ASSERT_TRUE(be);
  std::vector<float> y(static_cast<size_t>(T * s.hidden));
  const RoutingView rv = r.view();
  const Status st = be->forward_host(x.data(), T, &rv, y.data());
  ASSERT_TRUE(st.ok()) << st.message();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < s.hidden; ++h) {
      const float v = y[size_t(t * s.hidden + h)];
      if (t == 1) ASSERT_TRUE(std::isnan(v)) << "token " << t << " col " << h;
      else ASSERT_TRUE(std::isfinite(v)) << "token " << t << " col " << h;
    }
}

// The forward on device pointers, as the engine API calls it: the caller's
// routing with an id outside [0, E) (that token's row is NaN, the others
// are the reference's), and bf16 y equal to the fp32 y rounded.
TEST_F(BlockscaledGpu, DeviceForwardTakesCallerRoutingAndBf16Out) {
  const MoeShape s{8, 320, 224, 4};
  const int64_t T = 9, bad = 4;
  const MoeWeights w = make_random_weights(s, 21);
  const std::vector<float> x = round_to_bf16(random_floats(size_t(T * s.hidden), 22));
  Routing r = make_test_routing(RouteMode::kRandom, T, s, 23);
  PreparedWeights prep;
  ASSERT_TRUE(prepare_weights(make_plan(BackendKind::kSm120, s), w.view(), &prep).ok());
  std::unique_ptr<smxx::DeviceForward> fwd;
  const Status ms = blockscaled::make_forward(BackendKind::kSm120, prep, mxfp8(MxScaleRule::kTriton), true, 0, &fwd);
  ASSERT_TRUE(ms.ok()) << ms.message();
  std::vector<float> ref(x.size());
  ReferenceOptions o;
  o.fp64 = true;
  o.activations = mxfp8(MxScaleRule::kTriton);
  o.bf16_gemm_products = true;
  const RoutingView rv = r.view();
  ASSERT_TRUE(reference_forward(w.view(), x.data(), T, &rv, ref.data(), o).ok());
  r.ids[size_t(bad * s.topk + 2)] = -1;
  Dev<uint16_t> dx(to_bf16(x));
  Dev<int32_t> ids(r.ids);
  Dev<float> weights(r.weights), y(x.size());
  Dev<uint16_t> yb(x.size());
  Dev<char> ws(fwd->workspace_bytes(T), 0xFF);
  smxx::ForwardArgs a;
  a.x = dx.p;
  a.tokens = T;
  a.topk_ids = ids.p;
  a.topk_weights = weights.p;
  a.y = y.p;
  ASSERT_TRUE(fwd->forward(a, ws.p, ws.n, nullptr).ok());
  a.y = nullptr;
  a.y_bf16 = yb.p;
  ASSERT_TRUE(fwd->forward(a, ws.p, ws.n, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> y32 = y.host();
  const std::vector<uint16_t> y16 = yb.host();
  std::vector<float> good, good_ref;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < s.hidden; ++h) {
      const size_t i = size_t(t * s.hidden + h);
      if (t == bad) {
        ASSERT_TRUE(std::isnan(y32[i]) && std::isnan(bf16_to_float(y16[i]))) << "col " << h;
        continue;
      }
      ASSERT_EQ(y16[i], float_to_bf16(y32[i])) << "token " << t << " col " << h;
      good.push_back(y32[i]);
      good_ref.push_back(ref[i]);
    }
  EXPECT_LE(rel_l2(good, good_ref), 1e-3);
  EXPECT_GT(l2_norm(good), 0.0);
  // Too small a workspace is refused, naming both sizes.
  const Status small = fwd->forward(a, ws.p, ws.n - 256, nullptr);
  EXPECT_EQ(small.code(), StatusCode::kInvalidArgument) << small.message();
}

TEST_F(BlockscaledGpu, RefusesBf16Activations) {
  const MoeWeights w = make_random_weights({4, 128, 128, 2}, 1);
  std::unique_ptr<Backend> be;
  BlockscaledOptions opt;
  opt.emulate_gemm = true;
  const Status st = create_blockscaled_backend(BackendKind::kSm120, w.view(), ActivationOptions{}, opt, &be);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported) << st.message();
  EXPECT_NE(st.message().find("mxfp8"), std::string::npos) << st.message();
}

// The arch's own CUTLASS GEMM: only on its GPU.
void check_hardware(BackendKind kind, int sm_major, int sm_minor_max) {
  int dev = 0, major = 0, minor = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev), cudaSuccess);
  const std::string need = kind == BackendKind::kSm100 ? "an SM100 or SM103 GPU" : "an SM120 or SM121 GPU";
  if (major != sm_major || minor > sm_minor_max)
    GTEST_SKIP() << "hardware test skipped: the " << backend_name(kind) << " GEMM needs " << need << "; device "
                 << dev << " is SM" << major << minor;
  if (!blockscaled::arch_gemm(kind))
    GTEST_SKIP() << "hardware test skipped: this build has no sm_" << sm_major << "0a code";
  for (const Case& c : {Case{kind, {32, 2880, 2880, 4}, 1, RouteMode::kRandom, 500},
                        Case{kind, {32, 2880, 2880, 4}, 129, RouteMode::kLowExperts, 501},
                        Case{kind, {128, 2880, 768, 4}, 1000, RouteMode::kRouter, 502}})
    check_case(c, false);
}

TEST_F(BlockscaledGpu, Sm100CutlassGemmMatchesReference) { check_hardware(BackendKind::kSm100, 10, 3); }
TEST_F(BlockscaledGpu, Sm120CutlassGemmMatchesReference) { check_hardware(BackendKind::kSm120, 12, 1); }

}  // namespace
}  // namespace mxmoe
#endif
