// The Blackwell grouped GEMMs' CUTLASS contract, checked on the host for each
// arch the build carries: the problems the gpt-oss layers launch (K and N
// padded to 128, tensor-parallel shards of I, any token count) are accepted,
// K = 2880 (90 MX blocks, not a whole number of 4-block scale atoms) is not,
// and the stages fit the arch's shared memory.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#ifdef MXMOE_WITH_SM100
#include "cuda/sm100/sm100_grouped_gemm.h"
#endif
#ifdef MXMOE_WITH_SM120
#include "cuda/sm120/sm120_grouped_gemm.h"
#endif

namespace mxmoe {
namespace {

struct Arch {
  std::string name;
  bool (*can_implement)(int, int, int, int);
  int (*shared_memory_bytes)();
  const void* (*kernel)();
  int shared_memory_limit;
};

std::vector<Arch> built_archs() {
  std::vector<Arch> out;
#ifdef MXMOE_WITH_SM100
  out.push_back({"sm100", sm100::can_implement, sm100::shared_memory_bytes, sm100::kernel, 232448});
#endif
#ifdef MXMOE_WITH_SM120
  out.push_back({"sm120", sm120::can_implement, sm120::shared_memory_bytes, sm120::kernel, 101376});
#endif
  return out;
}

constexpr const char* kNoBlackwellCode =
    "skipped: this build has no sm_100a or sm_120a code (add 100a / 120a to CMAKE_CUDA_ARCHITECTURES)";

TEST(BlackwellGemm, AcceptsTheGptOssProblems) {
  if (built_archs().empty()) GTEST_SKIP() << kNoBlackwellCode;
  // GEMM1: N = 2 Ip (the [up; gate] halves), K = Hp; GEMM2: N = Hp, K = Ip.
  // Ip: 2880 -> 2944 whole, 1440 -> 1536 at TP 2, 720 -> 768 at TP 4.
  const int hp = 2944;
  for (const Arch& a : built_archs())
    for (const int ip : {2944, 1536, 768})
      for (const int m : {1, 127, 128, 129, 4096}) {
        EXPECT_TRUE(a.can_implement(32, m, 2 * ip, hp)) << a.name << " GEMM1 M=" << m << " Ip=" << ip;
        EXPECT_TRUE(a.can_implement(32, m, hp, ip)) << a.name << " GEMM2 M=" << m << " Ip=" << ip;
      }
}

TEST(BlackwellGemm, RefusesUnpaddedK) {
  if (built_archs().empty()) GTEST_SKIP() << kNoBlackwellCode;
  for (const Arch& a : built_archs()) {
    EXPECT_FALSE(a.can_implement(32, 128, 5888, 2880)) << a.name;
    EXPECT_FALSE(a.can_implement(32, 128, 2944, 720)) << a.name;
    EXPECT_FALSE(a.can_implement(0, 128, 2944, 2944)) << a.name;
  }
}

TEST(BlackwellGemm, FitsSharedMemoryAndIsCompiledIn) {
  if (built_archs().empty()) GTEST_SKIP() << kNoBlackwellCode;
  for (const Arch& a : built_archs()) {
    EXPECT_GT(a.shared_memory_bytes(), 0) << a.name;
    EXPECT_LE(a.shared_memory_bytes(), a.shared_memory_limit) << a.name;
    EXPECT_NE(a.kernel(), nullptr) << a.name;
  }
}

}  // namespace
}  // namespace mxmoe
