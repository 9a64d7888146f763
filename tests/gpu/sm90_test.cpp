// The sm90 CUDA backend (wgmma) against the CPU reference on the same MXFP4
// bytes. Every case runs with poisoned margins around each prepared tensor and
// a poisoned workspace (see DeviceBackendOptions), and prints its seeds. Most
// cases force the wgmma path (the heuristics would send small T to the
// portable decode kernels) and name the token tile, so both GEMM instances
// see every edge: tiles that are mostly padding, one expert holding every
// token, experts with none. Skips, saying why, without an SM90 GPU or without
// sm_90a code in the build. MXMOE_TEST_QUICK=1 keeps a reduced sweep (for
// racecheck/synccheck runs).
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#ifdef MXMOE_WITH_SM90
#include <cuda_runtime.h>

#include "cuda/sm90/sm90_backend.h"
#endif
#include "mxmoe/backend.h"
#include "mxmoe/reference.h"
#include "support/back_to_back.h"
#include "support/test_support.h"

#ifndef MXMOE_WITH_SM90
TEST(Sm90Gpu, NotBuilt) { GTEST_SKIP() << "GPU test skipped: this build has no sm_90a code (CUDA off or 90a not targeted)"; }
#else
namespace mxmoe {
namespace {

using testing::random_floats;
using testing::round_to_bf16;
using testing::expect_matches_reference;
using testing::quick_sweep;
using testing::describe_case;
using testing::RouteMode;

constexpr int64_t kPoison = 4096;

// Why the sm90 tests cannot run here, or "" when they can.
std::string sm90_unavailable() {
  std::string why;
  if (!testing::gpu_available(&why)) return why;
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
    return "cannot query the device";
  if (major != 9 || minor != 0) return "device is SM" + std::to_string(major * 10 + minor) + ", not SM90";
  return "";
}

struct Case {
  MoeShape shape;
  int64_t tokens;
  RouteMode mode;
  uint64_t seed;
  sm90::Overrides overrides;  // {2, 64}: wgmma with 64-token tiles; {} the heuristics
};

std::string describe(const Case& c) {
  return describe_case(c.shape, c.tokens, c.mode) + " path=" + std::to_string(c.overrides.path) +
         " tile=" + std::to_string(c.overrides.token_tile) + " seeds: weights " + std::to_string(c.seed) + ", x " +
         std::to_string(c.seed + 1) + ", routing " + std::to_string(c.seed + 2);
}

std::unique_ptr<Backend> make_backend(const MoeWeights& w, const sm90::Overrides& o,
                                      int64_t poison_margin_bytes = kPoison) {
  Sm90Options opt;
  opt.device.poison_margin_bytes = poison_margin_bytes;
  opt.overrides = o;
  std::unique_ptr<Backend> be;
  const Status st = create_sm90_backend(w.view(), opt, &be);
  EXPECT_TRUE(st.ok()) << st.message();
  return be;
}

// Runs one case against the fp64 reference; returns the GPU output.
std::vector<float> check_case(const Case& c, const MoeWeights* given = nullptr) {
  SCOPED_TRACE(describe(c));
  std::cout << "case: " << describe(c) << "\n";
  MoeWeights local;
  if (!given) local = make_random_weights(c.shape, c.seed);
  const MoeWeights& w = given ? *given : local;
  const std::vector<float> x = round_to_bf16(random_floats(size_t(c.tokens * c.shape.hidden), c.seed + 1));
  const std::unique_ptr<Backend> be = make_backend(w, c.overrides);
  if (!be) return {};
  EXPECT_EQ(be->kind(), BackendKind::kSm90);
  return expect_matches_reference(*be, w, x, c.tokens, c.mode, c.seed + 2);
}

constexpr sm90::Overrides kWgmma16{2, 16}, kWgmma32{2, 32}, kWgmma64{2, 64}, kWgmma128{2, 128}, kHeuristic{};

class Sm90Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = sm90_unavailable();
    if (!why.empty()) GTEST_SKIP() << "GPU test skipped: " << why;
  }
};

