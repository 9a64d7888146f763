// Tile-size policy of the portable backend: small pure functions of the problem.
#pragma once

#include <cstdint>
#include <string>

#include "cuda/common/token_tiles.h"

namespace mxmoe::portable {

// Choices the heuristics below make that tests and benchmarks may fix; 0
// keeps the heuristic.
struct Overrides {
  int down_combine_warps = 0;  // 8 or 16, or kDownCombineSplit (down_combine_warps)
  int gemm1_warps = 0;         // 4, 8 or 16: the decode GEMM1's block warps (decode_warps)
  int fused_decode = 0;        // kFusedDecodeOn or kFusedDecodeOff (fused_decode)
};

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

// Per-pair decode: tile i belongs to (token, slot) pair i, and the tile of
// the first pair of an expert (and of its 9th, 17th, ...) takes the next
// pairs of that expert as its other token columns, found by one ballot over
// the routing ids; the other tiles are empty. So the forward needs no
// grouping kernel (~3 us of the 33.6 us forward at T = 1 when it was
// measured, H200, by launching it twice), and pairs that share an expert
// still dequantise its weights once.
// Measured on the H200 (sm90 backend, 2026-11-30, us), against tiles of one
// pair each while pairs * (pairs - 1) <= 2 E and expert-grouped tiles past
// that: gpt-oss-20b T = 2 43.1 -> 43.6, T = 3 62.1 -> 59.2, T = 4 72.3 ->
// 70.4, T = 6 93.3 -> 93.0; gpt-oss-120b T = 1 25.6 -> 25.5, T = 2 44.4 ->
// 44.7, T = 3 61.8 -> 62.5, T = 4 78.4 -> 79.2, T = 6 110.7 -> 110.3. At 32
// pairs (T = 8, portable backend) grouped tiles still win: 107.2 / 107.9
// (20b), 139.5 / 140.7 (120b). Hence up to 24 pairs.
inline constexpr int64_t kPerPairBallotPairs = 32;
inline constexpr int64_t kPerPairMaxPairs = 24;
static_assert(kPerPairMaxPairs <= kPerPairBallotPairs, "the GEMMs find a tile's pairs with one 32-lane ballot");
inline bool per_pair_decode(int64_t tokens, int64_t topk, int token_tile) {
  return token_tile == 8 && tokens * topk <= kPerPairMaxPairs;
}

// Warps of a decode block (8-token tiles): they split the K of the block's 32
// weight rows, each warp a quarter or an eighth of the chunks. Fewer warps a
// block run more chunks each behind one prologue and a shorter reduction, and
// twice the blocks fit an SM (6 x 128 or 3 x 256 threads at 80 registers), so
// the warps resident per SM stay 24 while the grid holds a block per 4-warp
// slot or so. A grid of fewer blocks keeps 8 warps a block: with 4 it would
// leave half the SMs' warp slots, and the loads they keep in flight, empty.
// Measured on the H200 (sm90 backend, 2026-11-30, us, both GEMMs 8 warps /
// GEMM1 4 / both 4): gpt-oss-20b T = 1 24.9 / 23.7 / 26.7 (GEMM2 has 360
// blocks, GEMM1 720), T = 2 41.1 / 39.4 / 38.6, T = 4 66.0 / 62.8 / 61.6, T =
// 6 87.0 / 82.1 / 80.6; gpt-oss-120b T = 1 25.2 / 23.8 / 26.8, T = 4 74.9 /
// 71.0 / 68.8. Blocks of 2 warps were slower than 4 at every T from 2.
// A grid of at most one block an SM (a narrow tensor-parallel shard's GEMM1
// at one token: 96 blocks at I = 384) takes 16 warps, so that each warp has
// at most two chunks, both in flight from the start: one DRAM round trip
// where 8 warps took two.
inline int decode_block_warps(int64_t blocks, int sms) {
  if (blocks <= int64_t(sms)) return 16;
  return blocks >= 4 * int64_t(sms) ? 4 : 8;
}

// The warps of each decode GEMM's blocks at `tokens` (8-token tiles): a tile
// per (token, slot) pair on the per-pair path, else the grouping's upper
// bound on tiles; GEMM1 has gemm1_rows / 32 row blocks a tile (2 I padded),
// GEMM2 gemm2_rows / 32 (H padded).
struct DecodeWarps {
  int gemm1 = 8, gemm2 = 8;
};
inline DecodeWarps decode_warps(int64_t tokens, int64_t topk, int64_t experts, int64_t gemm1_rows,
                                int64_t gemm2_rows, int sms) {
  const int64_t tiles = per_pair_decode(tokens, topk, 8) ? tokens * topk
                                                         : smxx::max_token_tiles(tokens, topk, experts, 8);
  return {decode_block_warps(tiles * (gemm1_rows / 32), sms), decode_block_warps(tiles * (gemm2_rows / 32), sms)};
}

// E.g. "blocks of 4 warps (GEMM1) and 8 (GEMM2) on 132 SMs".
inline std::string describe_decode_warps(const DecodeWarps& w, int sms) {
  return "blocks of " + std::to_string(w.gemm1) + " warps (GEMM1) and " + std::to_string(w.gemm2) + " (GEMM2) on " +
         std::to_string(sms) + " SMs";
}

// Whether GEMM2's blocks wait for their own token tile's GEMM1 blocks (a
// count per tile) instead of for all of GEMM1, so that the tiles GEMM1 has
// finished run during its last blocks. The counts are zeroed before GEMM1,
// which costs more than the wait saves at one token, whose four tiles GEMM1
// runs in one wave; on expert-grouped tiles (after the grouping kernel) the
// waits lost too. A one-block kernel zeroes them, not a memset, which ends
// the programmatic overlap: 20b T = 2-6 and 120b T = 2-6 took 1.8-2.2 us less
// with all the routing sets' forwards in one graph, 0.2-0.5 us more in a
// graph each (H200, 2026-11-30, three runs each, one call). Measured on the
// H200 (sm90 backend, 2026-11-30, us, three runs each, the whole-GEMM1 wait
// / tile waits, one build, zeroed by a memset then): gpt-oss-20b
// T = 1 22.4-22.5 / 22.9-23.0, T = 2 37.0-37.2 / 36.5-36.8, T = 4 59.5-59.7 /
// 57.2-57.4, T = 8 (grouped) 88.6-88.7 / 90.0-90.3, T = 16 112.4 / 113.3-113.6;
// gpt-oss-120b T = 1 22.4-22.5 / 23.0-23.1, T = 2 37.2-37.5 / 37.0, T = 4
// 64.0-64.1 / 62.5-62.6, T = 16 183.8-184.2 / 189.9-190.3. With this rule,
// against the row-block-major grid without counts: 20b T = 2 37.6-37.7 ->
// 36.7-36.8, T = 3 52.4-52.6 -> 48.4-48.6, T = 4 60.3-60.6 -> 57.2-57.7, T = 6
// 77.8-78.0 -> 74.1-74.8; 120b T = 2 37.7-38.0 -> 37.0-37.2, T = 4 65.4-65.7
// -> 62.7-62.9, T = 6 90.0-90.4 -> 86.8-87.0; T = 1 unchanged.
inline bool decode_tile_waits(int64_t tokens, bool per_pair, bool fused_down_combine) {
  return per_pair && tokens >= 2 && !fused_down_combine;
}

// Warps a block of the decode's GEMM2 with the combine in it (8-token
// tiles; sm80_mxfp4_down_combine.cu: a block per token and 32 rows of H, its
// warps split the token's k slots and their K), or 0 for GEMM2 and the
// combine kernel apart. The fused kernel saves the combine's launch and
// drain and the pair rows' round trip through memory, but runs H / 32 blocks
// a token where GEMM2 runs a block per (tile, 32 rows), and each warp runs
// its chunks one after the other: it pays where a warp has few chunks. At
// one token its 90 blocks (gpt-oss) take 16 warps, so a slot's chunks spread
// over 4 warps; from two tokens 8 warps, 3 blocks an SM.
// Measured on the H200 (sm90 backend, gpt-oss-120b shapes, chained, 2026-12-02,
// us, split / fused 8 warps / fused 16; with a GEMM1 L2 prefetch of GEMM2's
// weights then, which cost 0.3-2.1 us at one token and was dropped):
//   I = 384 (3 chunks):  T = 1 9.2 / 8.8 / 8.2; T = 2 12.3 / 11.0 / 13.7;
//                        T = 4 18.4 / 14.5 / 19.3; T = 6 24.3 / 22.3 / 28.5
//   I = 768 (6):         T = 1 10.9 / 11.2 / 12.0; T = 2 16.9 / 16.6 / 18.5;
//                        T = 3 23.4 / 21.6 / 25.7; T = 4 26.4 / 23.7 / 29.8; T = 6 38.7 / 36.2 / 46.0
//   I = 1472 (12):       T = 1 15.3 / 20.2 / 15.4; T = 2 24.4 / 27.6 / 27.4;
//                        T = 3 35.7 / 36.2 / 40.3; T = 4 38.6 / 36.7 / 42.5; T = 6 53.1 / 53.3 / 61.3
//   I = 2880 (23):       T = 1 23.3 / 33.8 / 24.2; T = 2 36.4 / 43.2 / 41.1; T = 4 63.0 / 62.5 / 69.5
// and on expert-grouped tiles, without the prefetch, split / the rule below:
//   I = 384:  T = 8 30.1 / 27.1; T = 12 40.4 / 38.6; T = 16 45.9 / 44.5; T = 24 58.6 / 58.8; T = 32 67.6 / 69.3
//   I = 768:  T = 8 45.9 / 42.9; T = 12 59.4 / 57.3; T = 16 70.1 / 69.2; T = 24 89.1 / 91.3; T = 32 104.4 / 110.5
// and gpt-oss-20b (32 experts), split (GEMM2 and the combine apart, with
// the routing check then) / fused: I = 384 T = 4 16.1 / 12.9, T = 8 25.1 /
// 24.5, T = 16 28.7 / 33.3; I = 768 T = 4 23.1 / 21.2, T = 8 37.9 / 38.6,
// T = 16 44.2 / 51.6.
// So: at one token 16 warps up to 4 chunks a slot (one a warp); from two
// tokens 8 warps where a warp has at most 3 chunks (8 / k warps a slot),
// while the pairs are at most half the experts. The fused kernel reads each
// pair's expert weights on its own (a block per token), where GEMM2's tiles
// read an expert's once for all its pairs: with more pairs than that, the
// experts several tokens share cost more than the combine saves (gpt-oss-20b
// at 64 pairs reads its ~28 experts' weights 2.3 times).
// `override_warps`: 8 or 16, or kDownCombineSplit (Overrides).
inline constexpr int kDownCombineSplit = -1;
inline int down_combine_warps(int64_t tokens, int64_t topk, int64_t experts, int64_t intermediate_padded,
                              int override_warps = 0) {
  if (override_warps == 8 || override_warps == 16) return override_warps;
  if (override_warps == kDownCombineSplit || topk > 8 || 2 * tokens * topk > experts) return 0;
  const int64_t chunks = (intermediate_padded + 127) / 128;
  if (tokens == 1) return chunks <= 4 ? 16 : 0;
  const int64_t per_slot = 8 / topk;
  return (chunks + per_slot - 1) / per_slot <= 3 ? 8 : 0;
}

// The decode forward in one cooperative launch (sm80_mxfp4_fused_decode.cu:
// GEMM1, a grid barrier, GEMM2 and the combine on the same blocks), or the
// chain of kernels above. Its tile schedule holds a pair a thread of 4 warps.
// Not taken unless forced (kFusedDecodeOn, MXMOE_FUSED_DECODE=1): it lost at
// every shape measured. H100 80GB, 2026-12-07, gpt-oss-120b, sm90 backend,
// chained us, one launch / the chain: T = 1 full 33.6 / 24.2, TP2 21.3 /
// 15.7, TP4 17.8 / 11.5, TP8 16.6 / 8.7; T = 4 full 100.0 / 75.4, TP8 31.4 /
// 15.1; T = 16 full 280.8 / 234.8, TP8 84.5 / 49.5 (docs/PERF.md, "The
// decode in one launch").
inline constexpr int64_t kFusedMaxPairs = 128;
inline constexpr int kFusedDecodeOn = 1;
inline constexpr int kFusedDecodeOff = -1;
inline bool fused_decode(int64_t tokens, int64_t topk, int override_fused = 0) {
  return override_fused == kFusedDecodeOn && tokens * topk <= kFusedMaxPairs;
}

// Warps of its blocks and blocks an SM at its launch bounds (<= 85
// registers): the decode GEMM's 24 warps an SM (GemmConfig).
inline constexpr int kFusedDecodeWarps = 8;
inline constexpr int kFusedDecodeBlocksPerSm = 3;

// Blocks of the one-launch decode: as many as it has items in its larger
// phase (tiles are at most the pairs; GEMM1 has rows1 32-row blocks a tile,
// GEMM2 rows2), at most `coresident` (a cooperative grid must fit at once).
// Blocks past an item still pass the barrier, so there are none.
inline int fused_decode_blocks(int64_t tokens, int64_t topk, int64_t rows1, int64_t rows2, int coresident) {
  const int64_t items = tokens * topk * (rows1 > rows2 ? rows1 : rows2);
  return int(items < coresident ? items : coresident);
}

// E.g. "360 blocks of 8 warps": the grid at `tokens` on `sms` SMs.
inline std::string describe_fused_decode_grid(int64_t tokens, int64_t topk, int64_t rows1, int64_t rows2, int sms) {
  return std::to_string(fused_decode_blocks(tokens, topk, rows1, rows2, sms * kFusedDecodeBlocksPerSm)) +
         " blocks of " + std::to_string(kFusedDecodeWarps) + " warps";
}

inline constexpr const char* kFusedDecodeDescription =
    "one launch: GEMM1, a grid barrier, GEMM2 and the combine on the same blocks (cooperative), tiles of an "
    "expert's pairs built in each block";

inline constexpr const char* kTileWaitDescription = ", GEMM2 on each tile once GEMM1 has finished it";

// A per-pair forward's GEMM2 stores each pair's row at the pair's index and
// the combine kernel sums each token's k rows. GEMM2's blocks did that sum
// themselves at first (the block that completed a (token, 32-row block)
// counter, after a barrier and a GPU-scope acquire-release arrival, while it
// held its SM slot), which cost more than the kernel at every T up to 6
// (H200, sm90 backend, 2026-11-30, us, fused / kernel): gpt-oss-20b T = 1
// 25.2 / 25.0, T = 2 42.9 / 40.9, T = 4 69.0 / 65.8, T = 6 91.2 / 87.0;
// gpt-oss-120b T = 1 25.6 / 25.1, T = 4 77.8 / 74.0, T = 6 108.3 / 102.9.
inline constexpr const char* kPerPairDescription =
    "a tile per expert of the (token, slot) pairs, found in the GEMMs: no grouping kernel";

// ", GEMM2 and the combine in one kernel (16 warps a block)", or nothing for 0.
inline std::string describe_down_combine(int warps) {
  return warps > 0 ? ", GEMM2 and the combine in one kernel (" + std::to_string(warps) + " warps a block)" : "";
}

// One line on the tiles of both GEMMs at `tokens` (what `mxmoe info` prints),
// e.g. "32-token tiles of expert-grouped rows"; `o` as moe_forward takes it.
inline std::string describe_tiles(int64_t tokens, int64_t topk, int64_t experts, int64_t intermediate_padded,
                                  const Overrides& o = {}) {
  if (fused_decode(tokens, topk, o.fused_decode)) return kFusedDecodeDescription;
  const int tile = token_tile(tokens, topk, experts);
  const int fused = tile == 8 ? down_combine_warps(tokens, topk, experts, intermediate_padded, o.down_combine_warps) : 0;
  if (per_pair_decode(tokens, topk, tile))
    return std::string(kPerPairDescription) + (decode_tile_waits(tokens, true, fused > 0) ? kTileWaitDescription : "") +
           describe_down_combine(fused);
  return std::to_string(tile) + "-token tiles of expert-grouped rows" + describe_down_combine(fused);
}

}  // namespace mxmoe::portable
