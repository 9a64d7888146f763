// When a host-memory layer (api/host_experts_layer.h) computes on the CPU and
// when it streams its experts over PCIe to the GPU's kernels instead: small
// pure functions of T, the layer's shape, the CPU threads and measured rates.
//
// On the CPU a forward reads the experts its tokens touch and multiplies
// each (token, slot) pair through both GEMMs; whichever is slower bounds it.
// Streaming copies every expert (which ones the tokens touch is known only
// on the device, and a copy of only those would need the host to wait for
// the routing), re-lays them for the GPU's kernels at HBM speed and runs the
// GPU layer. The CPU's time grows with T, the stream's barely, so from some T
// on the stream is faster; below it the CPU reads less than the whole layer.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "mxmoe/moe.h"

namespace mxmoe {

// Measured on the H100's host (16 cores of a Xeon with AVX-512 VNNI, docs/PERF.md
// "Experts in host memory", 2026-12-07):
//   pcie_gbps: pinned 64 MB copies host -> device, 54.7 GB/s;
//   dram_gbps: the cpu backend's read rate at T = 1, 91 GB/s on 16 threads
//     (1.00x the read stream), 22.6 GB/s on 2 (11.3 a thread) -> the lesser
//     of 11.3 a thread and 91;
//   cpu_gflops_per_thread: gpt-oss-120b's layer at T = 256 (1024 pairs of
//     49.8 MFLOP) took 48.8 ms on 16 threads, 65 GFLOP/s a thread;
//   gpu: the re-laying reads and writes the layer once at ~2 TB/s of HBM,
//     and the GPU layer runs its pairs at >= 200 TFLOP/s from T = 512.
struct HostStreamRates {
  double pcie_gbps = 54.7;
  double dram_gbps_per_thread = 11.3;
  double dram_gbps = 91.0;
  double cpu_gflops_per_thread = 65.0;
  double hbm_gbps = 2000.0;
  double gpu_tflops = 200.0;
};

// The cpu pack's bytes of one expert: both weight tensors' codes and scales
// and the bf16 biases.
inline double host_expert_bytes(const MoeShape& s) {
  const double H = double(s.hidden), I = double(s.intermediate);
  return 3.0 * H * I * (0.5 + 1.0 / 32) + 2.0 * (2 * I + H);
}

// Experts that T tokens touch, expected under uniform routing:
// E (1 - (1 - k / E)^T).
inline double expected_touched_experts(const MoeShape& s, int64_t tokens) {
  const double E = double(s.experts);
  return E * (1.0 - std::pow(1.0 - double(s.topk) / E, double(tokens)));
}

// µs of a forward of T tokens computed by the CPU on `threads` threads.
inline double host_cpu_us(const MoeShape& s, int64_t tokens, int threads, const HostStreamRates& r) {
  const double n = double(std::max(threads, 1));
  const double read_gbps = std::min(r.dram_gbps_per_thread * n, r.dram_gbps);
  const double read_us = expected_touched_experts(s, tokens) * host_expert_bytes(s) / (read_gbps * 1e3);
  const double flops = 6.0 * double(s.hidden) * double(s.intermediate) * double(tokens * s.topk);
  const double compute_us = flops / (r.cpu_gflops_per_thread * n * 1e3);
  return std::max(read_us, compute_us);
}

// µs of the same forward with every expert streamed to the GPU.
inline double host_stream_us(const MoeShape& s, int64_t tokens, const HostStreamRates& r) {
  const double bytes = double(s.experts) * host_expert_bytes(s);
  const double flops = 6.0 * double(s.hidden) * double(s.intermediate) * double(tokens * s.topk);
  return bytes / (r.pcie_gbps * 1e3) + 2.0 * bytes / (r.hbm_gbps * 1e3) + flops / (r.gpu_tflops * 1e6);
}

// Tokens past which the search stops: a forward this long streams whatever
// the rates (its CPU time is minutes).
inline constexpr int64_t kMaxStreamFromTokens = int64_t(1) << 16;

// The fewest tokens from which streaming is faster than the CPU on `threads`
// threads (kMaxStreamFromTokens where it never is below that).
inline int64_t stream_from_tokens(const MoeShape& s, int threads, const HostStreamRates& r = {}) {
  for (int64_t t = 1; t < kMaxStreamFromTokens; ++t)
    if (host_stream_us(s, t, r) < host_cpu_us(s, t, threads, r)) return t;
  return kMaxStreamFromTokens;
}

}  // namespace mxmoe
