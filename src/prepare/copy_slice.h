// One copy routine behind prepare_weights and the shards: copies a block of
// experts and a window of intermediate columns of the original weights into a
// plan's padded layout, leaving neutral padding everywhere else.
#pragma once

#include <cstdint>

#include "mxmoe/prepare.h"

namespace mxmoe {

struct SliceSpec {
  int64_t expert_begin = 0;        // original expert copied to local expert 0
  int64_t intermediate_begin = 0;  // original column j copied to local column j - begin
  bool with_b2 = true;             // false: b2 stays 0 (tensor-parallel ranks > 0)
  bool with_router = true;         // the router is per layer, not per shard
};

// plan.shape.experts experts and plan.intermediate_padded columns are copied;
// columns at or past the original I are padding. plan.shape.hidden must equal
// the original H; intermediate_begin must be a multiple of 32.
Status prepare_slice(const PreparePlan& plan, const MoeWeightsView& original,
                     const SliceSpec& slice, PreparedWeights* out);

// Router rows [expert_begin, expert_begin + experts) of `original` into `out`:
// weight [experts, hidden_padded] (padded columns 0), bias [experts]. Both stay
// empty when `original` has no router.
void copy_router(const MoeWeightsView& original, int64_t expert_begin, int64_t experts,
                 int64_t hidden_padded, MoeWeights* out);

}  // namespace mxmoe
