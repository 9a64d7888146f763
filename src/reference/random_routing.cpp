#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "mxmoe/moe.h"

namespace mxmoe {

Routing make_random_routing(int64_t tokens, int64_t experts, int64_t topk, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Routing r;
  r.tokens = tokens;
  r.topk = topk;
  r.ids.resize(size_t(tokens * topk));
  r.weights.resize(size_t(tokens * topk));
  std::vector<int32_t> perm(static_cast<size_t>(experts));
  std::vector<float> logits(static_cast<size_t>(topk));
  for (int64_t t = 0; t < tokens; ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    // Partial Fisher-Yates: the first k entries are k distinct experts.
    for (int64_t k = 0; k < topk; ++k) {
      std::uniform_int_distribution<int64_t> pick(k, experts - 1);
      std::swap(perm[size_t(k)], perm[size_t(pick(rng))]);
    }
    float sum = 0.0f;
    for (int64_t k = 0; k < topk; ++k) sum += (logits[size_t(k)] = std::exp(normal(rng)));
    for (int64_t k = 0; k < topk; ++k) {
      r.ids[size_t(t * topk + k)] = perm[size_t(k)];
      r.weights[size_t(t * topk + k)] = logits[size_t(k)] / sum;
    }
  }
  return r;
}

}  // namespace mxmoe
