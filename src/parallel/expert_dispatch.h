// Expert-parallel bookkeeping: which tokens a rank owns, where each of its
// (token, slot) rows goes, and the row counts and offsets of the exchanges.
// Pure functions; the device computes the same dispatch plan with
// src/cuda/parallel/smxx_ep_dispatch.cu (checked against plan_dispatch).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mxmoe::parallel {

// Tokens [begin, end) of `rank` of `size`: contiguous, in rank order, sizes
// differing by at most one. When T < size some ranks own no token.
struct TokenSlice {
  int64_t begin = 0, end = 0;
  int64_t count() const { return end - begin; }
};
TokenSlice token_slice(int64_t tokens, int size, int rank);

// Rank holding global expert `expert` when E experts are split evenly over
// `size` ranks (size divides E), and its id on that rank.
inline int expert_owner(int64_t expert, int64_t experts, int size) {
  return int(expert / (experts / size));
}
inline int32_t local_expert(int64_t expert, int64_t experts, int size) {
  return int32_t(expert % (experts / size));
}

// Where the rows of one rank go. Pair p = t * k + s follows the routing's
// order. The send buffer is destination-major (the rows for rank 0, then rank
// 1, ...) and, within a destination, in increasing p:
//   pair_pos[p] = (rows for ranks before d) + (pairs before p going to d),
// d = expert_owner(ids[p]). A receiver stores each source's rows in the
// source's order, computes them in place and sends them back in that order,
// so the result of pair p comes back to row pair_pos[p].
struct DispatchPlan {
  std::vector<int32_t> send_counts;  // [size] rows for each rank
  std::vector<int32_t> pair_pos;     // [pairs] row of each pair in the send buffer
};
DispatchPlan plan_dispatch(const int32_t* ids, int64_t pairs, int64_t experts, int size);

// Both exchanges of `rank`, from the all-gathered counts (all_counts[s * size
// + d] = rows rank s sends to rank d). Rows go out from the destination-major
// send buffer and arrive source-major in the receive buffer; results travel
// back the same way reversed.
struct ExchangeLayout {
  std::vector<int64_t> send_count, send_offset;  // [size] rows to each rank, first send-buffer row
  std::vector<int64_t> recv_count, recv_offset;  // [size] rows from each rank, first receive-buffer row
  int64_t received = 0;                          // rows this rank computes
};
ExchangeLayout exchange_layout(const int32_t* all_counts, int size, int rank);

}  // namespace mxmoe::parallel
