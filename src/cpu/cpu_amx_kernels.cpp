// The amx path: avx512_vnni's kernels, except that an expert with
// amx_tiles_pay(rows) rows has its block sums computed by AMX's tile
// multiply (tdpbsud: 16 rows of s8 times 16 columns of u8 words into 16 x 16
// int32 sums in one instruction) instead of one vpdpbusd chain per token.
// The integer block sums are the same exact integers and the float epilogue
// is avx512_vnni's, operation for operation, so the two paths give the same
// bits. Compiled with avx512_vnni's flags plus -mamx-tile -mamx-int8
// (src/CMakeLists.txt); cpu_isa.cpp asks the kernel for the tile state
// before it reports the path supported.
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "cpu/cpu_avx512vnni_ops.h"
#include "cpu/cpu_kernels_impl.h"
#include "cpu/cpu_work.h"

namespace mxmoe::cpu {
namespace {

using Ops = Avx512VnniOps;
using Vnni = Impl<Ops>;
using F = Ops::F;
using I = Ops::I;

// A tile multiply takes 16 activation rows: tokens come in tiles of 16, and
// a chunk of 4 tiles is packed at a time, so a weight group read for the
// chunk's first tile is in L1 for the other three.
constexpr int kTileRows = 16;
constexpr int kChunkRows = 4 * kTileRows;

// Tiles 0 and 1: a block's hi and lo sums, 16 tokens x 16 weight rows of
// int32. 2 and 3: the block's hi and lo activation bytes, 16 tokens x 32.
// 4: the block's decoded weights as tdpbsud's B operand, row j holding each
// weight row's 4 codes of k = 4j .. 4j + 3: exactly Ops::Block's w[j].
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 32, 32, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 8};
};
static_assert(sizeof(TileConfig) == 64, "ldtilecfg reads a 64-byte palette-1 configuration");

// GCC 12's tile loads (amxtileintrin.h) are asm that takes the source's
// address only, with no memory operand or clobber: nothing stops the
// compiler from dropping or sinking the stores a tile load reads (a local
// array that C++ never reads again looks dead). This empty asm takes the
// address and clobbers memory, so every store before it is done.
inline void publish_to_tiles(const void* p) { asm volatile("" ::"r"(p) : "memory"); }

// The activation rows of one chunk, copied so that each tile's 16 rows lie a
// fixed stride apart (a tile load reads rows at base + i stride); rows past
// the chunk's tokens, up to the end of their last tile, are zero.
struct Packed {
  int8_t* hi;      // [kChunkRows][k]
  int8_t* lo;      // [kChunkRows][k]
  float* scale;    // [kChunkRows][k / 32]
  int32_t* corr;   // [kChunkRows][k / 32]
  int64_t k;
};

// One packing buffer per thread, grown at its first use for a larger K and
// kept: the forward's threads pack every chunk into the same memory. Plain
// malloc, not a std::vector, whose inline members compiled with this file's
// flags would be weak symbols the linker could pick for other objects
// (scripts/check-isa-objects.sh).
struct ThreadBuffer {
  uint8_t* data = nullptr;
  size_t size = 0;
  ~ThreadBuffer() { std::free(data); }
  // At least `bytes` bytes, or null where the host has no memory for them.
  uint8_t* reserve(size_t bytes) {
    if (size < bytes) {
      std::free(data);
      data = static_cast<uint8_t*>(std::malloc(bytes));
      size = data ? bytes : 0;
    }
    return data;
  }
};

size_t packed_bytes(int64_t k) { return size_t(kChunkRows) * size_t(2 * k + 8 * (k / 32)); }

// This thread's packing buffer for rows of k bytes, or null (see reserve).
uint8_t* packing_buffer(int64_t k) {
  thread_local ThreadBuffer buffer;
  return buffer.reserve(packed_bytes(k));
}

