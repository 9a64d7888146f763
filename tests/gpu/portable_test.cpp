// The portable CUDA backend against the CPU reference on the same MXFP4 bytes.
// Every case runs with poisoned margins around each prepared tensor and a
// poisoned workspace (see PortableOptions). MXMOE_TEST_QUICK=1 keeps a reduced
// sweep (for racecheck/synccheck runs).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#ifdef MXMOE_WITH_CUDA
#include "cuda/portable/portable_backend.h"
#endif
#include "mxmoe/backend.h"
#include "support/back_to_back.h"
#include "support/test_support.h"

#ifndef MXMOE_WITH_CUDA
TEST(PortableGpu, NotBuilt) { GTEST_SKIP() << "GPU test skipped: this build has no CUDA"; }
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

struct Case {
  MoeShape shape;
  int64_t tokens;
  RouteMode mode;
  uint64_t seed;
};

// A case of a decode sweep, and whether MXMOE_TEST_QUICK keeps it.
struct DecodeCase {
  Case c;
  bool quick;
};

std::string describe(const Case& c) {
  return describe_case(c.shape, c.tokens, c.mode) + " seed=" + std::to_string(c.seed);
}

// Runs one case; returns the GPU output for further checks.
std::vector<float> check_case(const Case& c, const MoeWeights* given = nullptr,
                              const portable::Overrides& overrides = {}) {
  SCOPED_TRACE(describe(c) + " down_combine_warps=" + std::to_string(overrides.down_combine_warps));
  MoeWeights local;
  if (!given) local = make_random_weights(c.shape, c.seed);
  const MoeWeights& w = given ? *given : local;
  const std::vector<float> x = round_to_bf16(random_floats(size_t(c.tokens * c.shape.hidden), c.seed + 1));
  std::unique_ptr<Backend> be;
  const Status cs = create_portable_backend(w.view(), PortableOptions{{kPoison}, overrides}, &be);
  EXPECT_TRUE(cs.ok()) << cs.message();
  if (!cs.ok()) return {};
  return expect_matches_reference(*be, w, x, c.tokens, c.mode, c.seed + 2);
}

class PortableGpu : public ::testing::Test {
 protected:
  void SetUp() override { MXMOE_SKIP_WITHOUT_GPU(); }
};

TEST_F(PortableGpu, SmallShapeTokenSweep) {
  // Every T of the sweep at (160, 160), E = 8, cycling top-k through 1, 2, 4, 8.
  const int64_t Ts[] = {1, 2, 3, 7, 64, 127, 129, 1000, 4096};
  const int64_t ks[] = {1, 2, 4, 8};
  int i = 0;
  for (int64_t T : Ts) {
    if (quick_sweep() && T > 129) continue;
    const int64_t k = ks[i % 4];
    check_case({{8, 160, 160, k}, T, RouteMode::kRandom, uint64_t(100 + i)});
    ++i;
  }
}

TEST_F(PortableGpu, OddShapeExpertsAndTopk) {
  // (320, 224): Hp = 320, Ip = 256, so intermediate padding and the 64-wide K tail.
  check_case({{32, 320, 224, 4}, 1, RouteMode::kRandom, 200});
  check_case({{32, 320, 224, 8}, 129, RouteMode::kRandom, 201});
  check_case({{128, 320, 224, 2}, 127, RouteMode::kRandom, 202});
  if (quick_sweep()) return;
  check_case({{32, 320, 224, 4}, 1000, RouteMode::kRandom, 203});
  // T*k = 16384 pairs over 128 experts: many tiles, large grouping chunks.
  check_case({{128, 320, 224, 4}, 4096, RouteMode::kRandom, 204});
  check_case({{8, 320, 224, 8}, 4096, RouteMode::kRandom, 205});
}

TEST_F(PortableGpu, AllTokensOnOneExpert) {
  check_case({{32, 320, 224, 4}, quick_sweep() ? 129 : 1000, RouteMode::kOneExpert, 300});
  check_case({{8, 160, 160, 1}, quick_sweep() ? 64 : 4096, RouteMode::kOneExpert, 301});
}

