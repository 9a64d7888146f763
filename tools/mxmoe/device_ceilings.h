// The ceilings `mxmoe bench` measures a GPU forward against: the rate at which
// the GPU reads HBM and runs a bf16 GEMM, its board's power limit and idle
// draw, and the energy above idle of one byte read and one bf16 FLOP; each
// with where it came from ("measured", "NVML", or a known entry and why).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace mxmoe::cli {

struct DeviceCeilings {
  std::string device;
  double copy_bytes_per_s = 0;
  double bf16_flops_per_s = 0;
  double power_limit_w = 0;
  double idle_w = 0;
  // 0 where no known entry holds them for this device: capped_us is then not
  // computed (roofline.h).
  double joules_per_byte_read = 0;
  double joules_per_bf16_flop = 0;
  std::string copy_source, gemm_source, power_limit_source, idle_source, energy_source;
  // Where they were read from and when they were measured, if from the cache
  // (ceilings_cache.h); empty where measured in this run.
  std::string cache_file, cached_on;
};

// Ceilings measured once on one board, by the programs their comment names.
struct KnownCeilings {
  const char* name;
  double copy_bytes_per_s, bf16_flops_per_s, power_limit_w, idle_w, joules_per_byte_read, joules_per_bf16_flop;
};

// NVIDIA H200 (SM90, 132 SMs, 700 W limit). Device-to-device copy
// 4.14 TB/s and bf16 GEMM (torch, 8192^3) 730 TFLOP/s, 2026-12-01. The idle
// draw and the energy above it of one byte of an HBM read stream and of one
// bf16 GEMM FLOP: bench/power_ceilings, 2026-12-01, two runs (idle 119.9 and
// 120.5 W, 129.1-129.2 pJ, 0.862-0.864 pJ). Each workload alone already draws
// the limit: the read stream at 4.49 TB/s, the GEMM at 665 TFLOP/s
// (docs/PERF.md, "The floor under the board's power limit").
inline constexpr KnownCeilings kH200Ceilings{"H200", 4.14e12, 730e12, 700, 120.2, 129.1e-12, 0.863e-12};

// The energies a byte and a FLOP cost were measured on the H200 only (they
// need bench/power_ceilings' seconds-long power windows): an SM90 board
// (H100, H200) takes them from its entry, any other board has none.
inline constexpr int kKnownEnergySm = 90;

// Every figure of `known` for `device`, each source "known entry: <name>"
// followed by " (why)" where `why` is not empty.
DeviceCeilings known_ceilings(const KnownCeilings& known, const std::string& device, const std::string& why);

// "known entry: <name>" and, where `why` is not empty, " (why)".
std::string known_source(const KnownCeilings& known, const std::string& why);

// One line: device, copy TB/s, bf16 TFLOP/s, power limit / idle W and the
// energies, each with its source in brackets, and the cache file it came from.
std::string describe(const DeviceCeilings& c);

void to_json(nlohmann::json& j, const DeviceCeilings& c);
// Throws nlohmann::json::exception where a field is missing or mistyped.
void from_json(const nlohmann::json& j, DeviceCeilings& c);

}  // namespace mxmoe::cli
