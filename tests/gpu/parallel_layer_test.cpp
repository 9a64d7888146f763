// The multi-GPU layer (tensor and expert parallel over NCCL) against the
// single-GPU backend its ranks run (portable; sm90 for tensor parallel on
// SM90 GPUs) and the CPU reference, and the expert-parallel
// kernels against the host dispatch plan. Cases needing more GPUs than are
// visible skip, saying how many they need. MXMOE_TEST_QUICK=1 keeps a reduced
// sweep (for compute-sanitizer runs).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "mxmoe/backend.h"
#include "mxmoe/device.h"
#include "mxmoe/parallel.h"
#include "mxmoe/reference.h"
#include "support/test_support.h"

#ifndef MXMOE_WITH_NCCL
TEST(ParallelGpu, NotBuilt) { GTEST_SKIP() << "GPU test skipped: this build has no NCCL"; }
#else
#include <cuda_runtime.h>

#include "cuda/parallel/smxx_ep_dispatch.h"
#include "cuda/portable/portable_backend.h"
#include "parallel/expert_dispatch.h"

namespace mxmoe {
namespace {

using testing::l2_norm;
using testing::random_floats;
using testing::rel_l2;
using testing::round_to_bf16;
using testing::make_test_routing;
using testing::quick_sweep;
using testing::route_mode_name;
using testing::RouteMode;

// Skips the test unless `n` GPUs are visible.
#define SKIP_WITHOUT_GPUS(n)                                                                \
  do {                                                                                      \
    MXMOE_SKIP_WITHOUT_GPU();                                                               \
    const size_t mxmoe_have_ = list_devices().size();                                       \
    if (mxmoe_have_ < size_t(n))                                                            \
      GTEST_SKIP() << "GPU test skipped: needs " << (n) << " GPUs, " << mxmoe_have_ << " visible"; \
  } while (0)

struct Scenario {
  MoeShape shape;
  std::vector<int64_t> tokens;
  std::vector<RouteMode> modes;
};

// Every shape gets T = 1, 3, 129; the small one every routing, the GPT-OSS
// hidden size two each (the CPU reference dominates the run time). MXMOE_TEST_QUICK=1 (for
// compute-sanitizer runs) keeps the small shape and one H = 2880 forward.
std::vector<Scenario> scenarios() {
  const std::vector<RouteMode> all = {RouteMode::kRouter, RouteMode::kRandom, RouteMode::kOneExpert,
                                      RouteMode::kLowExperts};
  if (quick_sweep()) return {{{16, 160, 160, 4}, {1, 3, 129}, all}, {{32, 2880, 736, 4}, {1}, {RouteMode::kRandom}}};
  return {{{16, 160, 160, 4}, {1, 3, 129}, all},
          {{32, 2880, 736, 4}, {1, 3, 129}, {RouteMode::kRouter, RouteMode::kRandom}},
          {{32, 2880, 2880, 4}, {1, 3, 129}, {RouteMode::kOneExpert, RouteMode::kLowExperts}}};
}

// Skips the test unless `n` GPUs are visible, the first n are SM90 and the
// build has the sm90 backend.
#ifdef MXMOE_WITH_SM90
#define SKIP_WITHOUT_SM90_GPUS(n)                                                           \
  do {                                                                                      \
    SKIP_WITHOUT_GPUS(n);                                                                   \
    const std::vector<DeviceInfo> mxmoe_devs_ = list_devices();                             \
    for (int i = 0; i < (n); ++i)                                                           \
      if (mxmoe_devs_[size_t(i)].sm != 90)                                                  \
        GTEST_SKIP() << "GPU test skipped: device " << i << " is SM" << mxmoe_devs_[size_t(i)].sm \
                     << ", the sm90 backend needs SM90";                                    \
  } while (0)
#else
#define SKIP_WITHOUT_SM90_GPUS(n) GTEST_SKIP() << "GPU test skipped: this build has no sm_90a code"
#endif

std::unique_ptr<ParallelLayer> make_layer(const MoeWeights& w, ParallelMode mode, int size,
                                          BackendKind backend = BackendKind::kPortable) {
  ParallelConfig c;
  c.mode = mode;
  c.size = size;
  c.backend = backend;
  std::unique_ptr<ParallelLayer> layer;
  const Status s = create_parallel_layer(w.view(), c, &layer);
  EXPECT_TRUE(s.ok()) << s.message();
  return layer;
}

// Every scenario through the layer, the single-GPU backend and the reference.
void check_against_single_gpu(ParallelMode mode, int size, BackendKind backend = BackendKind::kPortable) {
  uint64_t seed = 100;
  for (const Scenario& sc : scenarios()) {
    const MoeShape& s = sc.shape;
    const MoeWeights w = make_random_weights(s, seed);
    std::unique_ptr<ParallelLayer> layer = make_layer(w, mode, size, backend);
    std::unique_ptr<Backend> single;
    const Status cs = create_backend(backend, w.view(), &single);  // what the ranks run, on one GPU
    ASSERT_TRUE(cs.ok()) << cs.message();
    ASSERT_TRUE(layer);
    for (int64_t T : sc.tokens) {
      for (RouteMode m : sc.modes) {
        ++seed;
        const std::string what = std::string(parallel_mode_name(mode)) + " " + std::to_string(size) + " " +
                                 backend_name(backend) +
                                 " E=" + std::to_string(s.experts) + " H=" + std::to_string(s.hidden) +
                                 " I=" + std::to_string(s.intermediate) + " T=" + std::to_string(T) + " " +
                                 route_mode_name(m) + " seed=" + std::to_string(seed);
        SCOPED_TRACE(what);
        const std::vector<float> x = round_to_bf16(random_floats(size_t(T * s.hidden), seed));
        const Routing r = make_test_routing(m, T, s, seed);
        const RoutingView view = r.view();
        const RoutingView* rv = m == RouteMode::kRouter ? nullptr : &view;
        std::vector<float> y(x.size()), one(x.size()), ref(x.size());
        const Status ls = layer->forward_host(x.data(), T, rv, y.data());
        ASSERT_TRUE(ls.ok()) << ls.message();
        ASSERT_TRUE(single->forward_host(x.data(), T, rv, one.data()).ok());
        ASSERT_TRUE(reference_forward(w.view(), x.data(), T, rv, ref.data()).ok());
        EXPECT_LE(rel_l2(y, one), 1e-2) << what << ": vs single GPU";
        EXPECT_LE(rel_l2(y, ref), 1e-2) << what << ": vs reference";
        EXPECT_GT(l2_norm(y), 0.0) << what;
      }
    }
  }
}

TEST(ParallelGpu, OneRankTensorAndExpert) {
  SKIP_WITHOUT_GPUS(1);
  check_against_single_gpu(ParallelMode::kTensor, 1);
  check_against_single_gpu(ParallelMode::kExpert, 1);
}

TEST(ParallelGpu, TensorParallel2) {
  SKIP_WITHOUT_GPUS(2);
  check_against_single_gpu(ParallelMode::kTensor, 2);
}

TEST(ParallelGpu, TensorParallel4) {
  SKIP_WITHOUT_GPUS(4);
  check_against_single_gpu(ParallelMode::kTensor, 4);
}

TEST(ParallelGpu, TensorParallelSm90OneRank) {
  SKIP_WITHOUT_SM90_GPUS(1);
  check_against_single_gpu(ParallelMode::kTensor, 1, BackendKind::kSm90);
}

TEST(ParallelGpu, TensorParallelSm90TwoRanks) {
  SKIP_WITHOUT_SM90_GPUS(2);
  check_against_single_gpu(ParallelMode::kTensor, 2, BackendKind::kSm90);
}

TEST(ParallelGpu, ExpertParallel2) {
  SKIP_WITHOUT_GPUS(2);
  check_against_single_gpu(ParallelMode::kExpert, 2);
}

TEST(ParallelGpu, ExpertParallel4) {
  SKIP_WITHOUT_GPUS(4);
  check_against_single_gpu(ParallelMode::kExpert, 4);
}

int ranks_here() { return list_devices().size() >= 2 ? 2 : 1; }

TEST(ParallelGpu, ExpertParallelIsDeterministic) {
  SKIP_WITHOUT_GPUS(1);
  const MoeShape s{32, 320, 224, 4};
  const MoeWeights w = make_random_weights(s, 800);
  std::unique_ptr<ParallelLayer> layer = make_layer(w, ParallelMode::kExpert, ranks_here());
  ASSERT_TRUE(layer);
  for (int64_t T : {int64_t(7), int64_t(1000)}) {
    const std::vector<float> x = round_to_bf16(random_floats(size_t(T * s.hidden), 801));
    std::vector<float> y1(x.size()), y2(x.size());
    ASSERT_TRUE(layer->forward_host(x.data(), T, nullptr, y1.data()).ok());
    ASSERT_TRUE(layer->forward_host(x.data(), T, nullptr, y2.data()).ok());
    EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float))) << "T=" << T;
  }
}

