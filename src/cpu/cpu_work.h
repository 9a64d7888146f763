// How the forward's threads share a GEMM: pure functions of the experts'
// row counts (cpu_moe.cpp calls them; tests/cpu_work_test.cpp checks them).
#pragma once

#include <cstdint>

namespace mxmoe::cpu {

// The cost of one item (a weight group streamed over K for all its expert's
// rows) in units of one row's dot products: streaming the group costs about
// as much as one more row. Measured on avx512_vnni, one thread, gpt-oss-120b
// shapes, every token on the same 4 experts (rotated over 16 so the weights
// come from DRAM), EPYC Zen 4 host, 2026-12-02: 2.11 ms a forward at 1 row an
// expert, 33.6 at 32, 67.8 at 64: 1.07 ms a row and 1.04 ms more.
inline constexpr int64_t kStreamRows = 1;

inline int64_t item_cost(int64_t rows) { return kStreamRows + rows; }

// Whether the amx path computes an expert's block sums with tile multiplies
// (cpu_amx_kernels.cpp): from this many rows (tokens) of the expert. Below,
// its rows take avx512_vnni's vpdpbusd chains. Set from instruction counts,
// not a measurement: a block of a 16-row group costs avx512_vnni 19.2 cycles
// a token (cpu_avx512vnni_ops.h); the tiles about 40 cycles of fixed work
// (the decoded weights stored and loaded, two tdpbsud, two 16 x 16 sums
// stored) and 7 instructions a token, so they pay from 3 or 4 rows.
inline constexpr int64_t kAmxMinRows = 4;

inline bool amx_tiles_pay(int64_t rows) { return rows >= kAmxMinRows; }

// Items [begin, end) of expert `expert`.
struct Span {
  int64_t expert, begin, end;
};

// Thread `t` of `n`'s share of the items of every expert that has rows:
// `items` items an expert, expert e's rows offsets[e + 1] - offsets[e]. The
// experts' items, in expert order, are cut into n contiguous runs of equal
// cost (each item to the thread whose run holds its start), so each thread
// streams one contiguous range of the weights, and at T = 1 (4 experts, 2
// threads) each streams two whole experts. Calls f(Span) per expert touched.
template <class F>
void for_each_span(const int32_t* offsets, int64_t experts, int64_t items, int t, int n, F f) {
  int64_t total = 0;
  for (int64_t e = 0; e < experts; ++e)
    if (offsets[e + 1] > offsets[e]) total += items * item_cost(offsets[e + 1] - offsets[e]);
  const int64_t lo = total * t / n, hi = total * (t + 1) / n;
  // The first item of an expert that starts at or after `bound`.
  auto first_at = [&](int64_t start, int64_t cost, int64_t bound) {
    const int64_t i = bound <= start ? 0 : (bound - start + cost - 1) / cost;
    return i < items ? i : items;
  };
  int64_t start = 0;
  for (int64_t e = 0; e < experts && start < hi; ++e) {
    const int64_t rows = offsets[e + 1] - offsets[e];
    if (rows == 0) continue;
    const int64_t cost = item_cost(rows);
    const int64_t begin = first_at(start, cost, lo), end = first_at(start, cost, hi);
    if (begin < end) f(Span{e, begin, end});
    start += items * cost;
  }
}

// Rows [begin, end) of `count` for thread t of n, in equal shares.
struct Range {
  int64_t begin, end;
};
inline Range share(int64_t count, int t, int n) { return {count * t / n, count * (t + 1) / n}; }

}  // namespace mxmoe::cpu
