// Byte layouts the sm90 wgmma kernels and the host tests share: the K order
// of the activation operand, its shared-memory image (the 128-byte swizzle
// wgmma reads), the packed activation tensors in global memory (one pipeline
// stage = one contiguous bulk copy), the wgmma shared-memory descriptor, the
// accumulator fragment, and the shared-memory carve-up. Plain C++, compiled
// for the host (tests, heuristics) and the device (kernels).
//
// Why the activations are packed instead of copied row by row: a 1D bulk copy
// writes contiguous bytes, but wgmma reads a K-major operand either as 8-row
// core matrices interleaved every 16 bytes (no swizzle) or with each row's
// 16-byte pieces permuted by its row index (swizzled). Neither is a token row
// copied as is, so the kernels that produce activations (the pack kernel for x,
// GEMM1's epilogue for the SwiGLU output) write them in the exact byte image of
// a shared-memory stage, and each stage is one bulk copy. The 128-byte swizzle
// is the one chosen: its 8 rows x 128 bytes atoms are read without bank
// conflicts, and 8 lanes storing one row's 8 pieces hit 8 different banks.
#pragma once

#include <cstdint>

#include "mxmoe/moe.h"

#if defined(__CUDACC__)
#define MXMOE_SM90_HD __host__ __device__
#else
#define MXMOE_SM90_HD
#endif

