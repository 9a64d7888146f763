// How a GPU load splits its layers under a device budget (plan_placement, a
// pure function), and load_layers' refusals of a budget it cannot use.
#include <optional>

#include <gtest/gtest.h>

#include "mxmoe/load.h"
#include "mxmoe/prepare.h"
#include "support/safetensors_writer.h"

namespace mxmoe {
namespace {

constexpr MoeShape k120b{128, 2880, 2880, 4};

LayerPlacement place(BackendKind kind, int64_t layers, std::optional<int64_t> budget, const MoeShape& s = k120b) {
  LayerPlacement p;
  const Status st = plan_placement(kind, s, true, layers, budget, &p);
  EXPECT_TRUE(st.ok()) << st.message();
  return p;
}

TEST(Placement, AsManyLayersAsTheBudgetHolds) {
  for (BackendKind kind : {BackendKind::kPortable, BackendKind::kSm90, BackendKind::kSm100}) {
    SCOPED_TRACE(backend_name(kind));
    const int64_t per = place(kind, 1, std::nullopt).bytes_per_device_layer;
    // A layer holds its MXFP4 weights, padded for the kernels, and the router.
    EXPECT_GE(per, original_bytes(k120b) + 2 * k120b.experts * (k120b.hidden + 1));
    EXPECT_LE(per, original_bytes(k120b) * 21 / 20);
    EXPECT_EQ(place(kind, 36, std::nullopt).device_layers, 36);
    EXPECT_EQ(place(kind, 36, int64_t(0)).device_layers, 0);
    EXPECT_EQ(place(kind, 36, per - 1).device_layers, 0);
    EXPECT_EQ(place(kind, 36, per).device_layers, 1);
    EXPECT_EQ(place(kind, 36, 24 * per + per / 2).device_layers, 24);
    EXPECT_EQ(place(kind, 36, 24 * per + per / 2).host_layers, 12);
    EXPECT_EQ(place(kind, 36, int64_t(1) << 50).device_layers, 36);
    EXPECT_EQ(place(kind, 0, per).device_layers, 0);
  }
  // Without a router a layer holds less.
  LayerPlacement no_router;
  ASSERT_TRUE(plan_placement(BackendKind::kPortable, k120b, false, 1, std::nullopt, &no_router).ok());
  EXPECT_EQ(no_router.bytes_per_device_layer + 2 * k120b.experts * (k120b.hidden + 1),
            place(BackendKind::kPortable, 1, std::nullopt).bytes_per_device_layer);
}

TEST(Placement, TheCpuBackendKeepsEveryLayerInHostMemory) {
  const LayerPlacement p = place(BackendKind::kCpu, 36, int64_t(1) << 40);
  EXPECT_EQ(p.device_layers, 0);
  EXPECT_EQ(p.host_layers, 36);
  EXPECT_EQ(p.bytes_per_device_layer, 0);
}

TEST(Placement, HostLayersAreCountedAgainstTheHostsMemory) {
  const LayerPlacement p = place(BackendKind::kSm90, 36, 24 * place(BackendKind::kSm90, 1, std::nullopt).bytes_per_device_layer);
  ASSERT_EQ(p.host_layers, 12);
  // The cpu backend's packed weights: MXFP4 as in the checkpoint, biases and router.
  EXPECT_GE(p.bytes_per_host_layer, original_bytes(k120b));
  EXPECT_LE(p.bytes_per_host_layer, original_bytes(k120b) * 21 / 20);
  const int64_t need = 12 * p.bytes_per_host_layer;
  EXPECT_TRUE(check_host_memory(p, need).ok());
  EXPECT_TRUE(check_host_memory(p, -1).ok());  // unknown: never refused
  const Status st = check_host_memory(p, need - 1);
  EXPECT_EQ(st.code(), StatusCode::kOutOfMemory);
  EXPECT_NE(st.message().find("12 layers' experts in host memory need 20."), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("larger max_device_bytes"), std::string::npos) << st.message();
  const LayerPlacement all_host = place(BackendKind::kCpu, 36, std::nullopt);
  EXPECT_EQ(check_host_memory(all_host, int64_t(1) << 30).code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(check_host_memory(all_host, int64_t(1) << 30).message().find("max_device_bytes"), std::string::npos);
}

TEST(Placement, RefusesWhatItCannotPlace) {
  LayerPlacement p;
  EXPECT_EQ(plan_placement(BackendKind::kPortable, k120b, true, 36, int64_t(-1), &p).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(plan_placement(BackendKind::kPortable, k120b, true, -1, std::nullopt, &p).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(plan_placement(BackendKind::kReference, k120b, true, 36, std::nullopt, &p).code(),
            StatusCode::kInvalidArgument);
}

// The budget's refusals come before any layer is read.
TEST(Placement, LoadLayersRefusesABudgetItCannotUse) {
  const MoeShape s{8, 160, 96, 2};
  testing::TempDir dir;
  testing::write_hf_checkpoint(dir.path, {make_random_weights(s, 5)});
  std::vector<std::unique_ptr<MoeLayer>> out;
  LoadOptions o;
  o.max_device_bytes = int64_t(1) << 30;  // on the CPU
  Status st = load_layers(dir.path.string(), {}, o, &out);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
  EXPECT_NE(st.message().find("max_device_bytes"), std::string::npos) << st.message();
  o.device = 0;
  o.max_device_bytes = -5;
  st = load_layers(dir.path.string(), {}, o, &out);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
  EXPECT_TRUE(out.empty());
  o.device = -1;
  o.max_device_bytes.reset();
  LoadStats stats;
  ASSERT_TRUE(load_layers(dir.path.string(), {}, o, &out, &stats).ok());
  EXPECT_EQ(stats.host_layers, 1);
  EXPECT_EQ(stats.device_layers, 0);
  EXPECT_FALSE(out[0]->host_experts());  // a CPU layer: x and y in host memory too
}

}  // namespace
}  // namespace mxmoe