// Up to kChunkRows rows of q (rows[i] / row_divisor) into `buffer`.
Packed pack_rows(uint8_t* buffer, const QuantRows& q, const int32_t* rows, int64_t count, int64_t row_divisor) {
  const int64_t k = q.k, blocks = k / 32;
  Packed p{reinterpret_cast<int8_t*>(buffer), reinterpret_cast<int8_t*>(buffer) + kChunkRows * k,
           reinterpret_cast<float*>(buffer + 2 * kChunkRows * k),
           reinterpret_cast<int32_t*>(buffer + 2 * kChunkRows * k + 4 * kChunkRows * blocks), k};
  const int64_t tile_rows = (count + kTileRows - 1) / kTileRows * kTileRows;
  for (int64_t i = 0; i < tile_rows; ++i) {
    if (i < count) {
      const RowPtr r = row_of(q, rows[i] / row_divisor);
      std::memcpy(p.hi + i * k, r.hi, size_t(k));
      std::memcpy(p.lo + i * k, r.lo, size_t(k));
      std::memcpy(p.scale + i * blocks, r.scale, size_t(blocks) * 4);
      std::memcpy(p.corr + i * blocks, r.corr, size_t(blocks) * 4);
    } else {
      std::memset(p.hi + i * k, 0, size_t(k));
      std::memset(p.lo + i * k, 0, size_t(k));
      std::memset(p.scale + i * blocks, 0, size_t(blocks) * 4);
      std::memset(p.corr + i * blocks, 0, size_t(blocks) * 4);
    }
  }
  publish_to_tiles(buffer);
  return p;
}

// out[i] = the 16 rows of one group dotted with tile `tile`'s token i, for
// its first N tokens, as Vnni::dot_group: per block the exact sum 256 hi +
// lo + corr, times the token's scale, times the rows' scales, added up in
// fp32. The multiplies always take 16 tokens; the float work, a third of a
// block's instructions at 16 tokens, only the N real ones.
template <int N>
void dot_group_tiles(const uint8_t* codes, const uint8_t* scales, int64_t blocks, const Packed& p, int tile,
                     F* out) {
  alignas(64) int32_t sums[2][kTileRows][16];
  alignas(64) uint8_t weights[8][64];
  const int64_t k = p.k, row0 = int64_t(tile) * kTileRows;
  const int8_t* hi = p.hi + row0 * k;
  const int8_t* lo = p.lo + row0 * k;
  const float* scale = p.scale + row0 * blocks;
  const int32_t* corr = p.corr + row0 * blocks;
  F total[N];
#pragma GCC unroll 16
  for (int i = 0; i < N; ++i) total[i] = Ops::zero();
  for (int64_t b = 0; b < blocks; ++b) {
    Vnni::prefetch_block(codes, scales, b);
    const Ops::Block w = Ops::decode(codes + 256 * b);
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) _mm512_store_si512(weights[j], w.w[j]);
    publish_to_tiles(weights);
    _tile_loadd(4, weights, 64);
    _tile_loadd(2, hi + 32 * b, k);
    _tile_loadd(3, lo + 32 * b, k);
    _tile_zero(0);
    _tile_zero(1);
    _tile_dpbsud(0, 2, 4);
    _tile_dpbsud(1, 3, 4);
    _tile_stored(0, sums[0], 64);
    _tile_stored(1, sums[1], 64);
    const F row_scales = Ops::row_scales(scales + 16 * b);
#pragma GCC unroll 16
    for (int i = 0; i < N; ++i) {
      const I h = _mm512_load_si512(sums[0][i]), l = _mm512_load_si512(sums[1][i]);
      const I s = Ops::iadd(Ops::iadd(Ops::slli<8>(h), l), Ops::iset1(corr[i * blocks + b]));
      total[i] = Vnni::add_block(total[i], s, scale[i * blocks + b], row_scales);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < N; ++i) out[i] = total[i];
}

// dot_group_tiles for the tile's first 1 <= n <= 16 tokens.
template <int N = kTileRows>
void dot_tile_rows(int n, const uint8_t* codes, const uint8_t* scales, int64_t blocks, const Packed& p, int tile,
                   F* out) {
  if constexpr (N > 1)
    if (n < N) return dot_tile_rows<N - 1>(n, codes, scales, blocks, p, tile, out);
  dot_group_tiles<N>(codes, scales, blocks, p, tile, out);
}

// Each call configures the tiles of its thread and releases them at the
// end, so a thread that never reaches an AMX expert keeps no tile state.
struct TileScope {
  TileScope() {
    static const TileConfig config;
    _tile_loadconfig(&config);
  }
  ~TileScope() { _tile_release(); }
};

