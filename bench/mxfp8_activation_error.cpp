// How far MXFP8 activations move a GPT-OSS MoE layer's output from bf16
// activations, on the CPU reference (fp64 sums): for each model shape and
// seed, random weights, T tokens of N(0, 1) x rounded to bf16, the router's
// routing; rel L2 of the MXFP8 output (ceil and OCP scale rules) against the
// bf16 one. Usage: mxfp8_activation_error [T=16] [seeds=3]
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "mxmoe/reference.h"
#include "support/test_support.h"

using namespace mxmoe;

int main(int argc, char** argv) {
  const int64_t T = argc > 1 ? std::atoll(argv[1]) : 16;
  const int seeds = argc > 2 ? std::atoi(argv[2]) : 3;
  std::printf("%-13s %5s %4s %12s %12s\n", "model", "T", "seed", "rel_L2_ceil", "rel_L2_ocp");
  for (const auto& [name, shape] : {std::pair{"gpt-oss-20b", kGptOss20b}, std::pair{"gpt-oss-120b", kGptOss120b}})
    for (int seed = 1; seed <= seeds; ++seed) {
      const MoeWeights w = make_random_weights(shape, uint64_t(seed));
      const std::vector<float> x =
          mxmoe::testing::round_to_bf16(mxmoe::testing::random_floats(size_t(T * shape.hidden), uint64_t(seed) + 100));
      std::vector<float> bf16(x.size()), ceil(x.size()), ocp(x.size());
      ReferenceOptions o{.fp64 = true};
      if (!reference_forward(w.view(), x.data(), T, nullptr, bf16.data(), o).ok()) return 1;
      o.activations = {ActivationFormat::kMxfp8, MxScaleRule::kTriton};
      if (!reference_forward(w.view(), x.data(), T, nullptr, ceil.data(), o).ok()) return 1;
      o.activations.mxfp8_scale_rule = MxScaleRule::kOcp;
      if (!reference_forward(w.view(), x.data(), T, nullptr, ocp.data(), o).ok()) return 1;
      std::printf("%-13s %5lld %4d %12.4e %12.4e\n", name, (long long)T, seed, mxmoe::testing::rel_l2(ceil, bf16),
                  mxmoe::testing::rel_l2(ocp, bf16));
    }
  return 0;
}
