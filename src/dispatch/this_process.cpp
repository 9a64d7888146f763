// The dispatch input of this process: one of its GPUs (the first by default),
// its compiled CUDA code and the override from the caller or the environment.
#include <cstdlib>

#include <fmt/format.h>

#include "mxmoe/cpu.h"
#include "mxmoe/device.h"
#include "mxmoe/dispatch.h"

namespace mxmoe {

DispatchInput dispatch_input_for_device(std::string_view override_or_auto, const MoeShape& shape, int device) {
  DispatchInput in;
  std::string why;
  const std::vector<DeviceInfo> devices = device >= 0 ? list_devices(&why) : std::vector<DeviceInfo>{};
  if (device < 0) {
    in.no_device_reason = "the layer is on the CPU (device -1)";
  } else if (devices.empty()) {
    in.no_device_reason = why;
  } else if (size_t(device) >= devices.size()) {
    in.no_device_reason = fmt::format("CUDA device {} does not exist ({} visible)", device, devices.size());
  } else {
    in.device_sm = devices[size_t(device)].sm;
    in.device_index = devices[size_t(device)].index;
    in.device_name = devices[size_t(device)].name;
  }
  in.compiled_archs = compiled_cuda_archs();
  in.left_out = compiled_backends_left_out();
  CpuIsa isa;
  const Status cpu = choose_cpu_isa(&isa, &in.cpu_kernels);
  in.cpu_kernels_ok = cpu.ok();
  if (!cpu.ok()) in.cpu_kernels = cpu.message();
  in.shape = shape;
  // An explicit request beats the environment; "auto" is no request.
  const char* env = std::getenv("MXMOE_BACKEND");
  if (!override_or_auto.empty() && override_or_auto != "auto") {
    in.override_name = std::string(override_or_auto);
    in.override_source = "--backend / API";
  } else if (env && *env) {
    in.override_name = env;
    in.override_source = "MXMOE_BACKEND";
  } else {
    in.override_name = "auto";
  }
  return in;
}

DispatchInput dispatch_input_for_this_process(std::string_view override_or_auto, const MoeShape& shape) {
  return dispatch_input_for_device(override_or_auto, shape, 0);
}

Status choose_backend_for_this_process(std::string_view override_or_auto, const MoeShape& shape,
                                       DispatchResult* out) {
  return choose_backend(dispatch_input_for_this_process(override_or_auto, shape), out);
}

}  // namespace mxmoe
