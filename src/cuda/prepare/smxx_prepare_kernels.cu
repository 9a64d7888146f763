#include "cuda/prepare/smxx_prepare_kernels.h"

#include <algorithm>

#include "cuda/common/smxx_moe_kernels.h"
#include "mxmoe/format.h"
#include "prepare/blockscaled_scales.h"
#include "prepare/layout_index.h"

namespace mxmoe::smxx {
namespace {

constexpr int kThreads = 256;

// Grid-stride loops over a piece: enough blocks to fill an H200 many times
// over (132 SMs x 8 resident blocks of 256 threads) without a launch sized by
// gigabytes.
int blocks_for(int64_t n) { return int(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, 132 * 16)); }

// MxMatrixView's accessors are host functions; the same arithmetic.
__device__ uint8_t scale_at(const MxMatrixView& m, int64_t e, int64_t r, int64_t b) {
  return m.scales[e * m.scale_expert_stride + r * m.scale_row_stride + b];
}

// A source's scale byte, in either order (GatherMatrix::cpu16).
__device__ uint8_t source_scale(const GatherMatrix& m, int64_t e, int64_t r, int64_t b) {
  if (!m.cpu16) return scale_at(m.src, e, r, b);
  const uint8_t* group = m.src.scales + e * m.src.scale_expert_stride + r / 16 * 16 * (m.src.cols / kMxBlock);
  return group[layout::cpu16_scale_byte(int(r % 16), b)];
}

// The source row that prepared row R copies, with its expert; -1 for padding.
__device__ int64_t source_row(const RowMap& m, int64_t R, int64_t* e) {
  if (R >= m.experts * m.rows) return -1;  // prefetch rows
  *e = R / m.rows;
  const int64_t r = R % m.rows;
  if (m.w13) return layout::w13_source_row(m.dst_layout, m.dst_I, r, m.src_layout, m.src_I, 0, m.src_I);
  return r < m.src_rows ? r : -1;
}

__global__ void gather_codes_kernel(GatherMatrix m, WeightSwizzle swizzle, uint8_t* out, int64_t words) {
  const int64_t row_bytes = m.cols_padded / 2, src_bytes = m.src.cols / 2;
  const int64_t expert_bytes = m.map.experts * m.map.rows * row_bytes;
  const bool fragment = swizzle == WeightSwizzle::kMmaRowGroups16 || swizzle == WeightSwizzle::kMmaRowTiles128;
  for (int64_t w = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; w < words; w += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = 4 * w;
    int64_t R = o / row_bytes, x = o % row_bytes;
    if (fragment && o < expert_bytes) layout::fragment_code_source(swizzle, row_bytes, o, &R, &x);
    int64_t e = 0;
    const int64_t r = source_row(m.map, R, &e);
    uint32_t v = 0;
    // A word lies inside one 8- or 16-byte piece of a row, and rows hold
    // whole 16-byte MX blocks: it is all source or all padding.
    if (r >= 0 && x < src_bytes) {
      if (m.cpu16) {
        v = layout::cpu16_dense_word(m.src.codes + e * m.src.code_expert_stride + r / 16 * 8 * m.src.cols,
                                     int(r % 16), x);
      } else {
        const uint8_t* p = m.src.codes + e * m.src.code_expert_stride + r * m.src.code_row_stride + x;
        v = uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
      }
      if (fragment) v = layout::permute_word_bits(v);
    }
    reinterpret_cast<uint32_t*>(out)[w] = v;
  }
}

__global__ void gather_scales_kernel(GatherMatrix m, WeightSwizzle swizzle, bool blockscaled, uint8_t* out,
                                     int64_t bytes) {
  const int64_t blocks = m.cols_padded / kMxBlock, src_blocks = m.src.cols / kMxBlock;
  const int64_t expert_bytes = m.map.experts * m.map.rows * blocks;
  const int64_t packed = blockscaled_scale_bytes(m.map.rows, blocks);
  const bool fragment = swizzle == WeightSwizzle::kMmaRowGroups16 || swizzle == WeightSwizzle::kMmaRowTiles128;
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < bytes; o += int64_t(gridDim.x) * blockDim.x) {
    int64_t R = o / blocks, b = o % blocks;
    if (blockscaled) {
      int64_t r = 0;
      blockscaled_scale_source(blocks, o % packed, &r, &b);
      R = r < m.map.rows ? o / packed * m.map.rows + r : m.map.experts * m.map.rows;  // past: padding
      if (b >= blocks) R = m.map.experts * m.map.rows;
    } else if (fragment && o < expert_bytes) {
      layout::fragment_scale_source(blocks, o, &R, &b);
    }
    int64_t e = 0;
    const int64_t r = source_row(m.map, R, &e);
    out[o] = r >= 0 && b < src_blocks ? source_scale(m, e, r, b) : kE8M0Neutral;
  }
}

