// The ceilings `mxmoe bench` measures on the GPU it runs on
// (tools/mxmoe/bench_ceilings.h): rates a real board can have, measured in
// full and kept in the cache, read back from it, and measured again (and kept
// again) on request.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "bench_ceilings.h"
#include "support/test_support.h"

#ifndef MXMOE_WITH_CUDA
TEST(DeviceCeilings, NotBuilt) { GTEST_SKIP() << "GPU test skipped: this build has no CUDA"; }
#else
namespace mxmoe::cli {
namespace {

namespace fs = std::filesystem;

TEST(DeviceCeilings, MeasuredKeptAndReadBack) {
  MXMOE_SKIP_WITHOUT_GPU();
  const fs::path dir = fs::temp_directory_path() / ("mxmoe-device-ceilings-" + std::to_string(getpid()));
  fs::remove_all(dir);
  std::string note;
  const auto t0 = std::chrono::steady_clock::now();
  const DeviceCeilings first = bench_ceilings(0, dir.string(), false, &note);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  SCOPED_TRACE(describe(first));
  EXPECT_EQ(first.copy_source, "measured");
  EXPECT_EQ(first.gemm_source, "measured");
  // HBM2e (A100) to HBM3e (B200): 1.5 to 8 TB/s; a bf16 GEMM on any board
  // with tensor cores 10 to 5000 TFLOP/s.
  EXPECT_GT(first.copy_bytes_per_s, 0.5e12);
  EXPECT_LT(first.copy_bytes_per_s, 10e12);
  EXPECT_GT(first.bf16_flops_per_s, 10e12);
  EXPECT_LT(first.bf16_flops_per_s, 5000e12);
  EXPECT_TRUE(first.cache_file.empty());
  // About a second alone on the GPU; ctest -j may run other tests beside it.
  EXPECT_LT(seconds, 10.0);
  if (first.power_limit_source != "NVML" || first.idle_source != "NVML") {
    EXPECT_FALSE(note.empty());
    fs::remove_all(dir);
    GTEST_SKIP() << "no NVML on this machine, so nothing is kept: " << note;
  }
  EXPECT_GT(first.power_limit_w, first.idle_w);
  EXPECT_GT(first.idle_w, 10);
  EXPECT_TRUE(note.empty()) << note;

  const DeviceCeilings cached = bench_ceilings(0, dir.string(), false, &note);
  EXPECT_FALSE(cached.cache_file.empty());
  EXPECT_EQ(cached.copy_bytes_per_s, first.copy_bytes_per_s);
  EXPECT_EQ(cached.bf16_flops_per_s, first.bf16_flops_per_s);
  EXPECT_EQ(cached.idle_w, first.idle_w);
  EXPECT_EQ(cached.joules_per_byte_read, first.joules_per_byte_read);
  EXPECT_EQ(cached.energy_source, first.energy_source);

  const DeviceCeilings again = bench_ceilings(0, dir.string(), true, &note);
  EXPECT_TRUE(again.cache_file.empty());
  EXPECT_EQ(again.copy_source, "measured");
  EXPECT_GT(again.copy_bytes_per_s, 0.5e12);
  // What it measured replaced the entry.
  const DeviceCeilings kept = bench_ceilings(0, dir.string(), false, &note);
  EXPECT_EQ(kept.copy_bytes_per_s, again.copy_bytes_per_s);
  EXPECT_EQ(kept.bf16_flops_per_s, again.bf16_flops_per_s);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mxmoe::cli
#endif
