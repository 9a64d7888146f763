// Device memory through the caller's allocator (include/mxmoe/allocator.h,
// src/cuda/common/device_memory.h), on the host: a counting allocator that
// hands out host memory sees every allocation given back once, with the
// device, size and stream it was taken with, also when an allocation fails
// halfway through a layer's image. (The GPU tests hold real layers, their
// loads and the torch op to the same accounting.)
#include <gtest/gtest.h>

#ifndef MXMOE_WITH_CUDA
TEST(DeviceMemory, NotBuilt) { GTEST_SKIP() << "skipped: this build has no CUDA"; }
#else
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cuda/common/device_memory.h"
#include "cuda/prepare/device_image.h"
#include "support/counting_allocator.h"

namespace mxmoe::smxx {
namespace {

using testing::CountingAllocator;


// Host memory as "device" memory: nothing here reads or writes it.
class HostAllocator final : public DeviceAllocator {
 public:
  Status allocate(int, size_t bytes, CUstream_st*, void** ptr) override {
    *ptr = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    return Status::Ok();
  }
  void deallocate(int, void* ptr, size_t, CUstream_st*) noexcept override { std::free(ptr); }
};

std::shared_ptr<CountingAllocator> counting_host_memory() {
  return std::make_shared<CountingAllocator>(std::make_shared<HostAllocator>());
}

CUstream_st* const kStream = reinterpret_cast<CUstream_st*>(uintptr_t(0x5100));

TEST(DeviceMemory, BufferTakesGrowsAndGivesBack) {
  auto counting = counting_host_memory();
  {
    DeviceBuffer b(MemorySource{counting, 3, kStream});
    EXPECT_EQ(b.get(), nullptr);
    ASSERT_TRUE(b.reserve(100).ok());
    ASSERT_EQ(counting->live().size(), 1u);
    EXPECT_EQ(counting->live().begin()->second.bytes, 256u);  // never below 256 bytes
    EXPECT_EQ(counting->live().begin()->second.device, 3);
    EXPECT_EQ(counting->live().begin()->second.stream, kStream);
    void* first = b.get();
    ASSERT_TRUE(b.reserve(100).ok());  // room enough: kept
    EXPECT_EQ(b.get(), first);
    EXPECT_EQ(counting->allocations(), 1);
    ASSERT_TRUE(b.reserve(5000).ok());  // grows: the old one goes back first
    EXPECT_EQ(counting->live().size(), 1u);
    EXPECT_EQ(counting->live_bytes(), 5000u);
    EXPECT_EQ(b.bytes(), 5000u);
    DeviceBuffer moved(std::move(b));
    EXPECT_EQ(b.get(), nullptr);
    EXPECT_EQ(counting->live().size(), 1u);
    DeviceBuffer other(MemorySource{counting, 3, kStream});
    ASSERT_TRUE(other.reserve(10).ok());
    other = std::move(moved);  // other's allocation goes back, moved's stays
    EXPECT_EQ(counting->live().size(), 1u);
    EXPECT_EQ(counting->live_bytes(), 5000u);
  }
  EXPECT_TRUE(counting->live().empty());
  EXPECT_TRUE(counting->mismatches().empty()) << counting->mismatches().front();
}

TEST(DeviceMemory, FailedGrowthLeavesTheBufferEmpty) {
  auto counting = counting_host_memory();
  counting->fail_at(1);
  DeviceBuffer b(MemorySource{counting, 0, nullptr});
  ASSERT_TRUE(b.reserve(300).ok());
  const Status st = b.reserve(3000);
  EXPECT_EQ(st.code(), StatusCode::kOutOfMemory);
  EXPECT_NE(st.message().find("counting allocator"), std::string::npos) << st.message();
  EXPECT_EQ(b.get(), nullptr);
  EXPECT_EQ(b.bytes(), 0u);
  EXPECT_TRUE(counting->live().empty());
  ASSERT_TRUE(b.reserve(3000).ok());  // usable again
  b.release();
  EXPECT_TRUE(counting->live().empty());
  EXPECT_TRUE(counting->mismatches().empty());
}

// A layer's image: one allocation a piece (the router's only when there is
// one), each of the piece's size, from the source's device and stream; all
// given back with the image. An allocation failing at any piece gives back
// the ones before it and leaves the output untouched.
TEST(DeviceMemory, ImagePiecesAreAllocationsOfTheirOwn) {
  for (const BackendKind kind : {BackendKind::kPortable, BackendKind::kSm90, BackendKind::kSm100})
    for (const bool router : {false, true}) {
      SCOPED_TRACE(::testing::Message() << backend_name(kind) << (router ? " with router" : " without router"));
      const PreparePlan plan = make_plan(kind, {5, 160, 96, 2});
      const ScaleImage scales = scale_image_of(kind);
      const auto bytes = image_piece_bytes(plan, scales, router);
      const int pieces = router ? kImagePieces : kRouterWeight;
      auto counting = counting_host_memory();
      {
        DeviceImage img;
        ASSERT_TRUE(allocate_image(plan, scales, router, 0, "test", {counting, 2, kStream}, &img).ok());
        ASSERT_EQ(int(counting->live().size()), pieces);
        size_t total = 0;
        for (int i = 0; i < kImagePieces; ++i) {
          if (i >= pieces) {
            EXPECT_EQ(img.piece[size_t(i)], nullptr) << i;
            continue;
          }
          const auto live = counting->live();
          const auto it = live.find(const_cast<uint8_t*>(img.piece[size_t(i)]));
          ASSERT_NE(it, live.end()) << "piece " << i << " is not an allocation's start";
          EXPECT_EQ(it->second.bytes, size_t(std::max<int64_t>(bytes[size_t(i)], 256))) << i;
          EXPECT_EQ(it->second.device, 2);
          EXPECT_EQ(it->second.stream, kStream);
          total += it->second.bytes;
        }
        EXPECT_EQ(counting->live_bytes(), total);
      }
      EXPECT_TRUE(counting->live().empty());
      for (int fail = 0; fail < pieces; ++fail) {
        counting->fail_at(fail);
        DeviceImage img;
        const Status st = allocate_image(plan, scales, router, 0, "test", {counting, 2, kStream}, &img);
        EXPECT_EQ(st.code(), StatusCode::kOutOfMemory) << fail;
        EXPECT_EQ(img.storage, nullptr) << fail;
        EXPECT_TRUE(counting->live().empty()) << "allocation " << fail << " failed: " << counting->live().size()
                                            << " allocations kept";
      }
      EXPECT_TRUE(counting->mismatches().empty()) << counting->mismatches().front();
    }
}

}  // namespace
}  // namespace mxmoe::smxx
#endif