TEST_F(Sm90Gpu, SmallShapeTokenSweep) {
  // (160, 160) pads to 192: a 128-wide K chunk and a 64-wide tail; w2's 192
  // rows an expert are a 128-row tile and a 64-row one, and odd experts start
  // half-way into a tile of the layout.
  // The cases take the token tiles in turn, so that each tile (even in the
  // quick sweep's 10 cases) runs at least one.
  const int64_t Ts[] = {1, 3, 64, 127, 129, 1000, 4096};
  int i = 0;
  for (int64_t T : Ts) {
    if (quick_sweep() && T > 129) continue;
    for (int64_t k : {1, 4}) {
      const int tile = sm90::kTokenTiles[size_t(i) % std::size(sm90::kTokenTiles)];
      check_case({{8, 160, 160, k}, T, RouteMode::kRandom, uint64_t(100 + i), {2, tile}});
      ++i;
    }
  }
}

TEST_F(Sm90Gpu, OddShapeExpertsAndTopk) {
  // (320, 224) pads to (320, 256): GEMM1's K two chunks and a tail, GEMM2's
  // rows 2.5 tiles an expert; padded columns.
  check_case({{32, 320, 224, 4}, 129, RouteMode::kRandom, 200, kWgmma64});
  check_case({{128, 320, 224, 1}, 127, RouteMode::kRandom, 201, kWgmma128});
  check_case({{32, 320, 224, 1}, 3, RouteMode::kRandom, 202, kWgmma128});
  check_case({{32, 320, 224, 4}, 33, RouteMode::kRandom, 207, kWgmma32});
  check_case({{32, 320, 224, 4}, 17, RouteMode::kRandom, 208, kWgmma16});
  // An odd expert count pads H to 384 (the layout's tiles run over E * Hp rows).
  check_case({{5, 320, 160, 2}, 129, RouteMode::kRandom, 209, kWgmma32});
  // K = 64: every chunk a tail; w2 a 64-row tile an expert (the second
  // consumer warpgroup idles), odd experts in the second half of a tile.
  check_case({{8, 64, 64, 2}, 129, RouteMode::kRandom, 212, kWgmma128});
  check_case({{8, 64, 64, 2}, 65, RouteMode::kRandom, 213, kWgmma16});
  if (quick_sweep()) return;
  check_case({{128, 320, 224, 4}, 1000, RouteMode::kRandom, 203, kWgmma64});
  check_case({{8, 320, 224, 4}, 4096, RouteMode::kRandom, 204, kHeuristic});  // 2048 rows per expert: 192
  check_case({{128, 320, 224, 4}, 4096, RouteMode::kRandom, 205, kWgmma128});
}

TEST_F(Sm90Gpu, GptOssShapes) {
  // H = 2880 is 22 chunks and a 64-wide tail, and 22.5 row tiles of w2 an
  // expert; I = 736 pads to 768 (6 chunks).
  check_case({{32, 2880, 736, 4}, 64, RouteMode::kRandom, 600, kWgmma64});
  check_case({{8, 2880, 2880, 4}, 129, RouteMode::kRandom, 601, kWgmma128});
  check_case({{32, 2880, 736, 4}, 256, RouteMode::kRandom, 607, kWgmma32});
  check_case({{32, 2880, 2880, 4}, 64, RouteMode::kRandom, 608, kWgmma16});  // 8 rows per expert
  if (quick_sweep()) return;
  check_case({{32, 2880, 736, 4}, 1000, RouteMode::kRandom, 602, kHeuristic});   // 125 rows per expert: 128
  check_case({{32, 2880, 2880, 4}, 1000, RouteMode::kRandom, 603, kHeuristic});
  check_case({{128, 2880, 736, 1}, 4096, RouteMode::kRandom, 604, kWgmma128});
  check_case({{128, 2880, 2880, 4}, 3, RouteMode::kRandom, 605, kHeuristic});    // decode path
  check_case({{8, 2880, 736, 4}, 4096, RouteMode::kRandom, 606, kHeuristic});    // 192-token tiles
}

