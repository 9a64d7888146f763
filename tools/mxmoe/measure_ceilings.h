// A GPU's two rates, measured in well under a second each: HBM read by a
// stream over a buffer many times the L2, and a cuBLAS bf16 GEMM. Each runs
// on `device` (the current device is restored), allocates and frees its own
// buffers, and returns the reason where it cannot measure.
#pragma once

#include "mxmoe/status.h"

namespace mxmoe::cli {

// Up to 2 GiB, at most half the free memory: at least kReadStreamL2Multiple
// times the L2, so that every pass reads HBM.
Status measure_read_rate(int device, double* bytes_per_second);
inline constexpr int kReadStreamL2Multiple = 16;

// cublasGemmEx with bf16 A, B and C, fp32 accumulation, kGemmN^3: the size
// the H200's known entry was measured at.
Status measure_bf16_gemm_rate(int device, double* flops_per_second);
inline constexpr int kGemmN = 8192;

}  // namespace mxmoe::cli
