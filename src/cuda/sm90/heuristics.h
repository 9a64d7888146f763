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

// Shared memory one block may use on SM90 (227 KB, after opting in).
inline constexpr int kMaxDynamicSmem = 232448;
// Deepest ring. Deeper rings only add start-up latency: 12 stages of 32
// tokens instead of 8 left gpt-oss-120b T = 256 at 741 vs 737 us (H200).
inline constexpr int kMaxStages = 8;
// At most this many (token, slot) pairs the portable decode kernels (8-token
// tiles, split K) beat the wgmma GEMMs. Measured on the H200 (2026-11-29,
// after a stage's codes came in one copy, s19), decode / wgmma with 16-token
// tiles in us: gpt-oss-20b T = 16 (64 pairs) 137.1 / 139.7, T = 24 (96)
// 149.5 / 150.6, T = 32 (128) 159.2 / 154.4, T = 48 178.9 / 156.7;
// gpt-oss-120b T = 16 (64) 236.2 / 235.4, T = 32 (128) 381.6 / 356.8,
// T = 64 509.9 / 464.2, T = 192 709.0 / 551.6. The crossover follows the pair
// count, not the rows per expert: 20b T = 16 (2 rows) and 120b T = 32 (1 row)
// fall on opposite sides of it.
inline constexpr int64_t kDecodeMaxPairs = 64;

enum class Path { kPortableDecode, kWgmma };

// Tuning knobs (tests and benchmarks); 0 keeps the heuristic.
struct Overrides {
  int path = 0;        // 1: portable decode, 2: wgmma
  int token_tile = 0;  // 16, 32, 64 or 128
};

struct Config {
  Path path = Path::kPortableDecode;
  int token_tile = 0;    // tokens per wgmma tile (the N of m64nNk16); 0 on the decode path
  int stages_gemm1 = 0;  // pipeline stages of GEMM1 (K = padded H) and GEMM2 (K = padded I)
  int stages_gemm2 = 0;
  bool per_pair = false;  // decode path: a tile per (token, slot) pair (portable::per_pair_decode)
};

// Mean (token, slot) rows per expert, rounded up.
inline int64_t mean_rows_per_expert(int64_t tokens, int64_t topk, int64_t experts) {
  return (tokens * topk + experts - 1) / experts;
}

// Tokens per wgmma tile. Each expert's rows are padded to the tile, about
// half a tile per expert on average: with m rows per expert a tile of N keeps
// m / (m + N/2) of its columns busy (m = 128: 80% at 64, 67% at 128). A
// larger tile dequantises each weight once for more tokens and cuts the
// weight re-reads from L2. Measured on the H200 (2026-11-29, s19), per mean
// rows per expert m, in us: 16 against 32 wins up to 12 (m = 8: 158.9 vs
// 172.4, 20b T = 64; 547.0 vs 619.8, 120b T = 256; m = 12: 169.9 vs 174.8, 20b
// T = 96; 611.3 vs 610.7, 120b T = 384) and loses from 16 (218.2 vs 177.2,
// 20b T = 128; 798.3 vs 619.6, 120b T = 512); 32 against 64 wins below 32
// (m = 24: 181.0 vs 236.9, 20b T = 192; 700.9 vs 896.4, 120b T = 768) and
// ties at 32 (244.5 vs 240.5, 20b T = 256; 946.2 vs 941.5, 120b T = 1024);
// 64 against 128 wins below 64 (m = 48: 1003.8 vs 1249.8, 120b T = 1536),
// ties at 64 (340.3 vs 336.3, 20b T = 512; 1364.4 vs 1370.5, 120b T = 2048)
// and loses above (m = 96: 450.3 vs 356.4, 20b T = 768; m = 128: 2317.1 vs
// 2117.7, 120b T = 4096).
inline int token_tile(int64_t tokens, int64_t topk, int64_t experts, int override_tile = 0) {
  if (override_tile == 16 || override_tile == 32 || override_tile == 64 || override_tile == 128) return override_tile;
  const int64_t m = mean_rows_per_expert(tokens, topk, experts);
  return m <= 12 ? 16 : m < 32 ? 32 : m < 64 ? 64 : 128;
}

// Deepest ring (at most kMaxStages) whose shared memory fits, or 0 when not
// even two stages do (K too large).
inline int pipeline_stages(int token_tile, int64_t k_padded) {
  for (int s = kMaxStages; s >= 2; --s)
    if (smem_layout(token_tile, int(k_padded), s).bytes <= kMaxDynamicSmem) return s;
  return 0;
}

// The configuration for `tokens` tokens of a layer with padded H and I.
inline Config choose_config(int64_t tokens, int64_t topk, int64_t experts, int64_t hidden_padded,
                            int64_t intermediate_padded, const Overrides& o = {}) {
  Config c;
  const bool decode = tokens * topk <= kDecodeMaxPairs;
  c.per_pair = portable::per_pair_decode(tokens, topk, experts, portable::token_tile(tokens, topk, experts));
  if (o.path == 1 || (o.path != 2 && decode)) return c;
  const int bn = token_tile(tokens, topk, experts, o.token_tile);
  const int s1 = pipeline_stages(bn, hidden_padded), s2 = pipeline_stages(bn, intermediate_padded);
  if (s1 == 0 || s2 == 0) return c;  // K too large for two stages: the portable kernels take any K
  c.path = Path::kWgmma;
  c.per_pair = false;
  c.token_tile = bn;
  c.stages_gemm1 = s1;
  c.stages_gemm2 = s2;
  return c;
}

// One line, e.g. "wgmma: 128-token tiles, 5 / 5 stages (GEMM1 / GEMM2)".
inline std::string describe(const Config& c) {
  if (c.path == Path::kPortableDecode)
    return c.per_pair ? std::string("portable decode kernels (mma.sync GEMV), ") + portable::kPerPairDescription
                      : "portable decode kernels (mma.sync GEMV) on expert-grouped tiles";
  return "wgmma: " + std::to_string(c.token_tile) + "-token tiles, " + std::to_string(c.stages_gemm1) + " / " +
         std::to_string(c.stages_gemm2) + " stages (GEMM1 / GEMM2)";
}

}  // namespace mxmoe::sm90
