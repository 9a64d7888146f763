// `mxmoe run --checkpoint` end to end: the CLI on a checkpoint written here
// gives what the reference gives on the same tensors in memory.
#include <cstdlib>
#include <limits>
#include <string>

#include <gtest/gtest.h>

#include "io/npy.h"
#include "mxmoe/reference.h"
#include "support/safetensors_writer.h"
#include "support/test_support.h"

namespace mxmoe {
namespace {

namespace fs = std::filesystem;

int run_cli(const std::string& args) {
  const int rc = std::system((std::string(MXMOE_CLI_PATH) + " " + args + " >/dev/null 2>&1").c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

TEST(CliCheckpoint, RunMatchesReferenceAndRefusesBadLayer) {
  const uint64_t seed = 77;
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const MoeShape shape{4, 64, 96, 2};
  testing::TempDir dir;
  std::vector<MoeWeights> layers = {make_random_weights(shape, seed), make_random_weights(shape, seed + 1)};
  for (auto& l : layers) l.swiglu.limit = 7.0f;
  testing::write_gpt_oss_tensors(dir.path, layers, testing::Naming::kOpenai, 1);
  testing::write_file(dir.path / "config.json",
                      testing::gpt_oss_config(shape, 2, 7.0f, testing::Naming::kOpenai).dump());
  const auto x = testing::random_floats(3 * 64, seed + 2, 2.0f);
  ASSERT_TRUE(write_npy_f32((dir.path / "x.npy").string(), x.data(), {3, 64}).ok());

  const std::string common = "run --backend reference --checkpoint " + dir.path.string() + " --input " +
                             (dir.path / "x.npy").string() + " --output " + (dir.path / "y.npy").string();
  ASSERT_EQ(run_cli(common + " --layer 1"), 0);
  NpyArray y;
  ASSERT_TRUE(read_npy_f32_matrix((dir.path / "y.npy").string(), 64, &y).ok());
  std::vector<float> ref(x.size());
  ASSERT_TRUE(reference_forward(layers[1].view(), x.data(), 3, nullptr, ref.data(), {.fp64 = true}).ok());
  EXPECT_EQ(y.data, ref);
  EXPECT_GT(testing::l2_norm(ref), 0.0);

  // MXFP8 activations: the reference's MXFP8 mode on the same tensors, exactly.
  ASSERT_EQ(run_cli(common + " --layer 1 --activations mxfp8 --check"), 0);
  ASSERT_TRUE(read_npy_f32_matrix((dir.path / "y.npy").string(), 64, &y).ok());
  ReferenceOptions mx{.fp64 = true};
  mx.activations.format = ActivationFormat::kMxfp8;
  std::vector<float> ref8(x.size());
  ASSERT_TRUE(reference_forward(layers[1].view(), x.data(), 3, nullptr, ref8.data(), mx).ok());
  EXPECT_EQ(y.data, ref8);
  EXPECT_NE(ref8, ref);

  // The CPU kernels on the same checkpoint, checked against the reference.
  EXPECT_EQ(run_cli("run --backend cpu --checkpoint " + dir.path.string() + " --input " +
                    (dir.path / "x.npy").string() + " --layer 1 --check"),
            0);

  EXPECT_EQ(run_cli(common + " --layer 2"), 2) << "layer out of range";
  const auto wide = testing::random_floats(3 * 96, seed + 3);
  ASSERT_TRUE(write_npy_f32((dir.path / "x.npy").string(), wide.data(), {3, 96}).ok());
  EXPECT_EQ(run_cli(common + " --layer 0"), 2) << "x of the wrong width";
  auto nan_x = x;
  nan_x[70] = std::numeric_limits<float>::quiet_NaN();
  ASSERT_TRUE(write_npy_f32((dir.path / "x.npy").string(), nan_x.data(), {3, 64}).ok());
  EXPECT_EQ(run_cli(common + " --layer 0"), 2) << "x holding NaN";
  ASSERT_TRUE(write_npy_f32((dir.path / "x.npy").string(), x.data(), {0, 64}).ok());
  EXPECT_EQ(run_cli(common + " --layer 0"), 2) << "x holding no tokens";
}

}  // namespace
}  // namespace mxmoe