namespace mxmoe::sm90 {

inline constexpr int kChunk = 128;                // K elements per pipeline stage
inline constexpr int kTileRows = 128;             // weight rows of a block tile
inline constexpr int kConsumerWarpgroups = 2;     // each owns 64 rows (one wgmma m64)
inline constexpr int kConsumerThreads = 128 * kConsumerWarpgroups;
inline constexpr int kThreads = kConsumerThreads + 128;  // + one producer warpgroup
// Token tiles (the wgmma N) the GEMM is built for: N from 16 to 256 in steps
// of 8 is legal, and each tile is one instance of the kernel. Host constexpr
// (the kernel uses it only in a static_assert).
inline constexpr int kTokenTiles[] = {16, 32, 48, 64, 96, 128, 144, 160, 192};
constexpr bool is_token_tile(int bn) {
  for (int t : kTokenTiles)
    if (t == bn) return true;
  return false;
}
// Blocks per SM of a token tile's kernel. Each consumer warp's chunk is
// serial: it dequantises, then is held at the wgmma issue while its MMAs run
// (A comes from its registers). Narrow tiles leave the tensor core idle for
// most of that chain, so two blocks share an SM there: four consumer warps per
// scheduler instead of two, each with one set of A registers (104 registers a
// consumer thread) and half the shared memory. Two blocks against one, same
// H200 call, us: 16-token tiles 20b T = 64 149.6 / 159.6, 120b T = 256 513.9 /
// 548.0; 32: 20b T = 128 171.2 / 178.1; 48: 20b T = 256 202.4 / 217.4, 120b
// T = 1024 736.5 / 820.8; 64: 20b T = 384 232.9 / 250.3, T = 448 268.1 / 276.9.
inline constexpr int kTwoBlockMaxTile = 64;
MXMOE_SM90_HD constexpr int blocks_per_sm(int bn) { return bn <= kTwoBlockMaxTile ? 2 : 1; }
// Token tiles whose items issue their wgmmas only as wide as the item's token
// columns reach (m64nWk16, W a multiple of 8): the two-block ones. An
// expert's rows fill its tiles from column 0, so its last tile is
// part-filled: at 32 rows per expert on 48-token tiles that is most tiles,
// and their MMA columns past the last pair, rounded up to 8, are not
// computed. Each width has its own copy of the chunk loop: a branch on the
// width before each chunk's wgmmas (~10 instructions in a ~160-instruction
// chunk bound by issue) made the same narrowing 2-4% slower (H200,
// docs/PERF.md, s37). The one-block tiles keep their full width: with more
// than one two-set loop in those kernels ptxas serialises their wgmmas
// (s37b), and a one-set loop at 32 columns for their overflow items beside
// it, which ptxas keeps asynchronous up to 160 tokens, was 1-3% slower (s37c).
MXMOE_SM90_HD constexpr bool narrows_columns(int bn) { return bn <= kTwoBlockMaxTile; }
// Dynamic shared memory of one block: its share of the SM's 228 KB less the
// 1 KB the hardware reserves per block (227 KB alone on an SM, after opting in).
inline constexpr int kSmSharedBytes = 233472;
inline constexpr int kBlockReservedSmem = 1024;
MXMOE_SM90_HD constexpr int max_dynamic_smem(int bn) {
  return kSmSharedBytes / blocks_per_sm(bn) - kBlockReservedSmem;
}
inline constexpr int kGroupRows = 16;             // rows of one warp (WeightSwizzle::kMmaRowGroups16 group)
inline constexpr int kGroupChunkBytes = 1024;     // codes of one group's 128-K chunk, contiguous
// Codes of a 128-row tile's chunk: 8 groups' 1 KB, contiguous (kMmaRowTiles128).
inline constexpr int kCodeStageBytes = kTileRows / kGroupRows * kGroupChunkBytes;
static_assert(kTileRows == 64 * kConsumerWarpgroups, "a consumer warpgroup's wgmma covers 64 rows (m64)");
static_assert(kCodeStageBytes == kTileRows * kChunk / 2, "two E2M1 codes per byte");

// ---- K chunks ----------------------------------------------------------------
// K (padded to a multiple of 64) is walked in 128-wide chunks, the last one 64
// wide when K % 128 == 64 (the tail): H = 2880 is 22 chunks and a tail, not
// 23 chunks of which the last is half padding. A tail chunk is a 128-wide
// chunk cut in half everywhere: a lane owns 16 physical elements instead of
// 32 (two code words, half an MX block), a group's codes are 512 bytes
// ([row of the pair][lane][8 bytes]), the tile's 4 KB, and the activations
// one 64-wide half of a stage image (4 k16 steps).
inline constexpr int kTailChunk = 64;
MXMOE_SM90_HD constexpr int chunk_count(int64_t k_padded) { return int((k_padded + kChunk - 1) / kChunk); }
MXMOE_SM90_HD constexpr int chunk_width(int64_t k_padded, int c) {
  return k_padded - int64_t(c) * kChunk < kChunk ? kTailChunk : kChunk;
}
// Code bytes of one row group's / one 128-row tile's chunk of `width`.
MXMOE_SM90_HD constexpr int group_chunk_bytes(int width) { return kGroupRows * width / 2; }
MXMOE_SM90_HD constexpr int code_chunk_bytes(int width) { return kTileRows * width / 2; }
static_assert(group_chunk_bytes(kChunk) == kGroupChunkBytes && code_chunk_bytes(kChunk) == kCodeStageBytes,
              "a full chunk's code image");

// ---- K order of the activation operand ---------------------------------------
// The weights are the wgmma A operand, from registers. Thread (g, t) of a warp
// (lane 4g + t) holds, for the k16 step s of a chunk, rows g and g + 8 of the
// warp's 16 rows and the operand k {16s + 2t, 16s + 2t + 1} (a0 / a1) and
// {16s + 2t + 8, 16s + 2t + 9} (a2 / a3). The code layout (kMmaRowGroups16)
// gives lane t the physical elements [32t, 32t + 32) of a 128-wide chunk as
// four words ([16t, 16t + 16) of a 64-wide tail, as two), word w's pair i
// being the elements (8w + 2i, 8w + 2i + 1) (src/prepare/pair_bits.h). Step s
// takes word s / 2: pair 2 (s % 2) for a0 / a1, pair 2 (s % 2) + 1 for
// a2 / a3. So operand k = 16s + 2t + 8p + b (p: a2/a3, b: the high half of
// the pair) is the physical element (width / 4) t + 8 (s / 2) + 4 (s % 2) +
// 2p + b, and the activations are stored in that order: a dot product is
// unchanged when both operands' K is permuted alike.
// (mxmoe/moe.h holds the formula as chunk_order_column: w13's
// kInterleavedChunkOrder stores GEMM1's row pairs in this order.)
MXMOE_SM90_HD constexpr int physical_k(int k, int width = kChunk) { return int(chunk_order_column(k, width)); }
// The code word and pair (pair_bits::e2m1_pair_bits) that feed register `reg`
// (0..3: a0..a3) of k16 step s; a1 and a3 come from the second row (g + 8).
MXMOE_SM90_HD constexpr int a_word(int s) { return s >> 1; }
MXMOE_SM90_HD constexpr int a_pair(int s, int reg) { return 2 * (s & 1) + (reg >> 1); }
MXMOE_SM90_HD constexpr bool a_second_row(int reg) { return (reg & 1) != 0; }
// The inverse of physical_k: operand k of physical element e = (width / 4) t + 8w + i.
MXMOE_SM90_HD constexpr int logical_k(int e, int width = kChunk) { return int(chunk_order_position(e, width)); }

// ---- Shared-memory image of one stage of activations ---------------------------
// `bn` tokens x 128 operand k, bf16, K-major with the 128-byte swizzle: two
// 64-wide halves, each bn rows x 128 bytes; in every 8-row block (1024 bytes,
// 1024-aligned) the 16-byte piece j of row n sits at piece j ^ (n % 8).
MXMOE_SM90_HD constexpr int stage_bytes(int bn) { return bn * kChunk * 2; }
MXMOE_SM90_HD constexpr int stage_offset(int bn, int n, int k) {
  return (k >> 6) * bn * 128 + n * 128 + ((((k >> 3) & 7) ^ (n & 7)) << 4) + ((k & 7) << 1);
}

// ---- Packed activations in global memory --------------------------------------
// [token tile][chunk][stage image]: physical element e of token row n of tile
// `tile`, rows of `k_padded` elements. Stage (tile, chunk) is one contiguous
// copy of stage_bytes(bn), or of its first half for a tail chunk, so a token
// tile's stages take bn * k_padded * 2 bytes.
MXMOE_SM90_HD constexpr int64_t packed_tile_bytes(int bn, int64_t k_padded) { return int64_t(bn) * k_padded * 2; }
MXMOE_SM90_HD constexpr int64_t packed_offset(int bn, int64_t k_padded, int64_t tile, int n, int64_t e) {
  const int c = int(e / kChunk);
  return tile * packed_tile_bytes(bn, k_padded) + int64_t(c) * stage_bytes(bn) +
         stage_offset(bn, n, logical_k(int(e % kChunk), chunk_width(k_padded, c)));
}

// GEMM1's outputs: with w13 in W13Layout::kInterleavedChunkOrder, row pair q
// of GEMM1 is operand k = q % 128 of GEMM2's chunk q / 128, so the 64 row
// pairs of a 128-row tile rt are half rt % 2 of that chunk's stage image:
// `bn` rows of 128 bytes, contiguous in the packed tensor (a 64-wide tail
// chunk is half 0 alone), where pair k' of the tile and token row n lie at
// stage_offset(bn, n, k').
MXMOE_SM90_HD constexpr int output_half_bytes(int bn) { return bn * 128; }
MXMOE_SM90_HD constexpr int64_t output_half_offset(int bn, int64_t k_padded, int64_t tile, int rt) {
  return tile * packed_tile_bytes(bn, k_padded) + int64_t(rt / 2) * stage_bytes(bn) + (rt % 2) * output_half_bytes(bn);
}

// The pack kernel's gather: operand k [32w, 32w + 32) of a row come from the
// physical 8-element pieces (t, w), t = 0..3 (elements (width / 4) t + 8w + i),
// and the 16-byte operand piece p = 4w + j of a chunk holds, as its word t,
// the pair (x_2j, x_2j+1) of piece (t, w): the x word of physical elements
// piece_word_element(p, t, width) and the next (even element in the low half).
MXMOE_SM90_HD constexpr int piece_word_element(int p, int t, int width = kChunk) {
  return (width / 4) * t + 8 * (p >> 2) + 2 * (p & 3);
}

// ---- wgmma shared-memory descriptor of the activation operand -------------------
// For the k16 step s (0..7) of the stage at shared address `stage`
// (1024-aligned): start address (bits 0-13, in 16-byte units) at half s / 4
// and byte (s % 4) * 32 of the row, leading byte offset 1 (not used by a
// swizzled K-major operand), stride byte offset 1024 >> 4 (the next 8 rows),
// base offset 0 (the atoms are 1024-aligned, and the start offset stays
// inside the first 128 bytes), swizzle mode 1 (128 bytes) in bits 62-63.
// The high word is the same for every stage and step, and the step only adds
// to the start address: shared addresses are below 256 KB, so (address >> 4)
// fits the 14-bit field and the addition never carries out of it. The kernel
// builds a stage's step-0 descriptor once per chunk and adds b_descriptor_step
// to the whole 64-bit value per step: one uniform 64-bit add per wgmma (with
// the low word alone, ptxas reloaded the constant high word before each one).
inline constexpr uint32_t kBDescriptorHi = (1024u >> 4) | (1u << 30);
MXMOE_SM90_HD constexpr uint32_t b_descriptor_lo(uint32_t stage) { return ((stage >> 4) & 0x3FFFu) | (1u << 16); }
MXMOE_SM90_HD constexpr uint32_t b_descriptor_step(int bn, int s) {
  return uint32_t(((s >> 2) * bn * 128 + (s & 3) * 32) >> 4);
}
MXMOE_SM90_HD constexpr uint64_t b_descriptor(uint32_t stage, int bn, int s) {
  return (uint64_t(kBDescriptorHi) << 32) | (b_descriptor_lo(stage) + b_descriptor_step(bn, s));
}

// ---- Accumulators (wgmma m64nNk16, f32) -------------------------------------------
// Register i (0 .. bn/2 - 1) of thread (g, t) of warp w of a warpgroup holds
// D[16w + acc_m(g, i)][acc_n(t, i)]: i = 4j + 2h + c is row g + 8h, column
// 8j + 2t + c.
MXMOE_SM90_HD constexpr int acc_m(int g, int i) { return g + 8 * ((i >> 1) & 1); }
MXMOE_SM90_HD constexpr int acc_n(int t, int i) { return 8 * (i >> 2) + 2 * t + (i & 1); }
// Weight row (within the 128-row tile) of row m (0..15) of warp w of consumer
// warpgroup q: warp w of q holds the tile's group 4q + w, whose mma row g is
// the group's row 2g and row g + 8 its row 2g + 1 (kMmaRowGroups16), so gate_j
// and up_j of interleaved w13 rows meet in one thread.
MXMOE_SM90_HD constexpr int tile_row(int q, int w, int m) { return kGroupRows * (4 * q + w) + 2 * (m & 7) + (m >> 3); }

// ---- Shared memory of the GEMM kernel ---------------------------------------------
// Offsets from the 1024-aligned base: `stages` activation stages, `stages`
// code stages (8 row groups x 1 KB), two item buffers (the current and the
// next item's), with `staged_output` GEMM1's output half (at out,
// output_half_bytes: the epilogue writes an item's outputs there and one bulk
// copy stores them), then the mbarriers: full[stages], empty[stages],
// item_full[2], item_empty[2], then each item buffer's item index (4 bytes
// each, at item_index: the producer claims items, the consumers read which
// one it took, -1 when none is left). An item buffer holds what the item reads once:
// its 128 rows' scales (128 x k/32 bytes, at 0), the epilogue's 4 bytes per
// token column (at item_cols: its sorted pair, -1 for padding) and the rows'
// bf16 bias (at item_bias), so that the epilogue reads no global memory.
// `bytes` is the dynamic shared memory to request, 1024 bytes of alignment
// slack included.
struct SmemLayout {
  int act, codes, items, item_stride, item_cols, item_bias, out, bars, item_index, bytes;
};
MXMOE_SM90_HD constexpr int item_scale_bytes(int k_padded) { return kTileRows * (k_padded / 32); }
MXMOE_SM90_HD constexpr SmemLayout smem_layout(int bn, int k_padded, int stages, bool staged_output) {
  SmemLayout l{};
  l.act = 0;
  l.codes = stages * stage_bytes(bn);
  l.items = l.codes + stages * kCodeStageBytes;
  l.item_cols = (item_scale_bytes(k_padded) + 15) / 16 * 16;
  l.item_bias = l.item_cols + 4 * bn;
  l.item_stride = (l.item_bias + 2 * kTileRows + 127) / 128 * 128;
  l.out = l.items + 2 * l.item_stride;
  l.bars = l.out + (staged_output ? output_half_bytes(bn) : 0);
  l.item_index = l.bars + (2 * stages + 4) * 8;
  l.bytes = 1024 + l.item_index + 2 * 4;
  return l;
}

}  // namespace mxmoe::sm90
