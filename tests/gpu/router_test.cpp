// The fused router: a token's experts and weights must not depend on how many
// tokens are routed with it. At few tokens (SM90) a cluster of blocks splits
// each 16-token block's experts; at many, one block takes them all; both must
// give the same ids and weights, bit for bit.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#ifdef MXMOE_WITH_CUDA
#include <cuda_runtime.h>

#include "cuda/portable/portable_launcher.h"
#endif
#include "mxmoe/format.h"
#include "support/test_support.h"

#ifndef MXMOE_WITH_CUDA
TEST(RouterGpu, NotBuilt) { GTEST_SKIP() << "GPU test skipped: this build has no CUDA"; }
#else
namespace mxmoe {
namespace {

std::vector<uint16_t> random_bf16(size_t n, uint64_t seed) {
  const std::vector<float> f = testing::random_floats(n, seed);
  std::vector<uint16_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = float_to_bf16(f[i]);
  return out;
}

template <typename T>
T* to_device(const std::vector<T>& v) {
  T* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, v.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return p;
}

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

// Routes `tokens` tokens of x starting at token `first`.
Routed route(const portable::DeviceWeights& w, const uint16_t* x, int64_t first, int64_t tokens) {
  const int64_t k = w.shape.topk;
  int32_t* ids = nullptr;
  float* weights = nullptr;
  EXPECT_EQ(cudaMalloc(&ids, size_t(tokens * k) * 4), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&weights, size_t(tokens * k) * 4), cudaSuccess);
  const Status st = portable::route_topk(w, x + first * w.shape.hidden, tokens, ids, weights, nullptr);
  EXPECT_TRUE(st.ok()) << st.message();
  Routed r{std::vector<int32_t>(size_t(tokens * k)), std::vector<float>(size_t(tokens * k))};
  EXPECT_EQ(cudaMemcpy(r.ids.data(), ids, r.ids.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(r.weights.data(), weights, r.weights.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(ids);
  cudaFree(weights);
  return r;
}

class RouterGpu : public ::testing::Test {
 protected:
  void SetUp() override { MXMOE_SKIP_WITHOUT_GPU(); }
};

TEST_F(RouterGpu, TokensRouteAloneAsInABatch) {
  // 1100 tokens fill the chip with one block per 16 tokens; 1, 7 and 16 of
  // them run as clusters of 4 (32 experts) or 8 (128) on SM90.
  constexpr int64_t kTokens = 1100, H = 2880;
  for (const int64_t E : {int64_t(32), int64_t(128)}) {
    const uint64_t seed = 1000 + uint64_t(E);
    SCOPED_TRACE("E=" + std::to_string(E) + " seed=" + std::to_string(seed));
    const std::vector<uint16_t> x = random_bf16(size_t(kTokens * H), seed);
    const std::vector<uint16_t> rw = random_bf16(size_t(E * H), seed + 1), rb = random_bf16(size_t(E), seed + 2);
    uint16_t* dx = to_device(x);
    uint16_t* drw = to_device(rw);
    uint16_t* drb = to_device(rb);
    portable::DeviceWeights w;
    w.shape = MoeShape{E, H, H, 4};
    w.hidden_padded = H;
    w.router_weight = drw;
    w.router_bias = drb;
    const Routed all = route(w, dx, 0, kTokens);
    for (const auto& [first, n] : std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {5, 7}, {1083, 16}, {1099, 1}}) {
      const Routed part = route(w, dx, first, n);
      EXPECT_EQ(0, std::memcmp(part.ids.data(), all.ids.data() + first * 4, part.ids.size() * 4))
          << "ids of tokens " << first << " + " << n;
      EXPECT_EQ(0, std::memcmp(part.weights.data(), all.weights.data() + first * 4, part.weights.size() * 4))
          << "weights of tokens " << first << " + " << n;
    }
    cudaFree(dx);
    cudaFree(drw);
    cudaFree(drb);
  }
}

}  // namespace
}  // namespace mxmoe
#endif