TEST_F(PortableGpu, MostExpertsEmpty) {
  check_case({{128, 160, 160, 2}, 3, RouteMode::kFewExperts, 400});
  check_case({{128, 320, 224, 4}, quick_sweep() ? 64 : 1000, RouteMode::kFewExperts, 401});
}

TEST_F(PortableGpu, FusedRouter) {
  check_case({{8, 160, 160, 2}, 129, RouteMode::kRouter, 500});
  check_case({{128, 320, 224, 8}, quick_sweep() ? 64 : 1000, RouteMode::kRouter, 501});
  check_case({{32, 2880, 736, 4}, quick_sweep() ? 7 : 64, RouteMode::kRouter, 502});
  // The router kernel takes 16 tokens a block: 1031 ends on a block of seven.
  check_case({{8, 160, 160, 2}, 1031, RouteMode::kRouter, 503});
}

TEST_F(PortableGpu, GptOssHidden) {
  // H = 2880: Hp = 2880 = 22 full 128-chunks + a 64 tail.
  check_case({{32, 2880, 736, 4}, 1, RouteMode::kRandom, 600});
  if (quick_sweep()) return;
  check_case({{32, 2880, 736, 4}, 7, RouteMode::kRandom, 601});
  check_case({{32, 2880, 736, 4}, 129, RouteMode::kRandom, 602});
  check_case({{32, 2880, 2880, 4}, 1, RouteMode::kRandom, 603});
  check_case({{8, 2880, 2880, 4}, 64, RouteMode::kRandom, 604});
  check_case({{32, 2880, 2880, 4}, 1000, RouteMode::kRandom, 605});
}

TEST_F(PortableGpu, PerPairDecode) {
  // Up to 24 pairs run as tiles that find their expert's pairs themselves
  // (per_pair_decode), their rows summed per token by the combine kernel at
  // the pairs' own indices: the router's ids, one expert in every slot (one
  // tile whose columns share a token, at one and two tokens), k = 8, several
  // tokens, gpt-oss's H = I = 2880 (22 chunks and a 64-wide tail), the
  // 64-wide K tail with padded rows (Hp = 320, Ip = 256), and more than 8
  // pairs of one expert (a second tile from its 9th pair on; 24 pairs: three,
  // the last led by pair 16). The chain of kernels, not the one-launch decode.
  const portable::Overrides chain{0, 0, portable::kFusedDecodeOff};
  check_case({{32, 2880, 736, 4}, 1, RouteMode::kRouter, 650}, nullptr, chain);
  check_case({{32, 320, 224, 4}, 1, RouteMode::kRepeatedExpert, 651}, nullptr, chain);
  check_case({{32, 160, 160, 8}, 1, RouteMode::kRandom, 652}, nullptr, chain);
  check_case({{32, 320, 224, 4}, 2, RouteMode::kRandom, 660}, nullptr, chain);
  check_case({{32, 320, 224, 4}, 2, RouteMode::kRepeatedExpert, 661}, nullptr, chain);
  check_case({{8, 2880, 2880, 4}, 1, RouteMode::kRandom, 662}, nullptr, chain);
  check_case({{128, 320, 224, 4}, 4, RouteMode::kRandom, 653}, nullptr, chain);
  check_case({{128, 320, 224, 1}, 3, RouteMode::kOneExpert, 654}, nullptr, chain);
  check_case({{8, 2880, 736, 4}, 6, RouteMode::kRandom, 655}, nullptr, chain);
  check_case({{32, 320, 224, 4}, 3, RouteMode::kRepeatedExpert, 656}, nullptr, chain);
  check_case({{128, 320, 224, 1}, 12, RouteMode::kOneExpert, 657}, nullptr, chain);
  check_case({{32, 160, 160, 1}, 24, RouteMode::kOneExpert, 658}, nullptr, chain);
  check_case({{32, 320, 224, 4}, 7, RouteMode::kRouter, 659}, nullptr, chain);
}

