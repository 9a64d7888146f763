// A block's sums for one row without VNNI: vpmaddubsw (pairs of u8 x s8
// products to int16) and vpmaddwd (pairs of int16 to int32), written once
// for the avx512 path's 512-bit and the avx2 path's 256-bit vectors. `W`
// gives the vector's operations: maddubs, madd, add16, add32, set1_16,
// set1_32 and broadcast4 (the 4 activation bytes of k = 4j .. 4j + 3 in
// every lane). Included only by those two files (internal linkage: see
// cpu_kernels_impl.h).
#pragma once

#include <cstdint>

namespace mxmoe::cpu {
namespace {

// sum_k t_k q_k + corr over one 32-wide block, w[j] the codes t of k = 4j ..
// 4j + 3. Four vpmaddubsw results add up in int16 without overflow: a lane
// is t q + t' q' with t in [0, 24] and q in [-128, 127], at most 6144 in
// magnitude, and four of them 24576 < 32767. vpmaddwd then widens each
// half-block sum, times 256 for the hi plane and 1 for the lo plane.
template <class W, class V>
V maddubs_block_sum(const V* w, const int8_t* hi, const int8_t* lo, int32_t corr) {
  V acc = W::set1_32(corr);
#pragma GCC unroll 2
  for (const int8_t* plane : {hi, lo}) {
    const V weight = W::set1_16(plane == hi ? 256 : 1);
#pragma GCC unroll 2
    for (int j0 = 0; j0 < 8; j0 += 4) {
      V s = W::maddubs(w[j0], W::broadcast4(plane, j0));
#pragma GCC unroll 3
      for (int j = j0 + 1; j < j0 + 4; ++j) s = W::add16(s, W::maddubs(w[j], W::broadcast4(plane, j)));
      acc = W::add32(acc, W::madd(s, weight));
    }
  }
  return acc;
}

}  // namespace
}  // namespace mxmoe::cpu
