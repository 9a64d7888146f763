// The SM120 grouped GEMM's CUTLASS contract, checked on the host: the
// problems the gpt-oss layers launch (K and N padded to 128, tensor-parallel
// shards of I, any token count) are accepted, K = 2880 (90 MX blocks, not a
// whole number of 4-block scale atoms) is not, and the stages fit SM120's
// shared memory.
#include <gtest/gtest.h>

#ifndef MXMOE_WITH_SM120
TEST(Sm120Gemm, NotBuilt) { GTEST_SKIP() << "skipped: this build has no sm_120a code (add 120a to CMAKE_CUDA_ARCHITECTURES)"; }
#else
#include "cuda/sm120/sm120_grouped_gemm.h"

namespace mxmoe::sm120 {
namespace {

TEST(Sm120Gemm, AcceptsTheGptOssProblems) {
  // GEMM1: N = 2 Ip (the [up; gate] halves), K = Hp; GEMM2: N = Hp, K = Ip.
  // Ip: 2880 -> 2944 whole, 1440 -> 1536 at TP 2, 720 -> 768 at TP 4.
  const int hp = 2944;
  for (const int ip : {2944, 1536, 768})
    for (const int m : {1, 127, 128, 129, 4096}) {
      EXPECT_TRUE(can_implement(32, m, 2 * ip, hp)) << "GEMM1 M=" << m << " Ip=" << ip;
      EXPECT_TRUE(can_implement(32, m, hp, ip)) << "GEMM2 M=" << m << " Ip=" << ip;
    }
}

TEST(Sm120Gemm, RefusesUnpaddedK) {
  EXPECT_FALSE(can_implement(32, 128, 5888, 2880));
  EXPECT_FALSE(can_implement(32, 128, 2944, 720));
  EXPECT_FALSE(can_implement(0, 128, 2944, 2944));
}

TEST(Sm120Gemm, FitsSharedMemory) {
  EXPECT_GT(shared_memory_bytes(), 0);
  EXPECT_LE(shared_memory_bytes(), 101376);
}

}  // namespace
}  // namespace mxmoe::sm120
#endif
