// The host side of the multi-GPU layer: token slices, the expert-parallel
// dispatch plan and exchange layout, the timing summary and the configuration
// checks. One test replays the whole expert-parallel protocol on the host
// (plan, pack, exchange, each rank's experts through the CPU reference with
// top-1 routing, results back, slot-order combine) and compares it with the
// unsharded reference, so the bookkeeping is checked end to end without GPUs.
#include <algorithm>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "mxmoe/dispatch.h"
#include "mxmoe/parallel.h"
#include "mxmoe/prepare.h"
#include "mxmoe/reference.h"
#include "parallel/expert_dispatch.h"
#include "parallel/timing_summary.h"
#include "support/test_support.h"

namespace mxmoe {
namespace {

using parallel::DispatchPlan;
using parallel::ExchangeLayout;
using parallel::TokenSlice;

TEST(TokenSlice, CoversTheTokensInRankOrderEvenly) {
  for (int64_t T : {0, 1, 3, 7, 129, 16384}) {
    for (int size = 1; size <= kMaxParallelRanks; ++size) {
      int64_t next = 0, smallest = T, largest = 0;
      for (int r = 0; r < size; ++r) {
        const TokenSlice s = parallel::token_slice(T, size, r);
        EXPECT_EQ(s.begin, next) << "T=" << T << " size=" << size << " rank=" << r;
        EXPECT_GE(s.count(), 0);
        smallest = std::min(smallest, s.count());
        largest = std::max(largest, s.count());
        next = s.end;
      }
      EXPECT_EQ(next, T) << "T=" << T << " size=" << size;
      EXPECT_LE(largest - smallest, 1) << "T=" << T << " size=" << size;
    }
  }
}

TEST(ExpertOwner, ContiguousBlocksOfExperts) {
  // 32 experts over 4 ranks: 0-7 on rank 0, ..., 24-31 on rank 3.
  EXPECT_EQ(parallel::expert_owner(0, 32, 4), 0);
  EXPECT_EQ(parallel::expert_owner(7, 32, 4), 0);
  EXPECT_EQ(parallel::expert_owner(8, 32, 4), 1);
  EXPECT_EQ(parallel::expert_owner(31, 32, 4), 3);
  EXPECT_EQ(parallel::local_expert(8, 32, 4), 0);
  EXPECT_EQ(parallel::local_expert(31, 32, 4), 7);
  EXPECT_EQ(parallel::expert_owner(127, 128, 1), 0);
  EXPECT_EQ(parallel::local_expert(127, 128, 1), 127);
}

// The plan equals a stable sort of the pairs by destination.
void expect_stable_partition(const std::vector<int32_t>& ids, int64_t experts, int size) {
  const int64_t pairs = int64_t(ids.size());
  const DispatchPlan plan = parallel::plan_dispatch(ids.data(), pairs, experts, size);
  std::vector<int32_t> order(ids.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return parallel::expert_owner(ids[size_t(a)], experts, size) < parallel::expert_owner(ids[size_t(b)], experts, size);
  });
  std::vector<int32_t> expected_pos(ids.size());
  for (size_t row = 0; row < order.size(); ++row) expected_pos[size_t(order[row])] = int32_t(row);
  EXPECT_EQ(plan.pair_pos, expected_pos) << "pairs=" << pairs << " size=" << size;
  std::vector<int32_t> counts(size_t(size), 0);
  for (int32_t id : ids) ++counts[size_t(parallel::expert_owner(id, experts, size))];
  EXPECT_EQ(plan.send_counts, counts);
}

TEST(PlanDispatch, IsAStablePartitionByDestination) {
  std::mt19937_64 rng(11);
  for (int size : {1, 2, 4, 8}) {
    for (int64_t pairs : {0, 1, 5, 64, 1000}) {
      std::uniform_int_distribution<int32_t> id(0, 31);
      std::vector<int32_t> ids(static_cast<size_t>(pairs));
      for (auto& v : ids) v = id(rng);
      expect_stable_partition(ids, 32, size);
    }
    expect_stable_partition(std::vector<int32_t>(100, 31), 32, size);  // every pair on the last rank
  }
}

TEST(ExchangeLayout, ReceivesWhatEachRankSends) {
  const int size = 3;
  // all_counts[s][d]: rank 1 sends nothing, rank 2 receives nothing.
  const std::vector<int32_t> all = {2, 5, 0,  //
                                    0, 0, 0,  //
                                    4, 1, 0};
  const ExchangeLayout r0 = parallel::exchange_layout(all.data(), size, 0);
  EXPECT_EQ(r0.send_count, (std::vector<int64_t>{2, 5, 0}));
  EXPECT_EQ(r0.send_offset, (std::vector<int64_t>{0, 2, 7}));
  EXPECT_EQ(r0.recv_count, (std::vector<int64_t>{2, 0, 4}));
  EXPECT_EQ(r0.recv_offset, (std::vector<int64_t>{0, 2, 2}));
  EXPECT_EQ(r0.received, 6);
  const ExchangeLayout r2 = parallel::exchange_layout(all.data(), size, 2);
  EXPECT_EQ(r2.received, 0);
  EXPECT_EQ(r2.send_offset, (std::vector<int64_t>{0, 4, 5}));
}

// Every token's slot 0 on the last expert; its other slots on the first ones.
Routing one_hot_expert_routing(int64_t T, const MoeShape& s, uint64_t seed) {
  Routing r = make_random_routing(T, s.experts, s.topk, seed);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < s.topk; ++k) r.ids[size_t(t * s.topk + k)] = int32_t(k == 0 ? s.experts - 1 : k - 1);
  return r;
}