TEST_F(Sm90Gpu, TwoBlockTilesOnATwoStageRing) {
  // H = 7936 (62 chunks) is the widest K whose GEMM1 ring still has two stages
  // in half an SM's shared memory at 48- and 64-token tiles: every chunk's
  // stage is refilled while the other stage is being read.
  ASSERT_EQ(sm90::pipeline_stages(64, 7936), 2);
  ASSERT_EQ(sm90::pipeline_stages(48, 7936), 2);
  check_case({{8, 7936, 224, 4}, 129, RouteMode::kRandom, 210, kWgmma64});
  check_case({{8, 7936, 224, 4}, 97, RouteMode::kRandom, 211, sm90::Overrides{2, 48}});
}

TEST_F(Sm90Gpu, RowCountsAroundTileEdges) {
  // Each token tile against experts whose row counts sit on either side of
  // its edges: one row, the 8-column steps the two-block tiles narrow their
  // wgmmas to (8, 9), a tile less one, a tile, one row into a second tile,
  // two tiles and one. Each token (k = 1) is checked on its own, so one
  // expert's wrong columns cannot hide in the whole output's error.
  const MoeShape s{8, 160, 160, 1};
  for (int tile : sm90::kTokenTiles) {
    const int counts[8] = {1, 8, 9, tile / 2 + 3, tile - 1, tile, tile + 1, 2 * tile + 1};
    Routing r;
    r.topk = 1;
    for (int e = 0; e < 8; ++e)
      for (int i = 0; i < counts[e]; ++i) r.ids.push_back(e);
    // Tokens in an order that interleaves the experts: a fixed shuffle.
    uint64_t state = 700 + uint64_t(tile);
    for (size_t i = r.ids.size() - 1; i > 0; --i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      std::swap(r.ids[i], r.ids[size_t((state >> 33) % (i + 1))]);
    }
    r.tokens = int64_t(r.ids.size());
    r.weights.assign(r.ids.size(), 1.f);
    const uint64_t seed = 710 + uint64_t(tile);
    SCOPED_TRACE("tile " + std::to_string(tile) + " T " + std::to_string(r.tokens) + " seeds: weights " +
                 std::to_string(seed) + ", x " + std::to_string(seed + 1) + ", order " + std::to_string(700 + tile));
    const MoeWeights w = make_random_weights(s, seed);
    const std::vector<float> x = round_to_bf16(random_floats(size_t(r.tokens * s.hidden), seed + 1));
    const std::unique_ptr<Backend> be = make_backend(w, sm90::Overrides{2, tile});
    ASSERT_TRUE(be);
    const RoutingView v = r.view();
    std::vector<float> y(x.size()), ref(x.size());
    ASSERT_TRUE(be->forward_host(x.data(), r.tokens, &v, y.data()).ok());
    ASSERT_TRUE(reference_forward(w.view(), x.data(), r.tokens, &v, ref.data()).ok());
    for (int64_t t = 0; t < r.tokens; ++t) {
      const size_t at = size_t(t * s.hidden);
      const std::vector<float> yt(y.begin() + at, y.begin() + at + s.hidden);
      const std::vector<float> rt(ref.begin() + at, ref.begin() + at + s.hidden);
      ASSERT_GT(testing::l2_norm(rt), 0.0) << "token " << t;
      ASSERT_LE(testing::rel_l2(yt, rt), 2e-2) << "token " << t << " expert " << r.ids[size_t(t)];
    }
  }
}

