// When a host-memory layer streams its experts to the GPU: the crossover
// against the measurements its rates come from.
#include "api/host_stream_heuristics.h"

#include <gtest/gtest.h>

namespace mxmoe {
namespace {

const MoeShape kGptOss120b{128, 2880, 2880, 4};
const MoeShape kGptOss20b{32, 2880, 2880, 4};

TEST(HostStreamHeuristics, TheCpuModelMatchesTheMeasuredLayer) {
  const HostStreamRates r;
  // 13.3 MB an expert, 1.70 GB the layer.
  EXPECT_NEAR(host_expert_bytes(kGptOss120b) * 128 / 1e9, 1.70, 0.01);
  // docs/PERF.md, 16 threads: 642 µs at T = 1, 18.3 ms at T = 64, 48.8 ms
  // at T = 256; 2 threads: 2.34 ms at T = 1, 233 ms at T = 256.
  EXPECT_NEAR(host_cpu_us(kGptOss120b, 1, 16, r), 642, 0.15 * 642);
  EXPECT_NEAR(host_cpu_us(kGptOss120b, 64, 16, r), 18279, 0.2 * 18279);
  EXPECT_NEAR(host_cpu_us(kGptOss120b, 256, 16, r), 48775, 0.1 * 48775);
  EXPECT_NEAR(host_cpu_us(kGptOss120b, 1, 2, r), 2345, 0.1 * 2345);
  EXPECT_GT(host_cpu_us(kGptOss120b, 256, 2, r), 233032.0);  // 65 GFLOP/s a thread is the all-core rate
  // Every expert touched from a few hundred tokens on; none at T = 0.
  EXPECT_NEAR(expected_touched_experts(kGptOss120b, 512), 128.0, 1e-3);
  EXPECT_NEAR(expected_touched_experts(kGptOss120b, 1), 4.0, 1e-9);
  EXPECT_EQ(expected_touched_experts(kGptOss120b, 0), 0.0);
}

TEST(HostStreamHeuristics, StreamsFromWhereThePcieCopyBeatsTheCpu) {
  const HostStreamRates r;
  // The layer over PCIe is ~31 ms: 16 threads pass that between T = 128
  // and 256, 2 threads between 8 and 32.
  const int64_t t16 = stream_from_tokens(kGptOss120b, 16, r), t2 = stream_from_tokens(kGptOss120b, 2, r);
  EXPECT_GT(t16, 128);
  EXPECT_LT(t16, 256);
  EXPECT_GT(t2, 8);
  EXPECT_LT(t2, 32);
  // The first T that streams is faster streamed; the one before is not.
  EXPECT_LT(host_stream_us(kGptOss120b, t16, r), host_cpu_us(kGptOss120b, t16, 16, r));
  EXPECT_GE(host_stream_us(kGptOss120b, t16 - 1, r), host_cpu_us(kGptOss120b, t16 - 1, 16, r));
  // More threads compute longer before streaming; a faster link streams sooner.
  EXPECT_GT(stream_from_tokens(kGptOss120b, 64, r), t16);
  HostStreamRates fast = r;
  fast.pcie_gbps *= 2;
  EXPECT_LT(stream_from_tokens(kGptOss120b, 16, fast), t16);
  // 20b's layer is a quarter of 120b's, its touched share larger at equal T.
  EXPECT_LT(stream_from_tokens(kGptOss20b, 16, r), t16);
}

TEST(HostStreamHeuristics, AnUnreachableCrossoverIsTheSearchsEnd) {
  HostStreamRates slow;
  slow.pcie_gbps = 1e-6;
  EXPECT_EQ(stream_from_tokens(kGptOss120b, 16, slow), kMaxStreamFromTokens);
}

}  // namespace
}  // namespace mxmoe
