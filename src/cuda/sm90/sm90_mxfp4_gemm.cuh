// Grouped MoE GEMM with MXFP4 weights on Hopper's wgmma (sm_90a):
// out[row, n] = sum_k W_e[row, k] act[n, k] for the token rows n of one
// expert's token tile. Weights are the A operand (M = 64 rows per consumer
// warpgroup), dequantised to bf16 in registers from codes in shared memory
// exactly as the portable mma.sync kernel does (the wgmma A fragment of a
// warp's 16 rows is the mma.m16n8k16 A fragment); tokens are N (16 to 192, is_token_tile);
// activations are the B operand, read by wgmma from a 128-byte-swizzled
// shared-memory stage (sm90_layout.h).
//
// Block: 3 warpgroups, blocks_per_sm(N) blocks per SM (one, or two for
// narrow token tiles: RegisterBudget), persistent over the (token tile,
// 128-row tile) items in a fixed order (row tiles fastest: the token tile's
// stages stay in L2 while every row tile reads them; consecutive token tiles
// of one expert re-read its weights from L2). A block takes item blockIdx.x
// first and then claims the next unclaimed one from a counter, so the items
// spread over the blocks as they free up instead of every gridDim.x-th one
// each: an item's time varies with its token columns and, at two blocks per
// SM, with what the other block runs, and a fixed share stacked those
// differences (-4 to -5% at 16- and 48-token tiles; docs/PERF.md, s43).
//   * warpgroup 0, producer (40 or 24 registers): one warp streams a ring of
//     `stages` stages with 1D bulk copies completing on mbarriers: per 128-K
//     chunk the tile's codes (8 KB, its 8 row groups' 1 KB images, contiguous
//     in the kMmaRowTiles128 layout) and the token tile's packed activations
//     (one contiguous copy each), and once per item the tile's 128 x K/32 scale bytes,
//     the epilogue's column metadata and the rows' bias (double-buffered, so
//     the next item's buffer loads during this one).
//   * warpgroups 1 and 2, consumers (232 or 104 registers): 64 weight rows
//     each. Per chunk: wait "full", dequantise 8 k16 steps of A (32
//     registers), issue 8 wgmma m64nNk16 into the same accumulators (up to
//     64-token tiles, N only as wide as the item's columns reach), commit,
//     then wait until at most this chunk's group is in flight and release the
//     previous chunk's stage ("empty"). With one block per SM the A registers
//     alternate between two sets so that the dequantisation of chunk c+1 may
//     overlap the tensor cores on chunk c; with two, one set (the warp loads
//     chunk c+1's codes while chunk c's group runs, which needs two stages:
//     the launcher's minimum), and the other block's warps fill the
//     schedulers. After an item's last chunk the epilogue: GEMM1 applies
//     SwiGLU and writes GEMM2's packed input, the tile's outputs being one
//     half of a GEMM2 stage image (w13 in kInterleavedChunkOrder), staged in
//     shared memory and stored by one bulk copy (Config::staged_output);
//     GEMM2 stores one bf16 row per (token, slot) pair.
// Barriers: full[s] (1 arrival + transaction bytes), empty[s] (every
// consumer thread), item_full[2] / item_empty[2] likewise, and the consumer
// warpgroups' named barrier around the staged output. Results are
// deterministic: the counter decides only which block computes an item, and
// every sum is in a fixed order.
#pragma once

#include <cuda_bf16.h>
#include <cstdint>
#include <type_traits>

#include "cuda/common/pdl.cuh"
#include "cuda/common/smxx_mxfp4_dequant.cuh"
#include "cuda/sm90/sm90_layout.h"
#include "cuda/sm90/sm90_mxfp4_gemm_launch.h"
#include "cuda/sm90/sm90_ptx.cuh"