TEST_F(Sm90Gpu, AllTokensOnOneExpert) {
  check_case({{32, 320, 224, 4}, quick_sweep() ? 129 : 1000, RouteMode::kOneExpert, 300, kWgmma128});
  check_case({{8, 160, 160, 1}, quick_sweep() ? 64 : 4096, RouteMode::kOneExpert, 301, kWgmma64});
  check_case({{8, 160, 160, 4}, quick_sweep() ? 64 : 1000, RouteMode::kOneExpert, 302, kWgmma32});
  check_case({{8, 160, 160, 2}, 129, RouteMode::kOneExpert, 303, kWgmma16});
}

TEST_F(Sm90Gpu, MostExpertsEmpty) {
  check_case({{128, 160, 160, 4}, 3, RouteMode::kFewExperts, 400, kWgmma64});
  check_case({{128, 160, 160, 4}, 65, RouteMode::kFewExperts, 402, kWgmma32});
  check_case({{128, 160, 160, 4}, 7, RouteMode::kFewExperts, 403, kWgmma16});
  check_case({{128, 320, 224, 4}, quick_sweep() ? 64 : 1000, RouteMode::kFewExperts, 401, kWgmma128});
}

TEST_F(Sm90Gpu, FusedRouter) {
  check_case({{8, 160, 160, 4}, 129, RouteMode::kRouter, 500, kWgmma64});
  check_case({{128, 320, 224, 4}, quick_sweep() ? 64 : 1000, RouteMode::kRouter, 501, kWgmma128});
  check_case({{8, 160, 160, 4}, 1031, RouteMode::kRouter, 502, kWgmma128});  // a last router block of 7 tokens
}

TEST_F(Sm90Gpu, ExtremeScales) {
  // Scales across the E8M0 range: tiny (s < 8, including 0), the neutral 127
  // and s > 128 (the two-multiply dequantisation the kernel switches to).
  const MoeShape s{8, 160, 160, 4};
  MoeWeights w = make_random_weights(s, 700);
  const std::vector<uint8_t> pool = {0, 1, 5, 118, 120, 122, 127, 128, 129, 131};
  for (size_t i = 0; i < w.w13_scales.size(); ++i) w.w13_scales[i] = pool[(i * 7) % pool.size()];
  for (size_t i = 0; i < w.w2_scales.size(); ++i) w.w2_scales[i] = uint8_t(118 + (i * 5) % 14);
  check_case({s, 64, RouteMode::kRandom, 700, kWgmma64}, &w);
  check_case({s, 129, RouteMode::kRandom, 701, kWgmma128}, &w);
  check_case({s, 33, RouteMode::kRandom, 702, kWgmma32}, &w);
  check_case({s, 17, RouteMode::kRandom, 703, kWgmma16}, &w);
}

TEST_F(Sm90Gpu, DecodePath) {
  check_case({{32, 320, 224, 4}, 1, RouteMode::kRandom, 750, kHeuristic});
  check_case({{32, 320, 224, 4}, 1000, RouteMode::kRandom, 751, sm90::Overrides{1, 0}});
  // 64 pairs: expert-grouped 8-token tiles, GEMM1's blocks of 4 warps on H = 2880 (22 chunks and a tail).
  check_case({{32, 2880, 736, 4}, 16, RouteMode::kRandom, 752, kHeuristic});
  // 128 pairs on 128 experts (at most 8 rows an expert): still the decode path.
  check_case({{128, 2880, 736, 4}, 32, RouteMode::kRandom, 753, kHeuristic});
}

