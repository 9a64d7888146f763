// Configuration checks of the multi-GPU layer and its creation (the NCCL
// implementation lives in src/cuda/parallel/, built when NCCL is found).
#include <algorithm>

#include <fmt/format.h>

#include "mxmoe/device.h"
#include "mxmoe/dispatch.h"
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
  // Both layers run the portable pipeline; tensor parallel also runs sm90
  // (each rank's shard is a whole single-GPU layer). Expert parallel runs the
  // received rows through the portable forward's top-1 path.
  const bool sm90_tp = c.backend == BackendKind::kSm90 && c.mode == ParallelMode::kTensor;
  if (c.backend != BackendKind::kPortable && !sm90_tp)
    return Status::Unsupported(fmt::format("{}: the multi-GPU layer runs portable{}, not {}", mode,
                                           c.mode == ParallelMode::kTensor ? " or sm90" : "",
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

Status choose_parallel_backend(std::string_view requested, ParallelMode mode, const MoeShape& shape,
                               BackendKind* out) {
  if (!out) return Status::InvalidArgument("parallel: null output");
  if (requested.empty() || requested == "auto") {
    DispatchResult single;
    const bool sm90 = choose_backend_for_this_process("auto", shape, &single).ok() &&
                      single.backend == BackendKind::kSm90 && mode == ParallelMode::kTensor;
    *out = sm90 ? BackendKind::kSm90 : BackendKind::kPortable;
    return Status::Ok();
  }
  const std::optional<BackendKind> kind = parse_backend_name(requested);
  if (!kind)
    return Status::InvalidArgument(
        fmt::format("unknown backend '{}'; the multi-GPU layer runs auto, portable or sm90", requested));
  *out = *kind;
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
  for (int d : c.devices) {
    const DeviceInfo& dev = devices[size_t(d)];
    if (c.backend == BackendKind::kPortable && dev.sm < 80)
      return Status::Unsupported(fmt::format("{}: device {} ({}) is SM{}; the portable backend needs SM80+",
                                             parallel_mode_name(c.mode), d, dev.name, dev.sm));
    if (c.backend == BackendKind::kSm90 && dev.sm != 90)
      return Status::Unsupported(fmt::format("{}: device {} ({}) is SM{}; the sm90 backend needs SM90",
                                             parallel_mode_name(c.mode), d, dev.name, dev.sm));
  }
#ifndef MXMOE_WITH_SM90
  if (c.backend == BackendKind::kSm90)
    return Status::Unsupported("tp: this build has no sm_90a code for the sm90 backend");
#endif
  return c.mode == ParallelMode::kTensor ? parallel::create_tp_layer(weights, c, out)
                                         : parallel::create_ep_layer(weights, c, out);
#endif
}

}  // namespace mxmoe
