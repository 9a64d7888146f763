#include "parallel/expert_dispatch.h"

namespace mxmoe::parallel {

TokenSlice token_slice(int64_t tokens, int size, int rank) {
  return {tokens * rank / size, tokens * (rank + 1) / size};
}

DispatchPlan plan_dispatch(const int32_t* ids, int64_t pairs, int64_t experts, int size) {
  DispatchPlan plan;
  plan.send_counts.assign(size_t(size), 0);
  plan.pair_pos.resize(size_t(pairs));
  for (int64_t p = 0; p < pairs; ++p) ++plan.send_counts[size_t(expert_owner(ids[p], experts, size))];
  std::vector<int32_t> next(size_t(size), 0);  // first free row of each destination
  for (int d = 1; d < size; ++d) next[size_t(d)] = next[size_t(d - 1)] + plan.send_counts[size_t(d - 1)];
  for (int64_t p = 0; p < pairs; ++p) plan.pair_pos[size_t(p)] = next[size_t(expert_owner(ids[p], experts, size))]++;
  return plan;
}

ExchangeLayout exchange_layout(const int32_t* all_counts, int size, int rank) {
  ExchangeLayout x;
  x.send_count.resize(size_t(size));
  x.send_offset.resize(size_t(size));
  x.recv_count.resize(size_t(size));
  x.recv_offset.resize(size_t(size));
  int64_t sent = 0;
  for (int p = 0; p < size; ++p) {
    x.send_offset[size_t(p)] = sent;
    x.send_count[size_t(p)] = all_counts[int64_t(rank) * size + p];
    sent += x.send_count[size_t(p)];
    x.recv_offset[size_t(p)] = x.received;
    x.recv_count[size_t(p)] = all_counts[int64_t(p) * size + rank];
    x.received += x.recv_count[size_t(p)];
  }
  return x;
}

}  // namespace mxmoe::parallel