// The expert-parallel forward, rank by rank, on the host.
std::vector<float> simulate_expert_parallel(const MoeWeights& w, const std::vector<float>& x, int64_t T,
                                            const Routing& routing, int size) {
  const MoeShape& s = w.shape;
  const int64_t H = s.hidden, K = s.topk, E = s.experts;
  struct Rank {
    TokenSlice slice;
    DispatchPlan plan;
    std::vector<float> send_x, send_w, back_y;
    std::vector<int32_t> send_ids;
  };
  std::vector<Rank> ranks(static_cast<size_t>(size));
  std::vector<int32_t> all_counts(size_t(size * size));
  for (int r = 0; r < size; ++r) {  // plan and pack
    Rank& k = ranks[size_t(r)];
    k.slice = parallel::token_slice(T, size, r);
    const int64_t pairs = k.slice.count() * K;
    const int32_t* ids = routing.ids.data() + k.slice.begin * K;
    k.plan = parallel::plan_dispatch(ids, pairs, E, size);
    k.send_x.resize(size_t(pairs * H));
    k.send_ids.resize(size_t(pairs));
    k.send_w.resize(size_t(pairs));
    k.back_y.resize(size_t(pairs * H));
    for (int64_t p = 0; p < pairs; ++p) {
      const int64_t pos = k.plan.pair_pos[size_t(p)];
      std::copy_n(x.begin() + (k.slice.begin + p / K) * H, H, k.send_x.begin() + pos * H);
      k.send_ids[size_t(pos)] = parallel::local_expert(ids[p], E, size);
      k.send_w[size_t(pos)] = routing.weights[size_t(k.slice.begin * K + p)];
    }
    std::copy(k.plan.send_counts.begin(), k.plan.send_counts.end(), all_counts.begin() + r * size);
  }
  std::vector<ExchangeLayout> layout;
  for (int r = 0; r < size; ++r) layout.push_back(parallel::exchange_layout(all_counts.data(), size, r));
  for (int r = 0; r < size; ++r) {  // receive, compute with top-1 routing, send back
    const ExchangeLayout& me = layout[size_t(r)];
    const int64_t R = me.received;
    if (R == 0) continue;
    std::vector<float> rx(size_t(R * H)), rw(static_cast<size_t>(R)), ry(size_t(R * H));
    std::vector<int32_t> rids(static_cast<size_t>(R));
    for (int src = 0; src < size; ++src) {
      const Rank& from = ranks[size_t(src)];
      const int64_t first = layout[size_t(src)].send_offset[size_t(r)], n = me.recv_count[size_t(src)];
      const int64_t at = me.recv_offset[size_t(src)];
      std::copy_n(from.send_x.begin() + first * H, n * H, rx.begin() + at * H);
      std::copy_n(from.send_ids.begin() + first, n, rids.begin() + at);
      std::copy_n(from.send_w.begin() + first, n, rw.begin() + at);
    }
    WeightShard shard;
    EXPECT_TRUE(shard_expert_parallel(BackendKind::kCpu, w.view(), r, size, &shard).ok());
    const RoutingView top1{rids.data(), rw.data(), R, 1};
    EXPECT_TRUE(reference_forward(shard.prepared.view(), rx.data(), R, &top1, ry.data(), {.fp64 = true}).ok());
    for (int src = 0; src < size; ++src) {
      Rank& to = ranks[size_t(src)];
      const int64_t first = layout[size_t(src)].send_offset[size_t(r)], n = me.recv_count[size_t(src)];
      std::copy_n(ry.begin() + me.recv_offset[size_t(src)] * H, n * H, to.back_y.begin() + first * H);
    }
  }
  std::vector<float> y(size_t(T * H), 0.0f);  // combine in slot order
  for (const Rank& k : ranks)
    for (int64_t t = 0; t < k.slice.count(); ++t)
      for (int64_t slot = 0; slot < K; ++slot) {
        const int64_t row = k.plan.pair_pos[size_t(t * K + slot)];
        for (int64_t h = 0; h < H; ++h) y[size_t((k.slice.begin + t) * H + h)] += k.back_y[size_t(row * H + h)];
      }
  return y;
}

