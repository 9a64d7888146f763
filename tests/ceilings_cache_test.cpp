// A GPU's measured ceilings kept between runs (tools/mxmoe/ceilings_cache.h):
// read back whole for the same board, driver and format, and for nothing else.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "ceilings_cache.h"

namespace mxmoe::cli {
namespace {

namespace fs = std::filesystem;

// A fresh folder under the system's temporary one, removed with the object.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("mxmoe-ceilings-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

const DeviceIdentity kBoard{"NVIDIA H100 80GB HBM3", "GPU-0123abcd-4567-89ef-0123-456789abcdef", "00000000:19:00.0",
                            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04"};

DeviceCeilings measured() {
  DeviceCeilings c = known_ceilings(kH200Ceilings, kBoard.name, "");
  c.copy_bytes_per_s = 3.02e12;
  c.bf16_flops_per_s = 712.5e12;
  c.idle_w = 71.25;
  c.copy_source = c.gemm_source = "measured";
  c.power_limit_source = c.idle_source = "NVML";
  c.energy_source = known_source(kH200Ceilings, "SM90");
  return c;
}

void expect_same(const DeviceCeilings& a, const DeviceCeilings& b) {
  EXPECT_EQ(a.device, b.device);
  EXPECT_EQ(a.copy_bytes_per_s, b.copy_bytes_per_s);
  EXPECT_EQ(a.bf16_flops_per_s, b.bf16_flops_per_s);
  EXPECT_EQ(a.power_limit_w, b.power_limit_w);
  EXPECT_EQ(a.idle_w, b.idle_w);
  EXPECT_EQ(a.joules_per_byte_read, b.joules_per_byte_read);
  EXPECT_EQ(a.joules_per_bf16_flop, b.joules_per_bf16_flop);
  EXPECT_EQ(a.copy_source, b.copy_source);
  EXPECT_EQ(a.gemm_source, b.gemm_source);
  EXPECT_EQ(a.power_limit_source, b.power_limit_source);
  EXPECT_EQ(a.idle_source, b.idle_source);
  EXPECT_EQ(a.energy_source, b.energy_source);
}

TEST(CeilingsCache, RoundTripsForTheSameBoard) {
  TempDir dir;
  DeviceCeilings got;
  EXPECT_FALSE(load_cached_ceilings(dir.path.string(), kBoard, &got));
  ASSERT_TRUE(store_ceilings((dir.path / "nested").string(), kBoard, measured()).ok());
  ASSERT_TRUE(load_cached_ceilings((dir.path / "nested").string(), kBoard, &got));
  expect_same(got, measured());
  EXPECT_EQ(got.cache_file, (dir.path / "nested" / "ceilings-GPU-0123abcd-4567-89ef-0123-456789abcdef.json").string());
  EXPECT_EQ(got.cached_on.size(), 10u);  // YYYY-MM-DD
  // No temporary file is left beside the entry.
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir.path / "nested")) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
}

TEST(CeilingsCache, AnotherDriverOrSlotMeasuresAgain) {
  TempDir dir;
  ASSERT_TRUE(store_ceilings(dir.path.string(), kBoard, measured()).ok());
  DeviceCeilings got;
  DeviceIdentity other = kBoard;
  other.driver = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  590.10";
  EXPECT_FALSE(load_cached_ceilings(dir.path.string(), other, &got));
  other = kBoard;
  other.pci_bus_id = "00000000:2A:00.0";
  EXPECT_FALSE(load_cached_ceilings(dir.path.string(), other, &got));
  other = kBoard;
  other.name = "NVIDIA H100 PCIe";
  EXPECT_FALSE(load_cached_ceilings(dir.path.string(), other, &got));
}

TEST(CeilingsCache, BrokenOrOldEntriesAreMisses) {
  TempDir dir;
  ASSERT_TRUE(store_ceilings(dir.path.string(), kBoard, measured()).ok());
  const std::string file = ceilings_cache_file(dir.path.string(), kBoard);
  DeviceCeilings got;
  std::ifstream in(file);
  nlohmann::json j = nlohmann::json::parse(in);
  in.close();
  auto write = [&](const std::string& text) { std::ofstream(file) << text; };
  nlohmann::json old = j;
  old["format"] = kCeilingsCacheFormat - 1;
  write(old.dump());
  EXPECT_FALSE(load_cached_ceilings(dir.path.string(), kBoard, &got));
  nlohmann::json missing = j;
  missing["ceilings"].erase("copy_bytes_per_s");
  write(missing.dump());
  EXPECT_FALSE(load_cached_ceilings(dir.path.string(), kBoard, &got));
  nlohmann::json mistyped = j;
  mistyped["ceilings"]["idle_w"] = "seventy";
  write(mistyped.dump());
  EXPECT_FALSE(load_cached_ceilings(dir.path.string(), kBoard, &got));
  write(j.dump().substr(0, 40));
  EXPECT_FALSE(load_cached_ceilings(dir.path.string(), kBoard, &got));
  write("[1, 2]");
  EXPECT_FALSE(load_cached_ceilings(dir.path.string(), kBoard, &got));
  write(j.dump());
  EXPECT_TRUE(load_cached_ceilings(dir.path.string(), kBoard, &got));
}

TEST(CeilingsCache, AnUnwritableFolderIsAnError) {
  TempDir dir;
  // A file where the folder should be: no folder can be made there.
  { std::ofstream(dir.path.string() + "-file") << "x"; }
  const std::string blocked = dir.path.string() + "-file/mxmoe";
  EXPECT_FALSE(store_ceilings(blocked, kBoard, measured()).ok());
  fs::remove(dir.path.string() + "-file");
}

TEST(CeilingsCache, FolderFromXdgCacheHomeElseHome) {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string saved_xdg = xdg ? xdg : "", saved_home = home ? home : "";
  setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  EXPECT_EQ(ceilings_cache_dir(), "/tmp/xdg/mxmoe");
  setenv("XDG_CACHE_HOME", "", 1);
  setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(ceilings_cache_dir(), "/home/someone/.cache/mxmoe");
  unsetenv("XDG_CACHE_HOME");
  unsetenv("HOME");
  EXPECT_EQ(ceilings_cache_dir(), "");
  if (xdg) setenv("XDG_CACHE_HOME", saved_xdg.c_str(), 1);
  if (home) setenv("HOME", saved_home.c_str(), 1);
}

TEST(CeilingsCache, FileNameKeepsOnlyTheUuidsSafeCharacters) {
  DeviceIdentity odd = kBoard;
  odd.uuid = "GPU-../ab:cd";
  EXPECT_EQ(ceilings_cache_file("/c", odd), "/c/ceilings-GPU-abcd.json");
}

}  // namespace
}  // namespace mxmoe::cli
