// The ceilings of the GPU `mxmoe bench` times a forward on: this board's
// entry in the cache (ceilings_cache.h), else measured at the start of the
// bench, in about a second: the copy and bf16 GEMM rates (measure_ceilings.h),
// the power limit and the idle draw from NVML (board_energy.h). A figure that
// cannot be measured comes from the H200's known entry (device_ceilings.h),
// its source saying why; so do the energies a byte and a FLOP cost on an SM90
// board, and no other board has them.
#pragma once

#include <string>

#include "device_ceilings.h"

namespace mxmoe::cli {

// `cache_dir` empty: no cache. `remeasure`: measure whatever the cache holds.
// Only ceilings measured in full are kept; *note says where they could not be.
DeviceCeilings bench_ceilings(int device, const std::string& cache_dir, bool remeasure, std::string* note);

}  // namespace mxmoe::cli