__global__ void gather_bf16_kernel(const uint16_t* src, RowMap map, int64_t expert_stride, int64_t row_stride,
                                   int64_t src_cols, int64_t cols_padded, uint16_t* out, int64_t count) {
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < count; o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = o % cols_padded;
    int64_t e = 0;
    const int64_t r = source_row(map, o / cols_padded, &e);
    out[o] = r >= 0 && i < src_cols ? src[e * expert_stride + r * row_stride + i] : uint16_t(0);
  }
}

__device__ void note_bad(unsigned long long* first, int64_t at) { atomicMin(first, (unsigned long long)at); }

// Each scale byte of [experts, rows, blocks]: 0xFF is bad; >= 128 is large.
__global__ void check_scales_kernel(MxMatrixView m, unsigned long long* first_bad, unsigned int* large) {
  const int64_t blocks = m.cols / kMxBlock, n = m.experts * m.rows * blocks;
  bool any_large = false;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint8_t s = scale_at(m, i / blocks / m.rows, i / blocks % m.rows, i % blocks);
    if (s == kE8M0NaN) note_bad(first_bad, i);
    any_large |= s >= 128;
  }
  if (__syncthreads_or(any_large) && threadIdx.x == 0) atomicOr(large, 1u);
}

// Each bf16 of `rows` rows of `cols`, `stride` apart: Inf or NaN is bad.
__global__ void check_bf16_kernel(const uint16_t* v, int64_t rows, int64_t cols, int64_t stride,
                                  unsigned long long* first_bad) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * cols;
       i += int64_t(gridDim.x) * blockDim.x)
    if ((v[i / cols * stride + i % cols] & 0x7F80u) == 0x7F80u) note_bad(first_bad, i);
}

}  // namespace

Status launch_gather_codes(const GatherMatrix& m, WeightSwizzle swizzle, uint8_t* out, int64_t bytes,
                           cudaStream_t stream) {
  if (bytes % 4 != 0) return Status::InvalidArgument("device preparation: a codes piece of whole words");
  gather_codes_kernel<<<blocks_for(bytes / 4), kThreads, 0, stream>>>(m, swizzle, out, bytes / 4);
  return cuda_status(cudaGetLastError(), "device preparation", "gather codes");
}

Status launch_gather_scales(const GatherMatrix& m, WeightSwizzle swizzle, bool blockscaled, uint8_t* out,
                            int64_t bytes, cudaStream_t stream) {
  gather_scales_kernel<<<blocks_for(bytes), kThreads, 0, stream>>>(m, swizzle, blockscaled, out, bytes);
  return cuda_status(cudaGetLastError(), "device preparation", "gather scales");
}

Status launch_gather_bf16(const uint16_t* src, const RowMap& map, int64_t expert_stride, int64_t row_stride,
                          int64_t src_cols, int64_t cols_padded, uint16_t* out, int64_t count, cudaStream_t stream) {
  if (count == 0) return Status::Ok();
  gather_bf16_kernel<<<blocks_for(count), kThreads, 0, stream>>>(src, map, expert_stride, row_stride, src_cols,
                                                                 cols_padded, out, count);
  return cuda_status(cudaGetLastError(), "device preparation", "gather bf16");
}

Status launch_check_source(const MoeWeightsView& w, SourceChecks* c, cudaStream_t stream) {
  const char* who = "device checks";
  MXMOE_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(c->first_bad, 0xFF, sizeof c->first_bad, stream), who, "init"));
  MXMOE_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(c->large_scales, 0, sizeof c->large_scales, stream), who, "init"));
  const MoeShape& s = w.shape;
  const MxMatrixView* scales[2] = {&w.w13, &w.w2};
  for (int t = 0; t < 2; ++t) {
    const int64_t n = scales[t]->experts * scales[t]->rows * (scales[t]->cols / kMxBlock);
    check_scales_kernel<<<blocks_for(n), kThreads, 0, stream>>>(*scales[t], &c->first_bad[kCheckW13Scales + t],
                                                               &c->large_scales[t]);
  }
  const struct {
    const uint16_t* v;
    int64_t rows, cols, stride;
  } vectors[4] = {{w.b13, s.experts, 2 * s.intermediate, w.b13_expert_stride},
                  {w.b2, s.experts, s.hidden, w.b2_expert_stride},
                  {w.router_weight, s.experts, s.hidden, s.hidden},
                  {w.router_bias, 1, s.experts, s.experts}};
  for (int t = 0; t < 4; ++t)
    if (vectors[t].v)
      check_bf16_kernel<<<blocks_for(vectors[t].rows * vectors[t].cols), kThreads, 0, stream>>>(
          vectors[t].v, vectors[t].rows, vectors[t].cols, vectors[t].stride, &c->first_bad[kCheckB13 + t]);
  return cuda_status(cudaGetLastError(), who, "launch");
}

}  // namespace mxmoe::smxx
