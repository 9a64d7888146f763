// Tile-size policy of the portable backend: small pure functions of the problem.
#pragma once

#include <cstdint>

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

}  // namespace mxmoe::portable