namespace mxmoe::sm90 {

// Register budgets after setmaxnreg (multiples of 8), per blocks per SM. One
// block: 128 x 40 + 256 x 232 = 64512; two: 128 x 24 + 256 x 104 = 29696. The
// kernel enters with 65536 / (384 x blocks) rounded down to 8 per thread (168
// or 80: launch bounds with that many blocks per SM), and setmaxnreg only
// moves registers between the block's warps: an increase waits until
// decreases free enough of the block's own registers. Budgets beyond what the
// block entered with would hang the kernel.
template <int kBlocks>
struct RegisterBudget {
  static constexpr int kProducer = kBlocks == 1 ? 40 : 24;
  static constexpr int kConsumer = kBlocks == 1 ? 232 : 104;
  static constexpr int kEntry = 65536 / (kThreads * kBlocks) / 8 * 8;
  static_assert(128 * kProducer + kConsumerThreads * kConsumer <= kThreads * kEntry,
                "the warpgroups' register budgets must fit the registers the block enters with");
};

// The consumer warpgroups' named barrier (0 is __syncthreads): GEMM1's staged
// output half is written between two of its phases.
inline constexpr int kOutputBarrier = 1;

namespace detail {

// Chunk c's A fragments of this thread: rows g (lo) and g + 8 (hi) of the
// warp's 16 rows, from its kWords code words per row (4: the lane's 32
// physical elements of a 128-wide chunk, one MX block; 2: its 16 of a 64-wide
// tail) and the two rows' scales.
// a[s] = {a0, a1, a2, a3} of k16 step s < 2 kWords: word s/2, pairs 2(s%2)
// (a0 lo, a1 hi) and 2(s%2)+1 (a2 lo, a3 hi) (a_word, a_pair), which is why
// the activations are stored in the K order of logical_k (sm90_layout.h).
template <bool kTwoStep, int kWords>
__device__ __forceinline__ void dequantise_chunk(const uint4& lo, const uint4& hi, uint32_t s_lo, uint32_t s_hi,
                                                 uint32_t (&a)[8][4]) {
  static_assert(kWords == 4 || kWords == 2, "a 128-wide chunk or a 64-wide tail");
  const uint32_t wl[4] = {lo.x, lo.y, lo.z, lo.w}, wh[4] = {hi.x, hi.y, hi.z, hi.w};
  smxx::ScaleFactor fl, fh;
  if constexpr (kTwoStep) {
    fl = smxx::scale_factor_any(s_lo);
    fh = smxx::scale_factor_any(s_hi);
  } else {
    fl = {smxx::scale_factor_small(s_lo), 0u};
    fh = {smxx::scale_factor_small(s_hi), 0u};
  }
  auto deq = [](uint32_t word, int pair, const smxx::ScaleFactor& f) {
    uint32_t v = smxx::bf16x2_mul(pair_bits::e2m1_pair_bits<pair_bits::ShiftPipe::kAlu>(word, pair), f.f1);
    if constexpr (kTwoStep) v = smxx::bf16x2_mul(v, f.f2);
    return v;
  };
#pragma unroll
  for (int s = 0; s < 2 * kWords; ++s)
#pragma unroll
    for (int reg = 0; reg < 4; ++reg)
      a[s][reg] = a_second_row(reg) ? deq(wh[a_word(s)], a_pair(s, reg), fh) : deq(wl[a_word(s)], a_pair(s, reg), fl);
}

__device__ __forceinline__ float bf16_to_f32(uint16_t v) { return __bfloat162float(__ushort_as_bfloat16(v)); }

// The item's columns up to its last one that holds a pair, rounded up to 8
// (at least 8): the width of its wgmmas where narrows_columns (sm90_layout.h).
// `col_pair`: the item buffer's column metadata (-1: padding).
template <int BN>
__device__ __forceinline__ int item_width(const int32_t* col_pair, int lane) {
  int last = 0;
#pragma unroll
  for (int c0 = 0; c0 < BN; c0 += 32) {
    const uint32_t valid = __ballot_sync(0xffffffffu, c0 + lane < BN && col_pair[c0 + lane] >= 0);
    if (valid != 0) last = c0 + 32 - __clz(valid);
  }
  return max(8, (last + 7) & ~7);
}

// One chunk's kSteps wgmmas over the first kWidth token columns (accumulators
// 0 .. kWidth / 2 - 1, acc_n).
template <int kWidth, int BN, int kSteps>
__device__ __forceinline__ void issue_wgmmas(float (&acc)[BN / 2], const uint32_t (&a)[8][4], uint64_t desc0) {
  static_assert(kWidth % 8 == 0 && kWidth <= BN, "wgmma N: a multiple of 8 up to the token tile");
  float(&d)[kWidth / 2] = *reinterpret_cast<float(*)[kWidth / 2]>(&acc);
#pragma unroll
  for (int k = 0; k < kSteps; ++k)
    ptx::Wgmma<kWidth>::mma(d, a[k][0], a[k][1], a[k][2], a[k][3], desc0 + b_descriptor_step(BN, k));
}
// Calls f(std::integral_constant<int, W>) with the narrowest W (from 8, in
// steps of 8, at most BN) that holds `width`: each width runs its own copy of
// the item's chunk loop, with no branch per chunk.
template <int BN, int kWidth = 8, class F>
__device__ __forceinline__ void with_width(int width, F&& f) {
  if constexpr (kWidth >= BN)
    f(std::integral_constant<int, BN>{});
  else if (width <= kWidth)
    f(std::integral_constant<int, kWidth>{});
  else
    with_width<BN, kWidth + 8>(width, f);
}

// Shared-memory addresses of one block (see SmemLayout).
struct Smem {
  uint32_t base;        // shared address, 1024-aligned
  uint8_t* ptr;         // the same byte, generic pointer (ordinary loads and stores)
  SmemLayout l;
  int stages;
  __device__ uint32_t full(int s) const { return base + l.bars + 8 * s; }
  __device__ uint32_t empty(int s) const { return base + l.bars + 8 * (stages + s); }
  __device__ uint32_t item_full(int b) const { return base + l.bars + 8 * (2 * stages + b); }
  __device__ uint32_t item_empty(int b) const { return base + l.bars + 8 * (2 * stages + 2 + b); }
  __device__ const uint8_t* item(int b) const { return ptr + l.items + b * l.item_stride; }
  __device__ volatile int32_t* item_index(int b) const {
    return reinterpret_cast<volatile int32_t*>(ptr + l.item_index) + b;
  }
  __device__ uint8_t* out() const { return ptr + l.out; }
};

// The items: item = token tile * row tiles + row tile; each item's K is
// full_chunks 128-wide chunks, then `tail` 64-wide ones (0 or 1).
struct Items {
  int count, row_tiles, full_chunks, tail;
};

// Weight rows of row tile rt: 128, or 64 for an expert's last tile when
// n_rows % 128 == 64 (the producer then copies its rows twice).
__device__ __forceinline__ int tile_rows(const GemmParams& p, int rt) { return min(kTileRows, p.n_rows - rt * kTileRows); }

// Producer: one warp; its lane 0 claims the items, posts each phase's
// transaction bytes and issues the phase's copies: per item its index and
// buffer (scales, the epilogue's column metadata, bias), per chunk the tile's
// codes, then the activations. After the last item it posts index -1.
// One copy of codes per chunk where the tile is a tile of the layout: with one
// per row group (nine copies a chunk) the producer was busy issuing most of a
// chunk at 16-token tiles and held them ~25% longer. The layout's 128-row
// tiles run over all experts' rows, so with n_rows % 128 == 64 an odd
// expert's tiles start half-way into one: their codes are two copies of four
// groups each (the second half of layout tile L, the first of L + 1). An
// expert's last tile then holds 64 rows, copied twice so that both consumer
// warpgroups read defined codes, scales and bias.
template <int BN>
__device__ __forceinline__ void produce(const GemmParams& p, const Smem& sm, const Items& it, int lane) {
  const int64_t code_row = p.k / 2, scale_row = p.k / 32;
  const int chunks = it.full_chunks + it.tail;
  int s = 0;
  uint32_t phase = 0;
  // Codes read once a forward (stream_codes) are the first lines L2 drops, so
  // the activations every row tile reads again stay there. Otherwise the
  // normal policy: every code copy is then the same instruction.
  const uint64_t code_policy = p.stream_codes ? ptx::l2_evict_first_policy() : ptx::l2_evict_normal_policy();
  // The claim of the item after this one is issued as this one starts (lane
  // 0), so its atomic's round trip overlaps the item's copies.
  auto claim = [&]() { return lane == 0 ? int(gridDim.x) + atomicAdd(p.item_counter, 1) : 0; };
  auto advance = [&]() {
    if (++s == sm.stages) {
      s = 0;
      phase ^= 1;
    }
  };
  // The first item's buffer and the codes of its first `stages` chunks are
  // requested before the wait for the earlier kernels: they are weights and
  // the grouping kernel's schedule, complete before this grid could start
  // (every kernel lets the next one start only after its own wait). Only the
  // activations (the pack kernel's, or GEMM1's) and the item counter (zeroed
  // by the pack kernel) wait. So a GEMM1 block's first DRAM round trip runs
  // during the pack kernel, and a GEMM2 block's during GEMM1's last items.
  bool waited = false;
  int item = blockIdx.x;
  for (int seq = 0;; ++seq) {
    const int b = seq & 1;
    ptx::mbar_wait(sm.item_empty(b), ((seq >> 1) & 1) ^ 1);
    item = __shfl_sync(0xffffffffu, item, 0);
    if (item >= it.count) {
      if (lane == 0) {
        *sm.item_index(b) = -1;
        ptx::mbar_arrive(sm.item_full(b));  // release: the consumers read -1 after their wait
      }
      break;
    }
    int next = waited ? claim() : 0;
    const int tt = item / it.row_tiles, rt = item - tt * it.row_tiles;
    const int64_t row0 = int64_t(p.tile_expert[tt]) * p.n_rows + int64_t(rt) * kTileRows;
    const int rows = tile_rows(p, rt);
    if (lane == 0) {
      *sm.item_index(b) = item;  // before the arrival that releases it with the buffer
      // A 64-row tile's scale and bias rows twice (the consumers' view of it).
      const uint32_t buf = sm.base + sm.l.items + b * sm.l.item_stride;
      const uint32_t scale_bytes = uint32_t(rows * scale_row);
      ptx::mbar_arrive_expect_tx(sm.item_full(b), uint32_t(item_scale_bytes(p.k)) + 4 * BN + 2 * kTileRows);
      for (int r = 0; r < kTileRows; r += rows) {
        ptx::bulk_load(buf + r * scale_row, p.scales + row0 * scale_row, scale_bytes, sm.item_full(b));
        ptx::bulk_load(buf + sm.l.item_bias + 2 * r, p.bias + row0, 2 * rows, sm.item_full(b));
      }
      ptx::bulk_load(buf + sm.l.item_cols, p.col_pair + int64_t(tt) * BN, 4 * BN, sm.item_full(b));
    }
    // Layout tile of the item's first row, and the group it starts at (0 or 4).
    const int first_group = int(row0 % kTileRows) / kGroupRows;
    const uint8_t* layout_tile = p.codes + (row0 - row0 % kTileRows) * code_row;
    const uint8_t* act = p.act_in + int64_t(tt) * packed_tile_bytes(BN, p.k);
    const bool one_copy = first_group == 0 && rows == kTileRows;
    auto load_act = [&](int c, int stage, uint32_t bytes) {
      ptx::bulk_load(sm.base + sm.l.act + stage * stage_bytes(BN), act + int64_t(c) * stage_bytes(BN), bytes,
                     sm.full(stage));
    };
    // Chunk c (width W: kChunk, or kTailChunk for the last when K % 128 ==
    // 64) into stage s: its codes, and its activations `with_act`. The
    // thread that posts the phase's transaction bytes issues its copies too:
    // the stage's writes then follow its own acquire of "empty". The width is
    // a constant, so a full chunk's sizes and steps are immediates.
    auto chunk = [&](int c, auto width, bool with_act) {
      constexpr int kWidth = decltype(width)::value;
      constexpr uint32_t kGroupBytes = group_chunk_bytes(kWidth), kActBytes = BN * kWidth * 2;
      ptx::mbar_wait(sm.empty(s), phase ^ 1);
      if (lane == 0) {
        const uint32_t dst = sm.base + sm.l.codes + s * kCodeStageBytes;
        const uint8_t* src = layout_tile + int64_t(c) * kCodeStageBytes + first_group * kGroupBytes;
        ptx::mbar_arrive_expect_tx(sm.full(s), code_chunk_bytes(kWidth) + kActBytes);
        if (one_copy) {
          ptx::bulk_load(dst, src, code_chunk_bytes(kWidth), sm.full(s), code_policy);
        } else {
          // Four groups, then the next four: groups 0-3 of the next layout
          // tile, or for a 64-row tile the same four again.
          const uint8_t* second = rows < kTileRows ? src : src - 4 * kGroupBytes + kTileRows * code_row;
          ptx::bulk_load(dst, src, 4 * kGroupBytes, sm.full(s), code_policy);
          ptx::bulk_load(dst + 4 * kGroupBytes, second, 4 * kGroupBytes, sm.full(s), code_policy);
        }
        if (with_act) load_act(c, s, kActBytes);
      }
      advance();
    };
    constexpr std::integral_constant<int, kChunk> kFull{};
    constexpr std::integral_constant<int, kTailChunk> kTail{};
    int c = 0;
    if (!waited) {
      // The first item: its first chunks' codes (stages 0 ..), then the wait.
      const int early = min(chunks, sm.stages);
      for (; c < early; ++c) {
        if (c < it.full_chunks) chunk(c, kFull, false);
        else chunk(c, kTail, false);
      }
      smxx::wait_for_previous_kernels();
      smxx::allow_next_kernel();
      waited = true;
      if (lane == 0)
        for (int e = 0; e < early; ++e) load_act(e, e, BN * (e < it.full_chunks ? kChunk : kTailChunk) * 2);
      next = claim();
    }
    for (; c < it.full_chunks; ++c) chunk(c, kFull, true);
    if (c < chunks) chunk(c, kTail, true);
    item = next;
  }
}

// Epilogue of one item for the thread (g, t) of warp w of consumer
// warpgroup q: accumulator i = 4j + 2h + c is weight row tile_row(q, w, g + 8h)
// (rows 2g and 2g + 1 of the warp's group: gate_j and up_j for GEMM1, hidden
// rows h0 and h0 + 1 for GEMM2) and token column acc_n(t, i). Column
// metadata and bias come from the item's shared-memory buffer.
template <int BN, bool kSwiglu>
__device__ __forceinline__ void finish_item(const GemmParams& p, const float (&acc)[BN / 2], const Smem& sm, int b,
                                            int tt, int rt, int q, int w, int g, int t, bool issuer) {
  const uint8_t* item = sm.item(b);
  const int local = tile_row(q, w, g);  // even; local + 1 is its pair
  const int row = rt * kTileRows + local;
  const uint16_t* bias = reinterpret_cast<const uint16_t*>(item + sm.l.item_bias);
  const float b_lo = bf16_to_f32(bias[local]), b_hi = bf16_to_f32(bias[local + 1]);
  const int32_t* col_pair = reinterpret_cast<const int32_t*>(item + sm.l.item_cols);  // -1: padding
  if constexpr (kSwiglu) {
    // The thread's row pair is operand k' = local / 2 of the tile's output
    // half (output_half_offset): token row n at stage_offset(BN, n, k').
    // Accumulator column n = 8 jj + 2t + c (acc_n): the thread's outputs of one
    // c are 8 rows apart for consecutive jj, so their offsets are one base per
    // c plus a constant step (the swizzle XORs with n % 8 = 2t + c: eight rows
    // on is 1024 bytes on), not a full offset per output.
    const int at[2] = {stage_offset(BN, 2 * t, local / 2), stage_offset(BN, 2 * t + 1, local / 2)};
    const float limit = p.limit, neg_alpha_log2e = -p.alpha * 1.4426950408889634f;
    // Branch-free: every column is computed and padding columns (pair -1)
    // select 0, so the compiler can interleave a thread's outputs; per-output
    // branches made each one a serial chain while the tensor core idled.
    auto write_outputs = [&](uint8_t* half) {
#pragma unroll
      for (int i = 0; i < BN / 2; i += 4)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          // GPT-OSS SwiGLU; a NaN input stays NaN, as in the reference. The
          // fast exponential and division: the result is rounded to bf16.
          const float hg = acc[i + c] + b_lo, hu = acc[i + 2 + c] + b_hi;
          const float gg = ptx::min_nan(hg, limit);
          const float uu = ptx::max_nan(ptx::min_nan(hu, limit), -limit);
          const float glu = __fdividef(gg, 1.f + ptx::ex2_ftz(gg * neg_alpha_log2e)) * (uu + 1.f);
          const float a = col_pair[acc_n(t, i + c)] >= 0 ? glu : 0.f;
          *reinterpret_cast<uint16_t*>(half + at[c] + (i / 4) * 1024) = __bfloat16_as_ushort(__float2bfloat16_rn(a));
        }
    };
    uint8_t* const dst = p.act_out + output_half_offset(BN, p.n_rows / 2, tt, rt);
    if (!p.staged_output) {
      write_outputs(dst);  // 2-byte global stores, scattered over 4 token rows a warp
      return;
    }
    // Staged: the half in shared memory, then one bulk copy by `issuer`.
    // Its previous copy must have read the buffer before anyone writes it.
    if (issuer) ptx::bulk_wait_read<0>();
    ptx::named_barrier_sync(kOutputBarrier, kConsumerThreads);
    write_outputs(sm.out());
    ptx::fence_proxy_async_shared();  // the writes, before the bulk copy reads them
    ptx::named_barrier_sync(kOutputBarrier, kConsumerThreads);
    if (issuer) {
      ptx::bulk_store(dst, sm.base + sm.l.out, output_half_bytes(BN));
      ptx::bulk_commit();
    }
  } else {
    if (row >= p.n_valid) return;  // padded hidden rows (n_valid is a multiple of 32, row is even)
    // One bf16 row of n_valid per (token, slot) pair, at its pair index, so
    // padding columns store nothing and the combine kernel reads each token's
    // k rows contiguously. The routing weight is applied there.
    uint16_t* const out = p.y_out + row;
#pragma unroll
    for (int i = 0; i < BN / 2; i += 4)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int pair = col_pair[acc_n(t, i + c)];
        const __nv_bfloat162 o = __floats2bfloat162_rn(acc[i + c] + b_lo, acc[i + 2 + c] + b_hi);
        if (pair >= 0) *reinterpret_cast<__nv_bfloat162*>(out + int64_t(pair) * p.n_valid) = o;
      }
  }
}

