// How many token tiles a grouped GEMM launches: a pure function of the
// problem, shared by the launchers (grid sizes, workspace) and `mxmoe info`.
#pragma once

#include <cstdint>

namespace mxmoe::smxx {

// Upper bound on the number of token tiles: sum_e ceil(c_e / tile) with
// sum_e c_e = T*k is at most ceil(T*k / tile) + (number of non-empty experts).
inline int64_t max_token_tiles(int64_t tokens, int64_t topk, int64_t experts, int tile) {
  const int64_t pairs = tokens * topk;
  return (pairs + tile - 1) / tile + (pairs < experts ? pairs : experts);
}

}  // namespace mxmoe::smxx