// The decode in one cooperative launch and as a chain of kernels on the sm90
// plan's weights (128-row code tiles, w13 in chunk order): the
// tensor-parallel shards' I and the full one, T = 1 to 16, the router's
// routing, one expert in every token (two 8-pair tiles of it).
TEST_F(Sm90Gpu, OneLaunchDecode) {
  const sm90::Overrides one_launch{1, 0, portable::Overrides{0, 0, portable::kFusedDecodeOn}};
  const sm90::Overrides chain{1, 0, portable::Overrides{0, 0, portable::kFusedDecodeOff}};
  for (const sm90::Overrides& o : {one_launch, chain}) {
    SCOPED_TRACE(o.decode.fused_decode == portable::kFusedDecodeOn ? "one launch" : "chain");
    check_case({{32, 2880, 384, 4}, 1, RouteMode::kRandom, 760, o});
    check_case({{128, 2880, 736, 4}, 4, RouteMode::kRouter, 761, o});
    check_case({{32, 2880, 1440, 4}, 16, RouteMode::kRandom, 762, o});
    if (!quick_sweep()) check_case({{8, 2880, 2880, 4}, 2, RouteMode::kRandom, 763, o});
    check_case({{32, 320, 224, 8}, 16, RouteMode::kOneExpert, 764, o});
  }
}

// Bit for bit the same output from the same input, whichever blocks claim
// which items: x, another input, then x again on one backend, and the other
// input on a second backend. Both backends run without the poisoned workspace
// of the other cases: its 0xFF fill sets the GEMMs' item counters to -1, from
// which the claims still work, so it would hide a forward that does not start
// them afresh itself. Such a forward would claim no items past each block's
// first, and its output would keep rows of the forward before it.
TEST_F(Sm90Gpu, BitwiseReproducible) {
  const MoeShape s{32, 320, 224, 4};
  const MoeWeights w = make_random_weights(s, 800);
  for (int tile : sm90::kTokenTiles) {
    SCOPED_TRACE("tile " + std::to_string(tile));
    const sm90::Overrides o{2, tile};
    // 1000 tokens: 125 rows an expert, so at 16-, 32-, 48- and 96-token tiles
    // GEMM1 has more items than blocks (about 1000 on 264 at 16) and claims the rest.
    const int64_t T = quick_sweep() ? 129 : 1000;
    const std::vector<float> x = round_to_bf16(random_floats(size_t(T * s.hidden), 801));
    const std::vector<float> other = round_to_bf16(random_floats(size_t(T * s.hidden), 802));
    const std::unique_ptr<Backend> be = make_backend(w, o, 0), fresh = make_backend(w, o, 0);
    ASSERT_TRUE(be && fresh);
    std::vector<float> y1(x.size()), y_other(x.size()), y2(x.size()), y_fresh(x.size());
    ASSERT_TRUE(be->forward_host(x.data(), T, nullptr, y1.data()).ok());
    ASSERT_TRUE(be->forward_host(other.data(), T, nullptr, y_other.data()).ok());
    ASSERT_TRUE(be->forward_host(x.data(), T, nullptr, y2.data()).ok());
    ASSERT_TRUE(fresh->forward_host(other.data(), T, nullptr, y_fresh.data()).ok());
    EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(y_other.data(), y_fresh.data(), y1.size() * sizeof(float)));
    EXPECT_NE(0, std::memcmp(y1.data(), y_other.data(), y1.size() * sizeof(float)));
  }
}

// Two forwards back to back on one workspace (expect_back_to_back_forwards):
// the decode path at one token, 3 and 16 (one launch), the chain of decode
// kernels at 3 (the per-tile waits), then the wgmma path.
TEST_F(Sm90Gpu, ForwardsBackToBackOnOneWorkspace) {
  const MoeShape s{32, 320, 224, 4};
  const MoeWeights w = make_random_weights(s, 950);
  PreparedWeights prep;
  ASSERT_TRUE(prepare_weights(make_plan(BackendKind::kSm90, s), w.view(), &prep).ok());
  const sm90::Overrides chain{1, 0, portable::Overrides{0, 0, portable::kFusedDecodeOff}};
  for (const auto& [T, o] : {std::pair{int64_t(1), kHeuristic}, {int64_t(3), kHeuristic}, {int64_t(16), kHeuristic},
                            {int64_t(3), chain}, {int64_t(3), kWgmma16}, {int64_t(200), kHeuristic}}) {
    // T and the seeds are in the helper's own trace.
    SCOPED_TRACE("path " + std::to_string(o.path) + " tile " + std::to_string(o.token_tile));
    std::unique_ptr<smxx::DeviceForward> fwd;
    ASSERT_TRUE(sm90::make_forward(prep, kPoison, o, &fwd).ok());
    testing::expect_back_to_back_forwards(*fwd, w, T, 951);
  }
}