// Consumer warpgroup q (0 or 1): rows [64q, 64q + 64) of each item's tile.
// With one block per SM, two sets of A registers: chunk c + 1 is dequantised
// while chunk c's group may still run. With two blocks per SM (104 registers)
// one set: the thread waits for its chunk's group before the next (loading
// the next chunk's codes and scales meanwhile), and the other block's warps
// fill the scheduler. In a 64-row tile the second warpgroup computes the
// first one's rows again (the producer repeats them) and its epilogue stores
// nothing: they lie past n_valid. Letting it skip the chunks instead put a
// branch on the warpgroup index around the loop, and ptxas then moved the
// stage index and the wgmma descriptors off the uniform datapath (R2UR per
// wgmma, 13% more instructions a chunk; 12-16% slower at 16- to 64-token
// tiles, same-call A/B).
template <int BN, bool kSwiglu, bool kTwoStep>
__device__ __forceinline__ void consume(const GemmParams& p, const Smem& sm, const Items& it, int q, int w,
                                        int lane) {
  constexpr bool kTwoSets = blocks_per_sm(BN) == 1;
  constexpr int kAcc = BN / 2;
  static_assert(kAcc * 128 == 64 * BN, "an m64nN f32 accumulator is N/2 registers per thread");
  const int g = lane >> 2, t = lane & 3, group = 4 * q + w;
  const bool output_issuer = q == 0 && w == 0 && lane == 0;  // GEMM1's staged output copies
  const int64_t scale_row = p.k / 32;
  float acc[kAcc];
  uint32_t a0[8][4], a1[8][4];
  int s = 0;
  uint32_t phase = 0;
  int seq = 0;
  // Stage 0's: this thread's code words, the activations' step-0 descriptor.
  const uint32_t full_codes = ptx::keep(sm.base + sm.l.codes + group * kGroupChunkBytes + lane * 16);
  const uint64_t act_desc = ptx::keep(b_descriptor(sm.base + sm.l.act, BN, 0));
  auto advance = [&]() {
    if (++s == sm.stages) {
      s = 0;
      phase ^= 1;
    }
  };
  for (;; ++seq) {
    const int b = seq & 1;
    ptx::mbar_wait(sm.item_full(b), (seq >> 1) & 1);
    const int item = *sm.item_index(b);
    if (item < 0) break;  // the producer claimed no further item
    const int tt = item / it.row_tiles, rt = item - tt * it.row_tiles;
    const int width = narrows_columns(BN)
                          ? item_width<BN>(reinterpret_cast<const int32_t*>(sm.item(b) + sm.l.item_cols), lane)
                          : BN;
    // The group's scales in the fragment scale order (swizzle_scales): its
    // 32-row block, subtile (group % 2) of it; rows 2g (lo) and 2g + 1 (hi)
    // are adjacent bytes. The lane's MX block of chunk c is 4c + t (at
    // 128c + 16g + 4t), of the tail 4c + t / 2 (at 128c + 8g + 4 (t / 2)).
    const uint8_t* scales = sm.item(b) + (group >> 1) * 32 * scale_row + 2 * (group & 1);
    // This thread's two scale bytes (rows lo, hi) of full chunk c: full_scales + 128c.
    const uint32_t full_scales = ptx::keep(ptx::smem_addr(scales) + 16 * g + 4 * t);
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[i] = 0.f;
    int prev = -1;  // stage of the previous chunk, released once its wgmmas completed
    // The code words and scale bytes of chunk c, loaded once its stage is full
    // (the tail's two words a row in lo.x/y, hi.x/y). `tail` is a
    // std::bool_constant: the full chunks' loop has no tail branches. A full
    // chunk's addresses are one step from kept 32-bit shared addresses.
    uint4 lo, hi;
    uint32_t s_lo, s_hi;
    auto load = [&](int c, auto tail) {
      ptx::mbar_wait(sm.full(s), phase);
      if constexpr (!decltype(tail)::value) {
        const uint32_t codes = full_codes + s * kCodeStageBytes;
        lo = ptx::lds128(codes);
        hi = ptx::lds128(codes + kGroupChunkBytes / 2);
        s_lo = ptx::lds_u8(full_scales + 128 * c);
        s_hi = ptx::lds_u8(full_scales + 128 * c + 1);
      } else {
        constexpr int kBytes = group_chunk_bytes(kTailChunk);
        const uint8_t* codes = sm.ptr + sm.l.codes + s * kCodeStageBytes + group * kBytes + lane * 8;
        const uint2 l2 = *reinterpret_cast<const uint2*>(codes);
        const uint2 h2 = *reinterpret_cast<const uint2*>(codes + kBytes / 2);
        lo = make_uint4(l2.x, l2.y, 0u, 0u);
        hi = make_uint4(h2.x, h2.y, 0u, 0u);
        const int scale_at = 128 * c + 8 * g + 4 * (t / 2);
        s_lo = scales[scale_at];
        s_hi = scales[scale_at + 1];
      }
    };
    // Dequantise and issue the loaded chunk from A set a: 8 k16 steps, or 4
    // for the tail.
    auto compute = [&](uint32_t(&a)[8][4], auto tail, auto cols) {
      constexpr int kSteps = decltype(tail)::value ? 4 : 8;
      dequantise_chunk<kTwoStep, kSteps / 2>(lo, hi, s_lo, s_hi, a);
      const uint64_t desc0 = act_desc + uint32_t(s) * uint32_t(stage_bytes(BN) >> 4);
#pragma unroll
      for (int i = 0; i < kAcc; ++i) ptx::fence_operand(acc[i]);
      ptx::wgmma_fence();
      issue_wgmmas<decltype(cols)::value, BN, kSteps>(acc, a, desc0);
      ptx::wgmma_commit();
#pragma unroll
      for (int i = 0; i < kAcc; ++i) ptx::fence_operand(acc[i]);
    };
    constexpr std::false_type kFull{};
    constexpr std::true_type kTail{};
    if constexpr (kTwoSets) {
      // Every consumer thread arrives: an arrival releases only its own
      // thread's reads of the stage to the producer's next bulk copy.
      auto step = [&](int c, uint32_t(&a)[8][4], auto tail) {
        load(c, tail);
        compute(a, tail, std::integral_constant<int, BN>{});
        ptx::wgmma_wait<1>();  // the previous chunk's group is done: its stage may be refilled
        if (prev >= 0) ptx::mbar_arrive(sm.empty(prev));
        prev = s;
        advance();
      };
      int c = 0;
      for (; c + 1 < it.full_chunks; c += 2) {
        step(c, a0, kFull);
        step(c + 1, a1, kFull);
      }
      if (c < it.full_chunks) step(c, a0, kFull);
      if (it.tail) {
        ptx::wgmma_wait<0>();  // the last full chunk's A set is free
        step(it.full_chunks, a0, kTail);
      }
      ptx::wgmma_wait<0>();
#pragma unroll
      for (int i = 0; i < kAcc; ++i) ptx::fence_operand(acc[i]);
      ptx::mbar_arrive(sm.empty(prev));
    } else {
      // One A set: the warp waits for its chunk's group before the next
      // dequantisation, and loads the next chunk's codes and scales while
      // that group runs.
      auto retire = [&](int done) {
        ptx::wgmma_wait<0>();  // this chunk's group is done: its A registers and stage are free
#pragma unroll
        for (int i = 0; i < kAcc; ++i) ptx::fence_operand(acc[i]);
        ptx::mbar_arrive(sm.empty(done));
      };
      auto chunks = [&](auto cols) {
        if (it.full_chunks > 0) {
          load(0, kFull);
          for (int c = 0; c + 1 < it.full_chunks; ++c) {
            compute(a0, kFull, cols);
            const int done = s;
            advance();
            load(c + 1, kFull);
            retire(done);
          }
          compute(a0, kFull, cols);
          const int done = s;
          advance();
          retire(done);
        }
        // The tail after the loop, its load not overlapped with the last full
        // chunk's group: the main loop keeps one load form and no tail branch
        // (at the 80 registers ptxas compiles these instances to).
        if (it.tail) {
          load(it.full_chunks, kTail);
          compute(a0, kTail, cols);
          const int done = s;
          advance();
          retire(done);
        }
      };
      with_width<BN>(width, chunks);
    }
    finish_item<BN, kSwiglu>(p, acc, sm, b, tt, rt, q, w, g, t, output_issuer);
    ptx::mbar_arrive(sm.item_empty(b));
  }
  // The last output copy must be done before the block exits: its
  // shared-memory source goes, and GEMM2 reads what it writes.
  if constexpr (kSwiglu)
    if (p.staged_output && output_issuer) ptx::bulk_wait<0>();
}

}  // namespace detail