TEST(ExpertParallelProtocol, HostReplayMatchesTheReference) {
  const MoeShape shape{8, 64, 96, 3};
  const MoeWeights w = make_random_weights(shape, 21);
  for (int size : {1, 2, 4, 8}) {
    for (int64_t T : {1, 3, 7, 129}) {
      for (bool one_hot : {false, true}) {
        SCOPED_TRACE("size=" + std::to_string(size) + " T=" + std::to_string(T) + " one_hot=" + std::to_string(one_hot));
        const std::vector<float> x = testing::random_floats(size_t(T * shape.hidden), uint64_t(T));
        const Routing r = one_hot ? one_hot_expert_routing(T, shape, 5) : make_random_routing(T, 8, 3, uint64_t(size));
        const RoutingView rv = r.view();
        std::vector<float> ref(x.size());
        ASSERT_TRUE(reference_forward(w.view(), x.data(), T, &rv, ref.data(), {.fp64 = true}).ok());
        const std::vector<float> y = simulate_expert_parallel(w, x, T, r, size);
        EXPECT_LE(testing::rel_l2(y, ref), 1e-6);
        EXPECT_GT(testing::l2_norm(y), 0.0);
      }
    }
  }
}

TEST(TensorParallelShards, GptOssIntermediateSplitsIntoAlignedSlices) {
  // I = 2880 at TP 2, 4, 8: each rank's slice is whole 64-column steps of the
  // portable GEMM (2880 / 4 = 720 is not, so the split pads to 3072 first).
  const std::pair<int, int64_t> expected[] = {{1, 2880}, {2, 1472}, {4, 768}, {8, 384}};
  for (const auto& [size, per_rank] : expected) {
    WeightShard shard;
    const MoeWeights w = make_random_weights({4, 64, 2880, 2}, 3);
    ASSERT_TRUE(shard_tensor_parallel(BackendKind::kPortable, w.view(), size - 1, size, &shard).ok());
    EXPECT_EQ(shard.prepared.plan.shape.intermediate, per_rank) << "TP " << size;
    EXPECT_EQ(shard.prepared.plan.intermediate_padded, per_rank) << "TP " << size;
    EXPECT_EQ(per_rank % backend_alignment(BackendKind::kPortable).intermediate, 0);
    EXPECT_GE(per_rank * size, 2880);
  }
}

TEST(TimingSummary, SlowestRankPerBatchThenMedian) {
  // 3 batches of 2 forwards on 2 ranks.
  const std::vector<parallel::BatchTimes> batches = {
      {{10, 20}, {5, 8}}, {{30, 5}, {6, 6}}, {{16, 16}, {4, 2}}};
  const ParallelTiming t = parallel::summarize_batches(batches, 2);
  EXPECT_DOUBLE_EQ(t.median_us, 10.0);  // per forward: 10, 15, 8
  EXPECT_DOUBLE_EQ(t.min_us, 8.0);
  EXPECT_DOUBLE_EQ(t.compute_us, 3.0);  // 4, 3, 2
  EXPECT_DOUBLE_EQ(t.comm_share, 0.7);
  EXPECT_EQ(t.iterations, 6);
  const ParallelTiming none = parallel::summarize_batches({}, 2);
  EXPECT_EQ(none.iterations, 0);
}

