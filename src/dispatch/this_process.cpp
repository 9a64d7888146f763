// The dispatch input of this process: its first GPU, its compiled CUDA code and
// the override from the caller or the environment.
#include <cstdlib>

#include "mxmoe/device.h"
#include "mxmoe/dispatch.h"

namespace mxmoe {

DispatchInput dispatch_input_for_this_process(std::string_view override_or_auto,
                                              const MoeShape& shape) {
  DispatchInput in;
  std::string why;
  const std::vector<DeviceInfo> devices = list_devices(&why);
  if (devices.empty()) {
    in.no_device_reason = why;
  } else {
    in.device_sm = devices[0].sm;
    in.device_index = devices[0].index;
    in.device_name = devices[0].name;
  }
  in.compiled_archs = compiled_cuda_archs();
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

Status choose_backend_for_this_process(std::string_view override_or_auto, const MoeShape& shape,
                                       DispatchResult* out) {
  return choose_backend(dispatch_input_for_this_process(override_or_auto, shape), out);
}

}  // namespace mxmoe
