// What the CPU kernels read and write, and the table of one path's kernels
// (cpu_<isa>_kernels.cpp, each compiled for its instruction set). The
// forward (cpu_moe.cpp) splits the work and calls them from its threads.
#pragma once

#include <cstdint>

#include "mxmoe/cpu.h"
#include "mxmoe/layer.h"
#include "mxmoe/moe.h"

namespace mxmoe::cpu {

// The weights' codes decode to t = 2 x E2M1 + 12 in [0, 24]: an unsigned
// byte for the u8 x s8 dot products, 12 added so that no value is negative.
// sum_k t_k q_k = 2 sum_k e2m1_k q_k + 12 sum_k q_k, so each activation block
// carries -12 sum_k q_k (QuantRows::corr) and its scale halved.
inline constexpr int kCodeBias = 12;
// 32512 = 127 x 256: q = round(v / s) in [-32512, 32512] splits exactly into
// hi = round(q / 256) in [-127, 127] and lo = q - 256 hi in [-128, 127].
inline constexpr float kQuantMax = 32512.0f;

// Activation rows (x, or a pair's SwiGLU output) as the dot products read
// them. Each 32-wide block b of a row holds q_k = round(v_k / s_b), s_b =
// amax_b / 32512 (16 significant bits: a relative error of 1.5e-5 of the
// block's largest value, where int8 would give 4e-3), as two signed byte
// planes: q = 256 hi + lo. A block with NaN or Inf has scale NaN (its
// products and the row's outputs are NaN, as in the reference), an all-zero
// block scale 0.
struct QuantRows {
  int8_t* hi = nullptr;     // [rows][k]
  int8_t* lo = nullptr;     // [rows][k]
  float* scale = nullptr;   // [rows][k / 32]: s_b / 2 (codes decode to twice the E2M1 value)
  int32_t* corr = nullptr;  // [rows][k / 32]: -12 sum_k q_k (see kCodeBias)
  int64_t k = 0;            // elements a row, a multiple of 32
};

// One activation row as the dot products read it.
struct RowPtr {
  const int8_t* hi;
  const int8_t* lo;
  const float* scale;
  const int32_t* corr;
};

// One weight tensor in kCpuRowGroups16 order (include/mxmoe/prepare.h):
// expert e's 16-row group g starts at codes + (e groups + g) blocks 256 and
// its scales at scales + (e groups + g) blocks 16.
struct PackedMatrix {
  const uint8_t* codes = nullptr;
  const uint8_t* scales = nullptr;
  int64_t groups = 0;  // 16-row groups an expert (rows / 16)
  int64_t blocks = 0;  // 32-wide MX blocks a row (K / 32)
  const uint8_t* group_codes(int64_t e, int64_t g) const { return codes + (e * groups + g) * blocks * 256; }
  const uint8_t* group_scales(int64_t e, int64_t g) const { return scales + (e * groups + g) * blocks * 16; }
};

// The rows of one expert: its (token, slot) pairs p, in token order; GEMM1
// reads x row p / topk and writes a row p, GEMM2 reads a row p and writes
// out row p.
struct ExpertRows {
  int64_t expert = 0;
  const int32_t* pairs = nullptr;
  int64_t count = 0;
};

// GEMM1 + bias + SwiGLU: w13 in kBlockedGateUp16 rows, so item c (32
// intermediate columns) is the groups 4c .. 4c + 3: gate and up of columns
// 32c .. 32c + 15, then of 32c + 16 .. 32c + 31. Writes a's block c.
struct Gemm1Args {
  PackedMatrix w13;
  const uint16_t* b13 = nullptr;  // bf16 [E][2 Ip] in the same row order
  int64_t b13_stride = 0;
  SwigluParams swiglu;
  QuantRows x;  // [T][Hp]
  int64_t topk = 1;
  QuantRows a;  // [T k][Ip]
};

// GEMM2 + bias: item g is w2's 16-row group g (outputs 16g .. 16g + 15 of
// each pair's row of `out`).
struct Gemm2Args {
  PackedMatrix w2;
  const uint16_t* b2 = nullptr;  // bf16 [E][Hp]
  int64_t b2_stride = 0;
  QuantRows a;         // [T k][Ip]
  float* out = nullptr;  // [T k][out_stride]
  int64_t out_stride = 0;
};

// One path's kernels. Ranges are [begin, end); every call writes only its
// own rows, items or tokens, so threads may run disjoint ranges at once.
struct Kernels {
  CpuIsa isa;
  // Rows [r0, r1) of bf16 x (row r at x + r stride, `k_real` real columns;
  // the blocks past them are zero) to q's rows.
  void (*quantize_bf16)(const uint16_t* x, int64_t stride, int64_t k_real, int64_t r0, int64_t r1, QuantRows q);
  // Router logits of the (token, expert) pairs i in [i0, i1) (token i / E,
  // expert i % E): logits[i] = x_t . w_e + bias_e over `hidden` columns,
  // fp32 products and sums.
  void (*router)(const uint16_t* x, int64_t stride, const uint16_t* w, int64_t w_stride, const uint16_t* bias,
                 int64_t hidden, int64_t experts, int64_t i0, int64_t i1, float* logits);
  void (*gemm1)(const Gemm1Args& args, const ExpertRows& rows, int64_t item0, int64_t item1);
  void (*gemm2)(const Gemm2Args& args, const ExpertRows& rows, int64_t item0, int64_t item1);
  // y[t] = sum over slots s in order of weights[t k + s] out[t k + s], for
  // tokens [t0, t1), the first `hidden` columns, as fp32 or bf16.
  void (*combine)(const float* out, int64_t out_stride, const float* weights, int64_t topk, int64_t hidden,
                  int64_t t0, int64_t t1, void* y, OutputDtype y_dtype);
};

// The kernels of `isa` (which the caller has found this CPU supports).
const Kernels& kernels_for(CpuIsa isa);

const Kernels& amx_kernels();
const Kernels& avx512_vnni_kernels();
const Kernels& avx512_kernels();
const Kernels& avx2_kernels();
const Kernels& scalar_kernels();

}  // namespace mxmoe::cpu