// Calls f(p, n0, n) for each chunk of the expert's rows [n0, n0 + n),
// packed from q (row rows.pairs[i] / row_divisor), with the tiles
// configured. False, with nothing done, where the tiles do not pay for this
// expert or the thread has no packing buffer: the caller runs avx512_vnni's.
template <class Fn>
bool for_each_chunk(const QuantRows& q, const ExpertRows& r, int64_t row_divisor, Fn f) {
  uint8_t* buffer = amx_tiles_pay(r.count) ? packing_buffer(q.k) : nullptr;
  if (!buffer) return false;
  const TileScope tiles;
  for (int64_t n0 = 0; n0 < r.count; n0 += kChunkRows) {
    const int64_t n = std::min<int64_t>(kChunkRows, r.count - n0);
    f(pack_rows(buffer, q, r.pairs + n0, n, row_divisor), n0, n);
  }
  return true;
}

// The tiles of a chunk of n rows: tile t holds rows 16t .. 16t + live - 1.
template <class Fn>
void for_each_tile(int64_t n, Fn f) {
  for (int tile = 0; tile * kTileRows < n; ++tile) f(tile, int(std::min<int64_t>(kTileRows, n - tile * kTileRows)));
}

void gemm1(const Gemm1Args& a, const ExpertRows& r, int64_t c0, int64_t c1) {
  const int64_t e = r.expert;
  const bool tiled = for_each_chunk(a.x, r, a.topk, [&](const Packed& p, int64_t n0, int64_t n) {
    for (int64_t c = c0; c < c1; ++c) {
      const uint16_t* bias = a.b13 + e * a.b13_stride + 64 * c;
      const F gate_bias[2] = {Ops::load_bf16(bias), Ops::load_bf16(bias + 32)};
      const F up_bias[2] = {Ops::load_bf16(bias + 16), Ops::load_bf16(bias + 48)};
      for_each_tile(n, [&](int tile, int live) {
        F h[4][kTileRows];  // gate, up of columns 32c + [0, 16), then of 32c + [16, 32)
        for (int g = 0; g < 4; ++g)
          dot_tile_rows(live, a.w13.group_codes(e, 4 * c + g), a.w13.group_scales(e, 4 * c + g), a.w13.blocks, p,
                        tile, h[g]);
        for (int i = 0; i < live; ++i) {
          F act[2];
          for (int half = 0; half < 2; ++half)
            act[half] = Vnni::swiglu(Ops::add(h[2 * half][i], gate_bias[half]),
                                     Ops::add(h[2 * half + 1][i], up_bias[half]), a.swiglu);
          Vnni::quantize_block(act[0], act[1], a.a, r.pairs[n0 + tile * kTileRows + i], c);
        }
      });
    }
  });
  if (!tiled) Vnni::gemm1(a, r, c0, c1);
}

void gemm2(const Gemm2Args& a, const ExpertRows& r, int64_t g0, int64_t g1) {
  const int64_t e = r.expert;
  const bool tiled = for_each_chunk(a.a, r, 1, [&](const Packed& p, int64_t n0, int64_t n) {
    for (int64_t g = g0; g < g1; ++g) {
      const F bias = Ops::load_bf16(a.b2 + e * a.b2_stride + 16 * g);
      for_each_tile(n, [&](int tile, int live) {
        F o[kTileRows];
        dot_tile_rows(live, a.w2.group_codes(e, g), a.w2.group_scales(e, g), a.w2.blocks, p, tile, o);
        for (int i = 0; i < live; ++i)
          Ops::storeu(a.out + r.pairs[n0 + tile * kTileRows + i] * a.out_stride + 16 * g, Ops::add(o[i], bias));
      });
    }
  });
  if (!tiled) Vnni::gemm2(a, r, g0, g1);
}

constexpr Kernels kKernels{CpuIsa::kAmx, &Vnni::quantize_bf16, &Vnni::router, &gemm1, &gemm2, &Vnni::combine};

}  // namespace

const Kernels& amx_kernels() { return kKernels; }

}  // namespace mxmoe::cpu