TEST(ParallelConfig, RefusesWhatCannotRun) {
  const MoeShape s = kGptOss20b;
  auto check = [&](ParallelMode mode, int size, std::vector<int> devices = {},
                   BackendKind backend = BackendKind::kPortable) {
    ParallelConfig c;
    c.mode = mode;
    c.size = size;
    c.devices = std::move(devices);
    c.backend = backend;
    return validate_parallel_config(c, s);
  };
  EXPECT_TRUE(check(ParallelMode::kTensor, 1).ok());
  EXPECT_TRUE(check(ParallelMode::kTensor, 8).ok());
  EXPECT_TRUE(check(ParallelMode::kExpert, 4, {3, 1, 0, 2}).ok());
  const Status tp3 = check(ParallelMode::kTensor, 3);
  EXPECT_EQ(tp3.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(tp3.message().find("1, 2, 4, 8"), std::string::npos) << tp3.message();
  const Status ep3 = check(ParallelMode::kExpert, 3);
  EXPECT_NE(ep3.message().find("does not divide the 32 experts"), std::string::npos) << ep3.message();
  EXPECT_FALSE(check(ParallelMode::kExpert, 16).ok());
  EXPECT_FALSE(check(ParallelMode::kTensor, 0).ok());
  EXPECT_FALSE(check(ParallelMode::kTensor, 2, {0, 0}).ok());
  EXPECT_FALSE(check(ParallelMode::kTensor, 2, {0}).ok());
  EXPECT_FALSE(check(ParallelMode::kTensor, 2, {-1, 0}).ok());
  const Status cpu = check(ParallelMode::kTensor, 2, {}, BackendKind::kCpu);
  EXPECT_EQ(cpu.code(), StatusCode::kUnsupported);
  EXPECT_NE(cpu.message().find("portable or sm90"), std::string::npos) << cpu.message();
  EXPECT_TRUE(check(ParallelMode::kTensor, 2, {}, BackendKind::kSm90).ok());  // devices checked at creation
  const Status ep_sm90 = check(ParallelMode::kExpert, 2, {}, BackendKind::kSm90);
  EXPECT_EQ(ep_sm90.code(), StatusCode::kUnsupported);
  EXPECT_NE(ep_sm90.message().find("ep: the multi-GPU layer runs portable, not sm90"), std::string::npos)
      << ep_sm90.message();
  EXPECT_FALSE(check(ParallelMode::kTensor, 2, {}, BackendKind::kSm100).ok());
}

TEST(ParallelConfig, BackendChoice) {
  const MoeShape shape{32, 2880, 2880, 4};
  BackendKind b = BackendKind::kCpu;
  ASSERT_TRUE(choose_parallel_backend("portable", ParallelMode::kExpert, shape, &b).ok());
  EXPECT_EQ(b, BackendKind::kPortable);
  ASSERT_TRUE(choose_parallel_backend("sm90", ParallelMode::kTensor, shape, &b).ok());
  EXPECT_EQ(b, BackendKind::kSm90);
  // Expert parallel runs portable whatever the device.
  ASSERT_TRUE(choose_parallel_backend("auto", ParallelMode::kExpert, shape, &b).ok());
  EXPECT_EQ(b, BackendKind::kPortable);
  // Tensor parallel follows this process's single-GPU choice where it is sm90.
  DispatchResult single;
  const bool sm90_here = choose_backend_for_this_process("auto", shape, &single).ok() &&
                         single.backend == BackendKind::kSm90;
  ASSERT_TRUE(choose_parallel_backend("", ParallelMode::kTensor, shape, &b).ok());
  EXPECT_EQ(b, sm90_here ? BackendKind::kSm90 : BackendKind::kPortable);
  const Status bad = choose_parallel_backend("tpu", ParallelMode::kTensor, shape, &b);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("auto, portable or sm90"), std::string::npos) << bad.message();
  EXPECT_FALSE(choose_parallel_backend("auto", ParallelMode::kTensor, shape, nullptr).ok());
}

TEST(ParallelConfig, CreationFailsCleanlyWithoutTheDevices) {
  // Device 1000 exists nowhere: the answer is an error (no NCCL in the build,
  // or too few devices), never a crash, on every machine.
  const MoeWeights w = make_random_weights({8, 64, 64, 2}, 1);
  ParallelConfig c;
  c.mode = ParallelMode::kExpert;
  c.size = 2;
  c.devices = {0, 1000};
  std::unique_ptr<ParallelLayer> layer;
  const Status s = create_parallel_layer(w.view(), c, &layer);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
#ifdef MXMOE_WITH_NCCL
  EXPECT_NE(s.message().find("visible"), std::string::npos) << s.message();
#else
  EXPECT_NE(s.message().find("built without NCCL"), std::string::npos) << s.message();
#endif
  EXPECT_EQ(layer, nullptr);
  EXPECT_FALSE(create_parallel_layer(w.view(), c, nullptr).ok());
}

}  // namespace
}  // namespace mxmoe
