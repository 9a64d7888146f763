// Tensor- and expert-parallel shards of the prepared weights (rules in
// include/mxmoe/prepare.h).
#include <algorithm>

#include <fmt/format.h>

#include "mxmoe/prepare.h"
#include "prepare/copy_slice.h"

namespace mxmoe {
namespace {

Status check_rank(int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size)
    return Status::InvalidArgument(fmt::format("shard: rank {} of size {} is out of range", rank, size));
  return Status::Ok();
}

}  // namespace

Status shard_tensor_parallel(BackendKind backend, const MoeWeightsView& w, int rank, int size,
                             WeightShard* out) {
  MXMOE_RETURN_IF_ERROR(check_rank(rank, size));
  MXMOE_RETURN_IF_ERROR(validate_shape(w.shape));
  // Ir is a multiple of lcm(32, alignment): each rank's slice is whole MX
  // blocks of w2's K and needs no further padding.
  const int64_t per_rank = tensor_parallel_intermediate(backend, w.shape.intermediate, size) / size;
  MoeShape shape = w.shape;
  shape.intermediate = per_rank;
  out->rank = rank;
  out->size = size;
  out->expert_offset = 0;
  out->global_experts = w.shape.experts;
  out->intermediate_offset = rank * per_rank;
  SliceSpec slice;
  slice.intermediate_begin = out->intermediate_offset;
  slice.with_b2 = rank == 0;  // b2 is added once to the sum over ranks
  slice.with_router = true;
  return prepare_slice(make_plan(backend, shape), w, slice, &out->prepared);
}

Status shard_expert_parallel(BackendKind backend, const MoeWeightsView& w, int rank, int size,
                             WeightShard* out) {
  MXMOE_RETURN_IF_ERROR(check_rank(rank, size));
  MXMOE_RETURN_IF_ERROR(validate_shape(w.shape));
  const int64_t E = w.shape.experts;
  if (size > E)
    return Status::InvalidArgument(
        fmt::format("expert parallel: {} ranks for {} experts leaves a rank without experts", size, E));
  const int64_t begin = rank * E / size, end = (rank + 1) * E / size;
  MoeShape shape = w.shape;
  shape.experts = end - begin;
  shape.topk = std::min(w.shape.topk, shape.experts);
  out->rank = rank;
  out->size = size;
  out->expert_offset = begin;
  out->global_experts = E;
  out->intermediate_offset = 0;
  SliceSpec slice;
  slice.expert_begin = begin;
  slice.with_router = false;  // routing comes from the full router, with global ids
  return prepare_slice(make_plan(backend, shape), w, slice, &out->prepared);
}

Status localize_routing(const RoutingView& g, const WeightShard& shard, Routing* out) {
  MXMOE_RETURN_IF_ERROR(validate_routing(g, shard.global_experts));
  const int64_t local = shard.prepared.plan.shape.experts;
  const int64_t k_out = std::min(g.topk, local);
  out->tokens = g.tokens;
  out->topk = k_out;
  // Empty slots: local expert 0 with weight 0 adds 0 * (finite output) = 0.
  out->ids.assign(size_t(g.tokens * k_out), 0);
  out->weights.assign(size_t(g.tokens * k_out), 0.0f);
  for (int64_t t = 0; t < g.tokens; ++t) {
    int64_t n = 0;
    for (int64_t k = 0; k < g.topk; ++k) {
      const int64_t id = g.ids[t * g.topk + k] - shard.expert_offset;
      if (id < 0 || id >= local) continue;
      if (n == k_out)
        return Status::InvalidArgument(fmt::format(
            "localize_routing: token {} has more than {} slots on experts [{}, {})", t, k_out,
            shard.expert_offset, shard.expert_offset + local));
      out->ids[size_t(t * k_out + n)] = int32_t(id);
      out->weights[size_t(t * k_out + n)] = g.weights[t * g.topk + k];
      ++n;
    }
  }
  return Status::Ok();
}

}  // namespace mxmoe
