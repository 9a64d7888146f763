#include "mxmoe/device.h"

#include <sstream>

#ifdef MXMOE_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace mxmoe {

std::vector<DeviceInfo> list_devices(std::string* why) {
  std::vector<DeviceInfo> out;
#ifdef MXMOE_WITH_CUDA
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (why)
      *why = err == cudaErrorInsufficientDriver ? "no usable NVIDIA driver"
             : err == cudaErrorNoDevice         ? "no CUDA device"
                                                : std::string("no CUDA device: ") + cudaGetErrorString(err);
    return out;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    out.push_back({i, p.name, p.major * 10 + p.minor, p.multiProcessorCount,
                   int64_t(p.totalGlobalMem), int64_t(p.l2CacheSize)});
  }
  if (out.empty() && why) *why = "no CUDA device visible";
#else
  if (why) *why = "built without CUDA (-DMXMOE_CUDA=OFF or no nvcc at build time)";
#endif
  return out;
}

std::vector<std::string> compiled_cuda_archs() {
  std::vector<std::string> out;
  std::stringstream ss(MXMOE_CUDA_ARCHS);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace mxmoe
