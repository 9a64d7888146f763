// Configuration checks of the multi-GPU layer and its creation (the NCCL
// implementation lives in src/cuda/parallel/, built when NCCL is found).
#include <algorithm>

#include <fmt/format.h>

#include "mxmoe/device.h"
#include "mxmoe/parallel.h"
#ifdef MXMOE_WITH_NCCL
#include "cuda/parallel/layers.h"
#endif

namespace mxmoe {

const char* parallel_mode_name(ParallelMode mode) {
  return mode == ParallelMode::kTensor ? "tp" : "ep";
}

Status validate_parallel_config(const ParallelConfig& c, const MoeShape& shape) {
  MXMOE_RETURN_IF_ERROR(validate_shape(shape));
  const char* mode = parallel_mode_name(c.mode);
  if (c.backend != BackendKind::kPortable)
    return Status::Unsupported(fmt::format("{}: the multi-GPU layer runs the portable backend only, not {}", mode,
                                           backend_name(c.backend)));
  if (c.mode == ParallelMode::kTensor && c.size != 1 && c.size != 2 && c.size != 4 && c.size != 8)
    return Status::InvalidArgument(fmt::format("tp: size {} is not one of 1, 2, 4, 8", c.size));
  if (c.mode == ParallelMode::kExpert) {
    if (c.size < 1 || c.size > kMaxParallelRanks)
      return Status::InvalidArgument(fmt::format("ep: size {} outside [1, {}]", c.size, kMaxParallelRanks));
    if (shape.experts % c.size != 0)
      return Status::InvalidArgument(
          fmt::format("ep: size {} does not divide the {} experts", c.size, shape.experts));
  }
  if (!c.devices.empty()) {
    if (int(c.devices.size()) != c.size)
      return Status::InvalidArgument(
          fmt::format("{}: {} devices listed for {} ranks", mode, c.devices.size(), c.size));
    std::vector<int> sorted = c.devices;
    std::sort(sorted.begin(), sorted.end());
    if (sorted.front() < 0 || std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
      return Status::InvalidArgument(fmt::format("{}: devices must be distinct and non-negative", mode));
  }
  return Status::Ok();
}

Status create_parallel_layer(const MoeWeightsView& weights, const ParallelConfig& config,
                             std::unique_ptr<ParallelLayer>* out) {
  if (!out) return Status::InvalidArgument("parallel: null output");
  MXMOE_RETURN_IF_ERROR(validate_weights(weights));
  MXMOE_RETURN_IF_ERROR(validate_parallel_config(config, weights.shape));
#ifndef MXMOE_WITH_NCCL
  return Status::Unsupported(fmt::format(
      "{}: built without NCCL (needs CUDA and nccl.h + libnccl in the CUDA toolkit at configure time)",
      parallel_mode_name(config.mode)));
#else
  ParallelConfig c = config;
  if (c.devices.empty())
    for (int r = 0; r < c.size; ++r) c.devices.push_back(r);
  std::string why;
  const std::vector<DeviceInfo> devices = list_devices(&why);
  const int needed = *std::max_element(c.devices.begin(), c.devices.end()) + 1;
  if (int(devices.size()) < needed)
    return Status::Unsupported(fmt::format("{} {}: needs CUDA devices {}; {} visible{}", parallel_mode_name(c.mode),
                                           c.size, fmt::join(c.devices, ", "), devices.size(),
                                           devices.empty() ? " (" + why + ")" : ""));
  for (int d : c.devices)
    if (devices[size_t(d)].sm < 80)
      return Status::Unsupported(fmt::format("{}: device {} ({}) is SM{}; the portable backend needs SM80+",
                                             parallel_mode_name(c.mode), d, devices[size_t(d)].name,
                                             devices[size_t(d)].sm));
  return c.mode == ParallelMode::kTensor ? parallel::create_tp_layer(weights, c, out)
                                         : parallel::create_ep_layer(weights, c, out);
#endif
}

}  // namespace mxmoe
