// Launch policy of the fused router (smxx_router_topk): small pure functions.
#pragma once

#include <cstdint>
#include <string>

namespace mxmoe::smxx {

// Warps of a router block split the experts' 8-wide n-tiles this many ways
// (the rest of the 8 warps split K): at most 8 tiles a warp.
inline int router_split_n(int64_t experts) {
  const int64_t n_tiles = (experts + 7) / 8;
  return n_tiles <= 8 ? 1 : n_tiles <= 16 ? 2 : 4;
}

// Blocks of the cluster that takes one 16-token block (SM90+), or 1: the tile
// slots a warp fills (n-tiles / split), rounded up to 1, 2, 4 or 8, while the
// clusters make at most two blocks per SM. Each block then walks K for fewer
// tiles with more chunks in flight; from about 2 x SMs blocks the grid fills
// the chip with one block per 16 tokens. (gpt-oss: 4 blocks on 32 experts,
// 8 on 128.) H200, ncu, one block a 16-token block -> clusters, us: T = 1
// 16.9 -> 9.7 (32 experts), 31.8 -> 11.5 (128); T = 256 22.0 -> 14.1, 34.7
// -> 19.9; T = 1024 on 32 experts (256 blocks, at the bound) 22.7 -> 20.4.
// The bound itself was not swept.
inline int router_cluster_size(int64_t experts, int64_t token_blocks, int sms) {
  const int64_t n_tiles = (experts + 7) / 8, split = router_split_n(experts);
  const int64_t slots = (n_tiles + split - 1) / split;
  int cluster = 1;
  while (cluster < slots && cluster < 8) cluster *= 2;
  return token_blocks * cluster <= 2 * int64_t(sms) ? cluster : 1;
}

// One line on the router's launch on an SM90+ GPU of `sms` SMs (what `mxmoe
// info` prints), e.g. "clusters of 4 blocks a 16-token block up to T = 1056,
// then one block a 16-token block".
inline std::string describe_router(int64_t experts, int sms) {
  const int cluster = router_cluster_size(experts, 1, sms);
  if (cluster == 1) return "one block a 16-token block";
  const int64_t max_tokens = 16 * (2 * int64_t(sms) / cluster);
  return "clusters of " + std::to_string(cluster) + " blocks a 16-token block up to T = " +
         std::to_string(max_tokens) + ", then one block a 16-token block";
}

}  // namespace mxmoe::smxx