TEST_F(PortableGpu, DecodeGemm2WithTheCombine) {
  // The decode's GEMM2 with the combine in it (down_combine_warps): blocks of
  // 8 and 16 warps, and GEMM2 and the combine apart, on gpt-oss's H = 2880
  // with the tensor-parallel shards' I (1440, 736 padded to 768, 384) and the
  // full I (22 chunks and a 64-wide tail in each slot), on per-pair tiles (1
  // to 6 tokens) and expert-grouped 8-token tiles (pair rows from the
  // grouping), top-k of 1 to 8 (k = 3 leaves two of 8 warps idle), every
  // slot on one expert, most experts empty, the router's routing; GEMM1 in
  // blocks of 16 warps where its grid is one block an SM or less (I = 384 at
  // one token).
  const portable::Overrides fused8{8, 0, portable::kFusedDecodeOff}, fused16{16, 0, portable::kFusedDecodeOff},
      split{portable::kDownCombineSplit, 0, portable::kFusedDecodeOff};
  const DecodeCase cases[] = {
      {{{32, 2880, 384, 4}, 1, RouteMode::kRandom, 1100}, true},
      {{{32, 2880, 736, 4}, 2, RouteMode::kRandom, 1101}, true},
      {{{32, 2880, 1440, 4}, 3, RouteMode::kRandom, 1102}, false},
      {{{32, 2880, 384, 4}, 16, RouteMode::kRandom, 1103}, true},
      {{{8, 2880, 2880, 4}, 1, RouteMode::kRandom, 1104}, false},
      {{{32, 320, 224, 3}, 5, RouteMode::kRandom, 1105}, true},
      {{{32, 160, 160, 8}, 3, RouteMode::kRandom, 1106}, true},
      {{{32, 320, 224, 1}, 24, RouteMode::kOneExpert, 1107}, true},
      {{{32, 320, 224, 4}, 2, RouteMode::kRepeatedExpert, 1108}, true},
      {{{32, 2880, 736, 4}, 4, RouteMode::kRouter, 1109}, true},
      {{{128, 320, 224, 4}, 32, RouteMode::kFewExperts, 1110}, true},
      {{{32, 320, 224, 4}, 12, RouteMode::kOneExpert, 1111}, true},
      {{{128, 2880, 1440, 4}, 8, RouteMode::kRouter, 1112}, false},
  };
  for (const DecodeCase& d : cases) {
    if (quick_sweep() && !d.quick) continue;
    for (const portable::Overrides& o : {fused8, fused16, split}) check_case(d.c, nullptr, o);
  }
}

TEST_F(PortableGpu, OneLaunchDecode) {
  // The decode in one cooperative launch (fused_decode), forced on up to its
  // 128 pairs: gpt-oss's H = 2880 with the full I and the tensor-parallel
  // shards' (1440, 736 padded to 768, 384), T = 1 to 16, top-k 1 to 8, the
  // router's routing, every slot on one expert (ids repeat within a token),
  // one expert in every token (several 8-pair tiles of it), most experts
  // empty, 256 experts (the schedule's scan over 8 steps of 32), the K tail
  // with padded rows (Hp = 320, Ip = 256).
  const portable::Overrides on{0, 0, portable::kFusedDecodeOn};
  const DecodeCase cases[] = {
      {{{32, 2880, 384, 4}, 1, RouteMode::kRandom, 1200}, true},
      {{{32, 2880, 384, 4}, 16, RouteMode::kRandom, 1201}, true},
      {{{32, 2880, 736, 4}, 2, RouteMode::kRandom, 1202}, true},
      {{{32, 2880, 736, 4}, 5, RouteMode::kRouter, 1203}, true},
      {{{128, 2880, 1440, 4}, 3, RouteMode::kRandom, 1204}, false},
      {{{128, 2880, 1440, 4}, 9, RouteMode::kRouter, 1205}, false},
      {{{8, 2880, 2880, 4}, 1, RouteMode::kRandom, 1206}, false},
      {{{8, 2880, 2880, 4}, 16, RouteMode::kRandom, 1207}, false},
      {{{32, 320, 224, 8}, 16, RouteMode::kRandom, 1208}, true},
      {{{32, 160, 160, 1}, 16, RouteMode::kOneExpert, 1209}, true},
      {{{32, 320, 224, 4}, 12, RouteMode::kOneExpert, 1210}, true},
      {{{32, 320, 224, 3}, 7, RouteMode::kRepeatedExpert, 1211}, true},
      {{{128, 320, 224, 4}, 3, RouteMode::kFewExperts, 1212}, true},
      {{{256, 320, 224, 2}, 13, RouteMode::kRandom, 1213}, true},
      {{{32, 160, 160, 5}, 1, RouteMode::kRouter, 1214}, true},
  };
  for (const DecodeCase& d : cases)
    if (!quick_sweep() || d.quick) check_case(d.c, nullptr, on);
}

