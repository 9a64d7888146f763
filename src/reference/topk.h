// The router's top-k selection, shared by the reference and the cpu backend.
#pragma once

#include <cmath>
#include <cstdint>

namespace mxmoe {

// ids[0, k): the k largest of logits[0, E), highest first, equal logits to
// the lower id; weights[0, k): their softmax over the k, computed in Acc.
// A NaN logit is never larger than another, so every id is valid even then.
template <typename Acc>
void select_topk(const Acc* logits, int64_t E, int64_t k, int32_t* ids, float* weights) {
  for (int64_t s = 0; s < k; ++s) {
    int64_t best = -1;
    for (int64_t e = 0; e < E; ++e) {
      bool taken = false;
      for (int64_t j = 0; j < s && !taken; ++j) taken = ids[j] == e;
      if (!taken && (best < 0 || logits[e] > logits[best])) best = e;
    }
    ids[s] = int32_t(best);
  }
  const Acc top = logits[ids[0]];
  Acc denom = 0;
  for (int64_t s = 0; s < k; ++s) denom += std::exp(logits[ids[s]] - top);
  for (int64_t s = 0; s < k; ++s) weights[s] = float(std::exp(logits[ids[s]] - top) / denom);
}

}  // namespace mxmoe
