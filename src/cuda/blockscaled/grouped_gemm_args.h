// The arguments of one block-scaled grouped GEMM (one problem per expert), as
// the device arrays a CUTLASS 4.x ptr-array block-scaled GEMM reads, and the
// GEMMs that run over them: CUTLASS's on SM100 and SM120, or the emulation
// (smxx_emulated_grouped_gemm.h) on any GPU. The arrays' element types are
// CUTLASS's (blockscaled_types.cuh); this header keeps them opaque so that
// host code needs no CUTLASS.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "mxmoe/status.h"

namespace mxmoe::blockscaled {

// D_g = A_g B_g^T for every group g, written on the device by
// launch_grouped_problems (nothing here is read on the host):
//   A_g: E4M3 [M_g, K] rows, with E8M0 scales SFA_g in the block-scaled layout
//   B_g: E2M1 [N, K] rows (two a byte, low nibble first), scales SFB_g likewise
//   D_g: bf16 [M_g, N] rows, fp32 accumulation
// M_g is a multiple of 128 (0 for an expert without rows); N and K are the
// same for every group, multiples of 128.
struct GroupedGemmArgs {
  int groups = 0;
  int64_t n = 0, k = 0;
  // Upper bound of sum_g M_g (rows of the workspace's A and D).
  int64_t max_rows = 0;
  void* problem_shapes = nullptr;  // cute::Shape<int, int, int> [groups]: M_g, N, K
  const void** a = nullptr;        // const float_e4m3_t* [groups]
  const void** b = nullptr;        // const float_e2m1_t* [groups] (a packed byte array each)
  const void** sfa = nullptr;      // const float_ue8m0_t* [groups]
  const void** sfb = nullptr;
  void** d = nullptr;              // bfloat16_t* [groups]
  void* stride_a = nullptr;        // StrideA [groups]
  void* stride_b = nullptr;        // StrideB [groups]
  void* stride_d = nullptr;        // StrideD [groups]
  void* layout_sfa = nullptr;      // LayoutSF [groups]
  void* layout_sfb = nullptr;      // LayoutSF [groups]
};

// A grouped GEMM implementation: its workspace for `groups` problems on a
// device of `sms` SMs, and its launch on `stream` (no synchronisation, no
// allocation; capturable).
struct GroupedGemm {
  const char* name = "";
  size_t (*workspace_bytes)(int groups, int sms) = nullptr;
  Status (*run)(const GroupedGemmArgs& args, void* workspace, size_t workspace_size, int sms,
                cudaStream_t stream) = nullptr;
};

}  // namespace mxmoe::blockscaled