TEST_F(PortableGpu, ExtremeScales) {
  // Scales across the E8M0 range the bf16 fold must handle: tiny (s < 8,
  // including 0), the neutral 127 and s > 128 (two-step fold).
  const MoeShape s{8, 160, 160, 2};
  MoeWeights w = make_random_weights(s, 700);
  std::vector<uint8_t> pool = {0, 1, 5, 118, 120, 122, 127, 128, 129, 131};
  for (size_t i = 0; i < w.w13_scales.size(); ++i) w.w13_scales[i] = pool[(i * 7) % pool.size()] ;
  for (size_t i = 0; i < w.w2_scales.size(); ++i) w.w2_scales[i] = uint8_t(118 + (i * 5) % 14);
  check_case({s, 64, RouteMode::kRandom, 700}, &w);
}

TEST_F(PortableGpu, BitwiseReproducible) {
  const MoeShape s{32, 320, 224, 4};
  const MoeWeights w = make_random_weights(s, 800);
  for (int64_t T : {int64_t(1), int64_t(7), int64_t(16), int64_t(quick_sweep() ? 129 : 1000)}) {
    const std::vector<float> x = round_to_bf16(random_floats(size_t(T * s.hidden), 801));
    std::unique_ptr<Backend> be;
    ASSERT_TRUE(create_portable_backend(w.view(), PortableOptions{{kPoison}}, &be).ok());
    std::vector<float> y1(x.size()), y2(x.size());
    ASSERT_TRUE(be->forward_host(x.data(), T, nullptr, y1.data()).ok());
    ASSERT_TRUE(be->forward_host(x.data(), T, nullptr, y2.data()).ok());
    EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float))) << "T=" << T;
  }
}

// Two forwards back to back on one workspace (expect_back_to_back_forwards):
// per-pair decode tiles at 1 token and at 3 (with the per-tile waits where
// GEMM2 and the combine are apart), expert-grouped decode tiles (16), and
// prefill tiles (200).
TEST_F(PortableGpu, ForwardsBackToBackOnOneWorkspace) {
  const MoeShape s{32, 320, 224, 4};
  const MoeWeights w = make_random_weights(s, 960);
  PreparedWeights prep;
  ASSERT_TRUE(prepare_weights(make_plan(BackendKind::kPortable, s), w.view(), &prep).ok());
  // The decode in one launch and as a chain of kernels: the per-pair decode
  // with GEMM2 and the combine in one kernel and apart.
  const portable::Overrides chain{0, 0, portable::kFusedDecodeOff};
  const portable::Overrides split{portable::kDownCombineSplit, 0, portable::kFusedDecodeOff};
  const portable::Overrides one_launch{0, 0, portable::kFusedDecodeOn};
  for (const portable::Overrides& o : {chain, split, one_launch}) {
    std::unique_ptr<smxx::DeviceForward> fwd;
    ASSERT_TRUE(portable::make_forward(prep, kPoison, &fwd, o).ok());
    for (int64_t T : {int64_t(1), int64_t(3), int64_t(16), int64_t(200)})
      testing::expect_back_to_back_forwards(*fwd, w, T, 961);
  }
}