TEST(ParallelGpu, BadArgumentsLeaveTheLayerUsable) {
  SKIP_WITHOUT_GPUS(1);
  const MoeShape s{8, 160, 160, 2};
  const MoeWeights w = make_random_weights(s, 900);
  for (ParallelMode mode : {ParallelMode::kTensor, ParallelMode::kExpert}) {
    std::unique_ptr<ParallelLayer> layer = make_layer(w, mode, ranks_here());
    ASSERT_TRUE(layer);
    std::vector<float> x = round_to_bf16(random_floats(3 * 160, 901)), y(x.size());
    Routing r = make_random_routing(3, 8, 2, 902);
    r.ids[0] = 8;  // out of range
    const RoutingView bad = r.view();
    EXPECT_FALSE(layer->forward_host(x.data(), 3, &bad, y.data()).ok());
    EXPECT_FALSE(layer->forward_host(x.data(), 0, nullptr, y.data()).ok());
    const Status ok = layer->forward_host(x.data(), 3, nullptr, y.data());
    EXPECT_TRUE(ok.ok()) << ok.message();
    EXPECT_GT(l2_norm(y), 0.0);
  }
}

TEST(ParallelGpu, TimingReportsCommunicationShare) {
  SKIP_WITHOUT_GPUS(1);
  const MoeShape s{16, 160, 160, 4};
  const MoeWeights w = make_random_weights(s, 950);
  for (ParallelMode mode : {ParallelMode::kTensor, ParallelMode::kExpert}) {
    SCOPED_TRACE(parallel_mode_name(mode));
    std::unique_ptr<ParallelLayer> layer = make_layer(w, mode, ranks_here());
    ASSERT_TRUE(layer);
    for (int64_t T : {int64_t(1), int64_t(64)}) {
      ParallelTiming t;
      const Status st = layer->time_forward(T, 2, 6, 1, &t);
      ASSERT_TRUE(st.ok()) << st.message();
      EXPECT_GT(t.median_us, 0.0);
      EXPECT_LE(t.min_us, t.median_us);
      EXPECT_GT(t.compute_us, 0.0);
      EXPECT_GE(t.comm_share, 0.0);
      EXPECT_LE(t.comm_share, 1.0);
      EXPECT_GE(t.iterations, 6);
    }
  }
}

