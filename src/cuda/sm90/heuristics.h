// Policy of the sm90 backend: small pure functions of the problem (tokens,
// shape) that pick the path (the wgmma GEMMs, or the portable GEMV for decode),
// the token tile and the pipeline depth of each GEMM. Each comment gives the
// arithmetic a choice rests on, and the H200 measurement where one was made.
// `mxmoe info` prints the configuration per token count.
#pragma once

#include <cstdint>
#include <string>

#include "cuda/portable/heuristics.h"
#include "cuda/sm90/sm90_layout.h"

namespace mxmoe::sm90 {

// Deepest ring. Deeper rings only add start-up latency: 12 stages of 32
// tokens instead of 8 left gpt-oss-120b T = 256 at 741 vs 737 us (H200).
inline constexpr int kMaxStages = 8;
// The portable decode kernels (8-token tiles, split K) beat the wgmma GEMMs
// up to 128 (token, slot) pairs at gpt-oss's expert counts, where each expert
// has at most 8 rows. Measured on the H200 (decode v15: blocks of 4 or 8
// warps, scale words; 2026-11-30), decode / wgmma in us, two runs each:
// gpt-oss-20b T = 16 (64 pairs) 112.9, 113.7 / 126.6, 126.6; T = 20 (80)
// 117.1, 117.8 / 130.3, 130.3; T = 24 (96) 121.2, 121.5 / 133.8, 133.9; T =
// 32 (128) 128.7, 129.2 / 137.4, 137.5. gpt-oss-120b T = 16 187.8, 188.5 /
// 205.1, 203.9; T = 20 216.5, 217.1 / 232.4, 231.1; T = 24 247.1, 247.3 /
// 262.8, 261.1; T = 32 303.6, 296.1 / 320.4, 313.5. Before v15 the bound was
// 64 pairs (120b lost 2% at 96 pairs and 3.5% at 128 then). Up to 64 pairs
// the decode path is taken whatever the experts (measured down to 32 pairs on
// 32 and 128 experts); past that only while the portable forward keeps its
// 8-token decode tiles (at most 8 rows an expert), the shapes measured.
inline constexpr int64_t kDecodeAnyPairs = 64;
inline constexpr int64_t kDecodeMaxPairs = 128;

// Whether the portable decode kernels take `pairs` (token, slot) pairs, for
// which the portable forward would pick `portable_tile` (portable::token_tile).
inline bool decode_path(int64_t pairs, int portable_tile) {
  return pairs <= kDecodeAnyPairs || (pairs <= kDecodeMaxPairs && portable_tile == 8);
}

enum class Path { kPortableDecode, kWgmma };

// Tuning knobs (tests and benchmarks); 0 keeps the heuristic.
struct Overrides {
  int path = 0;        // 1: portable decode, 2: wgmma
  int token_tile = 0;  // a token tile the kernel is built for (is_token_tile)
  portable::Overrides decode;  // the decode path's (portable::moe_forward's)
};

struct Config {
  Path path = Path::kPortableDecode;
  int token_tile = 0;    // tokens per wgmma tile (the N of m64nNk16); 0 on the decode path
  int stages_gemm1 = 0;  // pipeline stages of GEMM1 (K = padded H) and GEMM2 (K = padded I)
  int stages_gemm2 = 0;
  bool per_pair = false;  // decode path: per-pair tiles, no grouping (portable::per_pair_decode)
  bool tile_waits = false;  // decode path: GEMM2 waits per tile (portable::decode_tile_waits)
  bool fused = false;       // decode path: one launch (portable::fused_decode)
  // decode path: what portable::moe_forward runs, decided here: the GEMM2 +
  // combine block's warps (portable::down_combine_warps), or kDownCombineSplit
  // for the two apart; the rest as Overrides::decode gave it.
  portable::Overrides decode;
  // GEMM1 writes each item's outputs into shared memory and stores them with
  // one bulk copy (sm90_layout.h, output_half_bytes): stages_output.
  bool staged_output = false;
  // Both GEMMs read their weight codes under an L2 evict-first policy: streams_codes.
  bool stream_codes = false;
};

// Mean (token, slot) rows per expert, rounded up.
inline int64_t mean_rows_per_expert(int64_t tokens, int64_t topk, int64_t experts) {
  return (tokens * topk + experts - 1) / experts;
}

// Tokens per wgmma tile. Each expert's rows are padded to the tile, and each
// tile dequantises all of its expert's weights once; a 128-K chunk costs about
// its MMA (16 wgmma per SM: 13 cycles each at N = 16, N / 4 from N = 32) plus
// ~600 cycles that do not overlap it (dequantisation, stage waits). So the
// tile follows the mean rows per expert m = T k / E: wide enough that one or
// two tiles hold an expert's rows, no wider. Measured on the H200
// (2026-11-29), per m, in us (gpt-oss-20b T = 8m, gpt-oss-120b T = 32m):
//   m = 8:   16 158.9 / 32 172.4 (20b); 16 547.0 / 32 619.8 (120b)
//   m = 12:  16 169.9 / 32 174.8; 16 611.3 / 32 610.7
//   m = 16:  32 177.2 / 16 218.2; 32 619.6 / 16 798.3
//   m = 24:  32 184.4 / 48 212.4 / 64 236.9; 32 727.1 / 48 813.8
//   m = 32:  48 216.9 / 64 244.2 / 32 244.5; 48 830.6 / 64 941.5 / 32 946.2
//   m = 48:  64 250.6 / 96 281.8 / 48 292.3; 64 924.1 / 96 1121.8 / 48 1189.0
//   m = 56:  64 275.9 / 96 287.1 / 128 337.6 (20b)
//   m = 64:  96 294.9 / 128 336.3 / 64 340.3; 96 1222.3 / 64 1364.4 / 128 1370.5
//   m = 68:  96 296.4 / 128 346.7 / 64 377.4 (20b)
//   m = 80:  96 305.3 / 128 351.5 / 64 430.4 (20b)
//   m = 96:  128 356.9 / 96 398.6 / 160 424.4 / 64 450.3; 128 1485.8 / 160 1735.8 / 96 1751.5
//   m = 128: 160 447.2 / 128 509.0 / 192 522.6 / 96 566.1; 160 1865.9 / 192 2118.6 / 128 2141.6
//   m = 160: 160 642.7 / 128 690.3; 160 2600.8 / 128 2785.2
//   m = 192: 128 725.4 / 160 843.5; 128 2935.5 / 160 3362.8
//   m = 256: 128 898.4 / 192 1023.2; 128 3763.5 / 192 4151.2
//   m = 512: 192 1670.2 / 128 1702.1; 192 6604.7 / 128 6884.2
//   m = 2048: 192 6098.0 / 128 6326.1 (20b T = 16384)
// Between 128 and 160 (s33, H200, 2026-11-30; two runs each):
//   m = 112: 128 337.8, 337.3 / 144 350.6, 351.3 / 160 387.4, 377.6 (20b)
//   m = 120: 144 365.7, 364.6 / 128 378.2, 382.1 / 160 386.0, 385.0; 144 1565.9, 1577.5 / 160 1679.6, 1678.6
//   m = 128: 144 380.9, 378.8 / 160 385.7, 387.4 / 128 457.7, 459.2; 144 1638.1, 1658.1 / 160 1688.0, 1703.6
//   m = 136: 160 404.7, 405.6 / 144 434.4, 421.1; 160 1751.4, 1764.5 / 144 1857.7, 1855.8
//   m = 144: 160 422.8, 422.1 / 128 555.6, 567.5 (20b)
// (A 152-token tile, built for this, won only at m = 136, by under 1%: not
// kept.) An expert's rows are about Poisson(m): at m = 128, 7% of the experts
// overflow 144 into a second tile and 0.2% overflow 160, and 144 still wins
// by its 10% fewer columns.
// Up to m = 56 again with two blocks per SM for tiles up to 64 tokens
// (blocks_per_sm; s24, H200, 2026-11-29):
//   m = 12:  16 161.4 / 32 168.5; 16 616.9 / 32 633.1
//   m = 16:  32 170.9 / 48 193.6 / 16 206.4; 32 638.3 / 48 734.7 / 16 758.4
//   m = 24:  32 174.7 / 48 198.7 / 64 219.9; 32 645.2 / 48 792.6
//   m = 32:  48 202.8 / 64 223.9 / 32 243.3; 48 762.3 / 64 940.0 / 32 978.7
//   m = 40:  48 219.0 / 64 227.5 / 32 294.7; 48 867.9 / 64 957.0
//   m = 48:  64 232.8 / 48 279.0 / 96 283.6; 64 1007.5 / 48 1065.6 / 96 1099.6
//   m = 56:  64 267.5 / 96 291.1 (20b)
// With each item's wgmmas only as wide as its columns reach (s37; H200,
// 2026-11-30, two runs each), at m = 8-11 16 still wins and from m = 12 32:
//   m = 8:   16 139.0, 138.8 / 32 144.0, 144.3; 16 479.0, 468.8 / 32 490.5, 515.0
//   m = 10:  16 140.7, 140.9 / 32 145.8, 146.0; 16 532.7, 490.9 / 32 513.7, 527.5
//   m = 11:  16 141.8, 141.9 / 32 146.6, 147.7; 16 518.2, 541.6 / 32 544.9, 507.3
//   m = 12:  32 148.1, 148.0 / 16 150.4, 150.1; 32 523.7, 518.3 / 16 530.1, 538.8
//   m = 16:  32 151.1, 152.0 / 48 164.7, 163.8 (20b)
//   m = 24:  32 160.9, 161.5 / 48 172.7, 172.4 / 64 188.2, 188.2; 32 626.6, 658.1 / 48 604.2, 653.8
//   m = 32:  48 182.2, 182.3 / 64 196.5, 196.7; 48 635.8, 663.0 / 64 679.0, 680.9
//   m = 40:  48 200.2, 200.8 / 64 206.2, 205.2 (20b)
// The widths do not grow monotonically with m: 192 rows fill two 128-token
// tiles exactly but pad a 160-token pair to 320. Each boundary lies midway
// between the measured m on either side.
inline int token_tile(int64_t tokens, int64_t topk, int64_t experts, int override_tile = 0) {
  if (is_token_tile(override_tile)) return override_tile;
  const int64_t m = mean_rows_per_expert(tokens, topk, experts);
  if (m < 12) return 16;
  if (m < 28) return 32;
  if (m < 44) return 48;
  if (m < 62) return 64;
  if (m < 88) return 96;
  if (m < 116) return 128;
  if (m < 132) return 144;
  if (m < 176) return 160;
  return m < 384 ? 128 : 192;
}

// Deepest ring (at most kMaxStages) whose shared memory fits the block's
// share of the SM (max_dynamic_smem) beside GEMM1's output half when
// `staged_output`, or 0 when not even two stages do (K too large).
inline int pipeline_stages(int token_tile, int64_t k_padded, bool staged_output = false) {
  for (int s = kMaxStages; s >= 2; --s)
    if (smem_layout(token_tile, int(k_padded), s, staged_output).bytes <= max_dynamic_smem(token_tile)) return s;
  return 0;
}

// Whether GEMM1 stages its outputs (Config::staged_output), from its ring
// depth without and with the output half: where that costs no stage, or
// leaves at least 4. Measured on the H200 (2026-11-30) with the output staged
// at every tile, us, two runs each, unstaged / staged: 96-token tiles (6 / 5
// stages at K = 2880) 20b T = 512 249.0, 249.1 / 250.6, 251.4, 120b T = 2048
// 1065.8, 1050.8 / 1060.5, 1005.4; 128 (5 / 4) 20b T = 768 307.9, 308.2 /
// 308.8, 308.5, T = 2048 782.5, 760.0 / 720.7, 721.4, 120b T = 3072 1343.7,
// 1348.8 / 1333.0, 1337.7; 160 (4 / 3) 20b T = 1280 533.6, 533.6 / 560.3,
// 554.2. Staging where it costs no stage: docs/PERF.md (s39).
inline bool stages_output(int stages_unstaged, int stages_staged) {
  return stages_staged >= 2 && (stages_staged == stages_unstaged || stages_staged >= 4);
}

// Whether the GEMMs read the weight codes under an L2 evict-first policy:
// where an expert's mean rows fit one token tile, each code byte is read by
// one tile and never again in the forward, so L2 may drop it first and keep
// the activations that are read again (each token tile's by every row tile of
// its expert, GEMM1's outputs by GEMM2). Where experts hold several tiles, the
// later tiles re-read the codes from L2. Measured on the H200 (2026-11-30),
// plain / evict-first, us, two runs each in one call: 48-token tiles
// (m = 32) gpt-oss-20b T = 256 178.2, 178.5 / 176.9, 176.9, gpt-oss-120b
// T = 1024 638.3, 641.1 / 605.2, 605.7; 144 (m = 128) 20b T = 1024 362.4,
// 363.8 / 362.3, 362.6, 120b T = 4096 1591.0, 1591.9 / 1578.7, 1613.6; 192
// (m = 512, about three tiles an expert) 20b T = 4096 1419.5, 1419.6 /
// 1434.1, 1438.3. With this rule, next call: 16-token tiles (m = 8) 20b T =
// 64 137.1, 137.8 / 133.2, 133.4, 120b T = 256 468.5, 460.2 / 460.0, 459.7;
// 120b T = 1024 699.9, 623.1 / 604.3, 671.5 (that point is bimodal: 629.0
// and 679.4 with evict-first in a third call).
inline bool streams_codes(int64_t tokens, int64_t topk, int64_t experts, int token_tile) {
  return mean_rows_per_expert(tokens, topk, experts) <= token_tile;
}

// The configuration for `tokens` tokens of a layer with padded H and I.
inline Config choose_config(int64_t tokens, int64_t topk, int64_t experts, int64_t hidden_padded,
                            int64_t intermediate_padded, const Overrides& o = {}) {
  Config c;
  c.decode = o.decode;
  const int portable_tile = portable::token_tile(tokens, topk, experts);
  const bool decode = decode_path(tokens * topk, portable_tile);
  c.per_pair = portable::per_pair_decode(tokens, topk, portable_tile);
  const int fused = portable_tile == 8 ? portable::down_combine_warps(tokens, topk, experts, intermediate_padded,
                                                                      o.decode.down_combine_warps)
                                       : 0;
  c.decode.down_combine_warps = fused > 0 ? fused : portable::kDownCombineSplit;
  c.tile_waits = portable::decode_tile_waits(tokens, c.per_pair, fused > 0);
  c.fused = portable::fused_decode(tokens, topk, o.decode.fused_decode);
  c.decode.fused_decode = c.fused ? portable::kFusedDecodeOn : portable::kFusedDecodeOff;
  if (o.path == 1 || (o.path != 2 && decode)) return c;
  const int bn = token_tile(tokens, topk, experts, o.token_tile);
  const int s1 = pipeline_stages(bn, hidden_padded), s2 = pipeline_stages(bn, intermediate_padded);
  if (s1 == 0 || s2 == 0) return c;  // K too large for two stages: the portable kernels take any K
  c.path = Path::kWgmma;
  c.per_pair = false;
  c.fused = false;
  c.decode = {};
  c.tile_waits = false;
  c.token_tile = bn;
  const int s1_staged = pipeline_stages(bn, hidden_padded, true);
  c.staged_output = stages_output(s1, s1_staged);
  c.stages_gemm1 = c.staged_output ? s1_staged : s1;
  c.stages_gemm2 = s2;
  c.stream_codes = streams_codes(tokens, topk, experts, bn);
  return c;
}

// One line, e.g. "wgmma: 128-token tiles, 5 / 5 stages (GEMM1 / GEMM2), 1 block per SM".
inline std::string describe(const Config& c) {
  if (c.path == Path::kPortableDecode && c.fused)
    return std::string("portable decode kernel (mma.sync GEMV) in ") + portable::kFusedDecodeDescription;
  if (c.path == Path::kPortableDecode)
    return c.per_pair ? std::string("portable decode kernels (mma.sync GEMV), ") + portable::kPerPairDescription +
                            (c.tile_waits ? portable::kTileWaitDescription : "") +
                            portable::describe_down_combine(c.decode.down_combine_warps)
                      : "portable decode kernels (mma.sync GEMV) on expert-grouped tiles" +
                            portable::describe_down_combine(c.decode.down_combine_warps);
  const int blocks = blocks_per_sm(c.token_tile);
  return "wgmma: " + std::to_string(c.token_tile) + "-token tiles, " + std::to_string(c.stages_gemm1) + " / " +
         std::to_string(c.stages_gemm2) + " stages (GEMM1 / GEMM2), " + std::to_string(blocks) +
         (blocks == 1 ? " block per SM" : " blocks per SM") +
         (narrows_columns(c.token_tile) ? ", wgmma N per item up to its last token column" : "") +
         (c.staged_output ? ", GEMM1 output staged for one bulk store per item" : "") +
         (c.stream_codes ? ", weight codes read evict-first from L2" : "");
}

}  // namespace mxmoe::sm90