// One layer's forwards on two streams at once, each with its workspace: the
// one-launch decode keeps its counts in the workspace, so they do not meet.
TEST_F(PortableGpu, ForwardsOnTwoStreamsAtOnce) {
  const MoeShape s{32, 2880, 384, 4};
  const MoeWeights w = make_random_weights(s, 970);
  PreparedWeights prep;
  ASSERT_TRUE(prepare_weights(make_plan(BackendKind::kPortable, s), w.view(), &prep).ok());
  std::unique_ptr<smxx::DeviceForward> fwd;
  ASSERT_TRUE(portable::make_forward(prep, kPoison, &fwd, portable::Overrides{0, 0, portable::kFusedDecodeOn}).ok());
  for (int64_t T : {int64_t(1), int64_t(4), int64_t(16)}) testing::expect_concurrent_forwards(*fwd, w, T, 971);
}

TEST_F(PortableGpu, CreateBackendDispatch) {
  const MoeShape s{8, 160, 160, 2};
  const MoeWeights w = make_random_weights(s, 900);
  std::unique_ptr<Backend> be;
  const Status st = create_backend(BackendKind::kPortable, w.view(), &be);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(be->kind(), BackendKind::kPortable);
  ForwardTiming t;
  const Status ts = be->time_forward(16, 2, 5, 1, 0.0, 0.0, &t);
  ASSERT_TRUE(ts.ok()) << ts.message();
  EXPECT_GT(t.median_us, 0.0);
  EXPECT_LE(t.min_us, t.median_us);
  EXPECT_GT(t.chained_median_us, 0.0);
  EXPECT_GE(t.iterations, 5) << "whole batches of one replay per routing set, at least the forwards asked for";
  EXPECT_EQ(t.iterations % 2, 0);
  // One time and one SM clock per batch; every clock between a tenth of the
  // device's boost clock and the boost clock (2% over for the probe's window).
  ASSERT_EQ(t.batch_us.size(), size_t(t.iterations / 2));
  ASSERT_EQ(t.batch_sm_clock_mhz.size(), t.batch_us.size());
  int dev = 0, khz = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev), cudaSuccess);
  const double boost_mhz = khz / 1e3;
  auto expect_clocks = [&](const std::vector<double>& clocks, double median) {
    for (double mhz : clocks) {
      EXPECT_GT(mhz, 0.1 * boost_mhz);
      EXPECT_LT(mhz, 1.02 * boost_mhz);
    }
    const auto [lo, hi] = std::minmax_element(clocks.begin(), clocks.end());
    EXPECT_GE(median, *lo);
    EXPECT_LE(median, *hi);
  };
  expect_clocks(t.batch_sm_clock_mhz, t.median_sm_clock_mhz);
  for (double us : t.batch_us) EXPECT_GE(us, t.min_us);
  ASSERT_EQ(t.chained_batch_us.size(), t.batch_us.size());
  ASSERT_EQ(t.chained_batch_sm_clock_mhz.size(), t.batch_us.size());
  expect_clocks(t.chained_batch_sm_clock_mhz, t.chained_median_sm_clock_mhz);
  EXPECT_EQ(t.power_w, 0.0) << "no power window asked for";
  EXPECT_TRUE(t.power_note.empty());
}

