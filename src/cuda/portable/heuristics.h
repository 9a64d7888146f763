// Tile-size policy of the portable backend: small pure functions of the problem.
#pragma once

#include <cstdint>
#include <string>

namespace mxmoe::portable {

// Token tile (the mma N side: 8 tokens per n-subtile) of both GEMMs. Each tile
// re-reads its expert's weight rows, so larger tiles cut weight traffic, but a
// tile only holds rows of one expert: an expert with c rows pads to a multiple
// of the tile. Pick the tile from the mean rows per expert, T*k/E.
// `override_tile` (8, 32 or 64; 0 = none) comes from MXMOE_PORTABLE_TILE, a
// tuning knob for benchmarks.
inline int token_tile(int64_t tokens, int64_t topk, int64_t experts, int override_tile = 0) {
  if (override_tile == 8 || override_tile == 32 || override_tile == 64) return override_tile;
  const int64_t mean_rows = (tokens * topk + experts - 1) / experts;
  if (mean_rows <= 8) return 8;     // decode: a GEMV over the touched experts
  // The 64-token instance holds 255 registers and spills (ptxas); 32 does not.
  if (mean_rows <= 1024) return 32;
  return 64;
}

// Per-pair decode: each (token, slot) pair is its own 8-token tile, so the
// forward needs no grouping kernel and GEMM2's blocks combine the k rows
// themselves (no combine kernel); those two kernels cost ~3 and ~3.6 us of the
// 33.6 us forward at T = 1 (H200, measured by launching each twice). The
// price: pairs that share an expert read and dequantise its weights once each.
// So it runs while the expected number of pairs sharing an expert,
// pairs * (pairs - 1) / (2 E) for uniform routing, is at most one: T <= 2 on
// gpt-oss-20b (T = 2: 50.9 -> 46.1 us; T = 4 on 20b was slower, 76.8 -> 79.0)
// and T <= 4 on gpt-oss-120b (T = 4: 84.7 -> 81.1 us).
inline bool per_pair_decode(int64_t tokens, int64_t topk, int64_t experts, int token_tile) {
  const int64_t pairs = tokens * topk;
  return token_tile == 8 && pairs * (pairs - 1) <= 2 * experts;
}

inline constexpr const char* kPerPairDescription = "a tile per (token, slot) pair: no grouping or combine kernel";

// One line on the tiles of both GEMMs at `tokens` (what `mxmoe info` prints),
// e.g. "32-token tiles of expert-grouped rows".
inline std::string describe_tiles(int64_t tokens, int64_t topk, int64_t experts) {
  const int tile = token_tile(tokens, topk, experts);
  if (per_pair_decode(tokens, topk, experts, tile)) return kPerPairDescription;
  return std::to_string(tile) + "-token tiles of expert-grouped rows";
}

}  // namespace mxmoe::portable