// ---- the expert-parallel kernels against the host plan ------------------------

template <typename T>
struct Device {
  T* p = nullptr;
  explicit Device(size_t n) { EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess); }
  ~Device() { cudaFree(p); }
  void put(const std::vector<T>& v) { ASSERT_EQ(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess); }
  std::vector<T> get(size_t n) const {
    std::vector<T> v(n);
    EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
};

TEST(ParallelGpu, DispatchKernelsMatchTheHostPlan) {
  SKIP_WITHOUT_GPUS(1);
  const int64_t E = 32, H = 64, K = 4;
  std::mt19937_64 rng(7);
  for (int size : {1, 2, 4, 8}) {
    for (int64_t tokens : {0, 1, 3, 250, 17000}) {
      for (bool skewed : {false, true}) {
        SCOPED_TRACE("size=" + std::to_string(size) + " tokens=" + std::to_string(tokens) +
                     " skewed=" + std::to_string(skewed));
        const int64_t pairs = tokens * K;
        std::vector<int32_t> ids(static_cast<size_t>(pairs));
        std::uniform_int_distribution<int32_t> id(0, int32_t(E - 1));
        for (auto& v : ids) v = skewed ? int32_t(E - 1) : id(rng);  // skewed: all on the last rank
        std::vector<float> w(ids.size());
        for (size_t i = 0; i < w.size(); ++i) w[i] = float(i % 7) * 0.125f;
        std::vector<uint16_t> x(size_t(tokens * H));
        for (size_t i = 0; i < x.size(); ++i) x[i] = uint16_t(i * 2654435761u >> 16);
        const parallel::DispatchPlan plan = parallel::plan_dispatch(ids.data(), pairs, E, size);

        Device<int32_t> d_ids(ids.size()), counts(static_cast<size_t>(size)), pos(ids.size()), send_ids(ids.size());
        Device<float> d_w(w.size()), send_w(w.size());
        Device<uint16_t> d_x(x.size()), send_x(size_t(pairs * H));
        d_ids.put(ids);
        d_w.put(w);
        d_x.put(x);
        const int64_t per_rank = E / size;
        ASSERT_TRUE(parallel::launch_ep_plan(d_ids.p, pairs, per_rank, size, counts.p, pos.p, nullptr).ok());
        ASSERT_TRUE(parallel::launch_ep_pack(d_x.p, H, K, d_ids.p, d_w.p, pos.p, pairs, per_rank, send_x.p,
                                             send_ids.p, send_w.p, nullptr).ok());
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        EXPECT_EQ(counts.get(size_t(size)), plan.send_counts);
        EXPECT_EQ(pos.get(ids.size()), plan.pair_pos);
        const std::vector<uint16_t> sx = send_x.get(size_t(pairs * H));
        const std::vector<int32_t> sid = send_ids.get(ids.size());
        const std::vector<float> sw = send_w.get(w.size());
        bool rows_ok = true;
        for (int64_t p = 0; p < pairs; ++p) {
          const int64_t at = plan.pair_pos[size_t(p)];
          rows_ok &= sid[size_t(at)] == parallel::local_expert(ids[size_t(p)], E, size);
          rows_ok &= sw[size_t(at)] == w[size_t(p)];
          rows_ok &= std::memcmp(&sx[size_t(at * H)], &x[size_t(p / K * H)], size_t(H) * 2) == 0;
        }
        EXPECT_TRUE(rows_ok);

        // Combine: row pos[t*K + s] holds 8 (t % 1024) + s in every column;
        // sums stay below 2^24, so they are exact in any order.
        std::vector<float> rows(size_t(pairs * H));
        for (int64_t p = 0; p < pairs; ++p)
          for (int64_t h = 0; h < H; ++h)
            rows[size_t(plan.pair_pos[size_t(p)] * H + h)] = float(8 * (p / K % 1024) + p % K);
        Device<float> d_rows(rows.size()), y(size_t(tokens * H));
        d_rows.put(rows);
        ASSERT_TRUE(parallel::launch_ep_combine(d_rows.p, pos.p, tokens, K, H, y.p, nullptr).ok());
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const std::vector<float> got = y.get(size_t(tokens * H));
        bool sums_ok = true;
        for (int64_t t = 0; t < tokens; ++t)
          for (int64_t h = 0; h < H; ++h) sums_ok &= got[size_t(t * H + h)] == float(32 * (t % 1024) + 6);
        EXPECT_TRUE(sums_ok);
      }
    }
  }
}

}  // namespace
}  // namespace mxmoe
#endif  // MXMOE_WITH_NCCL