template <int BN, bool kSwiglu>
__global__ void __launch_bounds__(kThreads, blocks_per_sm(BN))
    sm90_mxfp4_moe_gemm(const __grid_constant__ GemmParams p) {
  using Budget = RegisterBudget<blocks_per_sm(BN)>;
  static_assert(is_token_tile(BN), "token tile (wgmma N): one of is_token_tile's");
  static_assert(kThreads == 384, "one producer and two consumer warpgroups");
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  // The 128-byte swizzle is a function of address bits 4-9: each stage must
  // start on a 1024-byte boundary, whatever alignment the allocation has.
  const uint32_t raw = ptx::smem_addr(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  const detail::Smem sm{base, smem_raw + (base - raw), smem_layout(BN, p.k, p.stages, p.staged_output), p.stages};
  if (threadIdx.x == 0) {
    for (int s = 0; s < p.stages; ++s) {
      ptx::mbar_init(sm.full(s), 1);
      ptx::mbar_init(sm.empty(s), kConsumerThreads);
    }
    for (int b = 0; b < 2; ++b) {
      ptx::mbar_init(sm.item_full(b), 1);
      ptx::mbar_init(sm.item_empty(b), kConsumerThreads);
    }
    ptx::fence_barrier_init();
  }
  __syncthreads();
  // The schedule (num_tiles) is read before any wait: produce says why.
  const int row_tiles = (p.n_rows + kTileRows - 1) / kTileRows;
  const detail::Items items{*p.num_tiles * row_tiles, row_tiles, p.k / kChunk, (p.k % kChunk) / kTailChunk};
  const int warpgroup = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  if (warpgroup == 0) {
    ptx::setmaxnreg_dec<Budget::kProducer>();
    if (warp == 0) detail::produce<BN>(p, sm, items, lane);
  } else {
    ptx::setmaxnreg_inc<Budget::kConsumer>();
    // The outputs overwrite what earlier kernels may still read.
    smxx::wait_for_previous_kernels();
    smxx::allow_next_kernel();
    if (p.large_scales)
      detail::consume<BN, kSwiglu, true>(p, sm, items, warpgroup - 1, warp, lane);
    else
      detail::consume<BN, kSwiglu, false>(p, sm, items, warpgroup - 1, warp, lane);
  }
}

}  // namespace mxmoe::sm90