// The board's power over a window of replays after the timings: a datacenter
// board draws between its idle power (tens of watts) and its cap (hundreds),
// and the energy per forward is that power times the window's time per
// forward, which is near the timed one. Where the driver's NVML cannot be
// read, the timing says why and the rest of the timing stands.
TEST_F(PortableGpu, BoardPowerWindow) {
  const MoeShape s{8, 160, 160, 2};
  const MoeWeights w = make_random_weights(s, 902);
  std::unique_ptr<Backend> be;
  ASSERT_TRUE(create_portable_backend(w.view(), &be).ok());
  ForwardTiming t;
  const Status ts = be->time_forward(16, 2, 5, 1, 0.0, 0.3, &t);
  ASSERT_TRUE(ts.ok()) << ts.message();
  EXPECT_GT(t.median_us, 0.0);
  if (t.power_w == 0) {
    EXPECT_FALSE(t.power_note.empty()) << "a window was asked for: no power must say why";
    std::printf("board power not measured here: %s\n", t.power_note.c_str());
    return;
  }
  EXPECT_TRUE(t.power_note.empty()) << t.power_note;
  EXPECT_GT(t.power_w, 10.0);
  EXPECT_LT(t.power_w, 2000.0);
  EXPECT_GT(t.power_window_us, 0.25 * t.median_us);
  EXPECT_LT(t.power_window_us, 4.0 * t.median_us);
  EXPECT_DOUBLE_EQ(t.energy_mj, t.power_w * t.power_window_us * 1e-3);
  EXPECT_GT(t.power_window_sm_clock_mhz, 0.0);
  std::printf("board power: %.0f W, %.1f us and %.3f mJ per forward, %.0f MHz\n", t.power_w, t.power_window_us,
              t.energy_mj, t.power_window_sm_clock_mhz);
}

TEST_F(PortableGpu, RejectsBadRouting) {
  const MoeShape s{8, 160, 160, 2};
  const MoeWeights w = make_random_weights(s, 901);
  std::unique_ptr<Backend> be;
  ASSERT_TRUE(create_portable_backend(w.view(), &be).ok());
  std::vector<float> x(160), y(160);
  Routing r = make_random_routing(1, 8, 2, 3);
  r.ids[0] = 8;  // out of range
  const RoutingView v = r.view();
  EXPECT_FALSE(be->forward_host(x.data(), 1, &v, y.data()).ok());
}

// The decode GEMMs hold a K chunk's code offset in 32 bits: moe_forward
// refuses a padded K past 2^24 before it touches any pointer.
TEST_F(PortableGpu, RefusesPaddedKPast2To24) {
  portable::DeviceWeights w;
  w.shape = MoeShape{4, (int64_t(1) << 24) + 64, 64, 2};
  w.hidden_padded = w.shape.hidden;
  w.intermediate_padded = 64;
  uint16_t x = 0;
  float y = 0.f;
  portable::ForwardArgs a;
  a.x = &x;
  a.tokens = 1;
  a.y = &y;
  alignas(256) static char workspace[256];
  const Status st = portable::moe_forward(w, a, workspace, sizeof(workspace), nullptr);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported) << st.message();
  EXPECT_NE(st.message().find("at most 16777216"), std::string::npos) << st.message();
}

// x and y must be 16-byte aligned (whole-row loads and stores); moe_forward
// and route_topk refuse others before they touch any pointer.
TEST_F(PortableGpu, RefusesMisalignedXAndY) {
  portable::DeviceWeights w;
  w.shape = MoeShape{4, 64, 64, 2};
  w.hidden_padded = 64;
  w.intermediate_padded = 64;
  w.w13_layout = W13Layout::kInterleaved;
  alignas(256) static char buffer[1024];
  alignas(256) static char workspace[256];
  const uint16_t* aligned_x = reinterpret_cast<const uint16_t*>(buffer);
  float* aligned_y = reinterpret_cast<float*>(buffer + 512);
  portable::ForwardArgs a;
  a.tokens = 1;
  a.x = reinterpret_cast<const uint16_t*>(buffer + 2);
  a.y = aligned_y;
  Status st = portable::moe_forward(w, a, workspace, sizeof(workspace), nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
  EXPECT_NE(st.message().find("x must be 16-byte aligned"), std::string::npos) << st.message();
  a.x = aligned_x;
  a.y = reinterpret_cast<float*>(buffer + 512 + 4);
  st = portable::moe_forward(w, a, workspace, sizeof(workspace), nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
  EXPECT_NE(st.message().find("y must be 16-byte aligned"), std::string::npos) << st.message();
  int32_t ids[2];
  float weights[2];
  st = portable::route_topk(w, reinterpret_cast<const uint16_t*>(buffer + 8), 1, ids, weights, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
  EXPECT_NE(st.message().find("x must be 16-byte aligned"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace mxmoe
#endif  // MXMOE_WITH_CUDA