TEST_F(Sm90Gpu, NaNActivationStaysInItsToken) {
  // A NaN in one token's activations makes that token's whole output NaN, as
  // in the reference (SwiGLU's clamps keep a NaN), and leaves every other
  // token's output bit for bit as without it: wgmma tiles of each width the
  // token lands in, and the decode kernels.
  const MoeShape s{8, 160, 160, 2};
  const MoeWeights w = make_random_weights(s, 902);
  const int64_t T = 40, bad = 5;
  const std::vector<float> x = round_to_bf16(random_floats(size_t(T * s.hidden), 903));
  std::vector<float> x_nan = x;
  x_nan[size_t(bad * s.hidden + 17)] = std::numeric_limits<float>::quiet_NaN();
  const Routing r = make_random_routing(T, s.experts, s.topk, 904);
  const RoutingView v = r.view();
  for (const sm90::Overrides& o : {kWgmma16, kWgmma64, kWgmma128, sm90::Overrides{1, 0}}) {
    SCOPED_TRACE("path " + std::to_string(o.path) + " tile " + std::to_string(o.token_tile));
    const std::unique_ptr<Backend> be = make_backend(w, o);
    ASSERT_TRUE(be);
    std::vector<float> y(x.size()), y_nan(x.size());
    ASSERT_TRUE(be->forward_host(x.data(), T, &v, y.data()).ok());
    ASSERT_TRUE(be->forward_host(x_nan.data(), T, &v, y_nan.data()).ok());
    EXPECT_GT(testing::l2_norm(y), 0.0);
    for (int64_t t = 0; t < T; ++t) {
      const float* row = y_nan.data() + t * s.hidden;
      if (t == bad) {
        for (int64_t h = 0; h < s.hidden; ++h) ASSERT_TRUE(std::isnan(row[h])) << "h " << h;
      } else {
        EXPECT_EQ(0, std::memcmp(row, y.data() + t * s.hidden, size_t(s.hidden) * sizeof(float))) << "token " << t;
      }
    }
  }
}

TEST_F(Sm90Gpu, CreateBackendAndTiming) {
  const MoeShape s{8, 160, 160, 2};
  const MoeWeights w = make_random_weights(s, 900);
  std::unique_ptr<Backend> be;
  const Status st = create_backend(BackendKind::kSm90, w.view(), &be);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(be->kind(), BackendKind::kSm90);
  for (int64_t T : {int64_t(8), int64_t(1024)}) {  // decode path (16 pairs), then wgmma (256 rows per expert)
    ForwardTiming t;
    const Status ts = be->time_forward(T, 2, 5, 1, 0.0, 0.0, &t);
    ASSERT_TRUE(ts.ok()) << ts.message();
    EXPECT_GT(t.median_us, 0.0);
    EXPECT_LE(t.min_us, t.median_us);
    EXPECT_GT(t.chained_median_us, 0.0);
  }
}

TEST_F(Sm90Gpu, RejectsBadRouting) {
  const MoeShape s{8, 160, 160, 2};
  const MoeWeights w = make_random_weights(s, 901);
  const std::unique_ptr<Backend> be = make_backend(w, kWgmma64);
  ASSERT_TRUE(be);
  std::vector<float> x(160), y(160);
  Routing r = make_random_routing(1, 8, 2, 3);
  r.ids[0] = 8;  // out of range
  const RoutingView v = r.view();
  EXPECT_FALSE(be->forward_host(x.data(), 1, &v, y.data()).ok());
}

}  // namespace
}  // namespace mxmoe
#endif  // MXMOE_WITH_SM90
