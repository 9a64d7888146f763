// The GPUs this process can see and the CUDA archs this binary carries code for.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mxmoe {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int sm = 0;  // major * 10 + minor, e.g. 90 for H100/H200
  int multiprocessors = 0;
  int64_t memory_bytes = 0;
  int64_t l2_bytes = 0;
};

// Empty when the build has no CUDA or the process sees no device; `why`
// (optional) receives the reason in that case.
std::vector<DeviceInfo> list_devices(std::string* why = nullptr);

// CUDA targets compiled into this binary, as CMake spelled them (e.g. "80",
// "90a"). Empty for a CPU-only build.
std::vector<std::string> compiled_cuda_archs();

}  // namespace mxmoe
