// The board's energy counter through libnvidia-ml, opened at run time (see
// board_energy.h). The few declarations used are NVML's C ABI: every call
// returns an int status (0 = success), and a device handle is a pointer.
#include "cuda/common/board_energy.h"

#include <dlfcn.h>

#include <cuda_runtime.h>
#include <fmt/format.h>

namespace mxmoe::smxx {

struct BoardEnergyCounter::Api {
  using Init = int (*)();
  using Shutdown = int (*)();
  using HandleByPciBusId = int (*)(const char*, void**);
  using TotalEnergy = int (*)(void*, unsigned long long*);
  using PowerLimit = int (*)(void*, unsigned*);
  using ErrorString = const char* (*)(int);
  void* lib = nullptr;
  Shutdown shutdown = nullptr;
  TotalEnergy total_energy = nullptr;
  PowerLimit power_limit = nullptr;  // optional
  ErrorString error_string = nullptr;
  void* device = nullptr;
  bool initialised = false;
  ~Api() {
    if (initialised) shutdown();
    if (lib) dlclose(lib);
  }
  std::string error(int rc) const {
    return error_string ? fmt::format("{} ({})", error_string(rc), rc) : fmt::format("NVML error {}", rc);
  }
};

BoardEnergyCounter::BoardEnergyCounter(std::unique_ptr<Api> api) : api_(std::move(api)) {}
BoardEnergyCounter::~BoardEnergyCounter() = default;

std::unique_ptr<BoardEnergyCounter> BoardEnergyCounter::open(int device, std::string* why) {
  auto api = std::make_unique<Api>();
  api->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!api->lib) {
    *why = fmt::format("libnvidia-ml.so.1 not loaded: {}", dlerror());
    return nullptr;
  }
  auto sym = [&](const char* name) { return dlsym(api->lib, name); };
  const auto init = reinterpret_cast<Api::Init>(sym("nvmlInit_v2"));
  api->shutdown = reinterpret_cast<Api::Shutdown>(sym("nvmlShutdown"));
  const auto by_bus = reinterpret_cast<Api::HandleByPciBusId>(sym("nvmlDeviceGetHandleByPciBusId_v2"));
  api->total_energy = reinterpret_cast<Api::TotalEnergy>(sym("nvmlDeviceGetTotalEnergyConsumption"));
  api->error_string = reinterpret_cast<Api::ErrorString>(sym("nvmlErrorString"));
  api->power_limit = reinterpret_cast<Api::PowerLimit>(sym("nvmlDeviceGetEnforcedPowerLimit"));
  if (!init || !api->shutdown || !by_bus || !api->total_energy) {
    *why = "libnvidia-ml.so.1 lacks the NVML calls used (init, device by PCI bus id, total energy)";
    return nullptr;
  }
  if (const int rc = init(); rc != 0) {
    *why = "nvmlInit: " + api->error(rc);
    return nullptr;
  }
  api->initialised = true;
  // The CUDA device's PCI address names the same board to NVML, whatever the
  // two libraries' device orders (CUDA_VISIBLE_DEVICES renumbers CUDA's).
  char bus_id[32] = {};
  if (const cudaError_t err = cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, device); err != cudaSuccess) {
    *why = fmt::format("cudaDeviceGetPCIBusId({}): {}", device, cudaGetErrorString(err));
    return nullptr;
  }
  if (const int rc = by_bus(bus_id, &api->device); rc != 0) {
    *why = fmt::format("NVML device at {}: {}", bus_id, api->error(rc));
    return nullptr;
  }
  std::unique_ptr<BoardEnergyCounter> counter(new BoardEnergyCounter(std::move(api)));
  uint64_t mj = 0;
  if (const Status s = counter->read_mj(&mj); !s.ok()) {
    *why = s.message();
    return nullptr;
  }
  return counter;
}

Status BoardEnergyCounter::read_mj(uint64_t* mj) const {
  unsigned long long v = 0;
  if (const int rc = api_->total_energy(api_->device, &v); rc != 0)
    return Status::Unsupported("NVML total energy: " + api_->error(rc));
  *mj = v;
  return Status::Ok();
}

Status BoardEnergyCounter::read_power_limit_w(double* watts) const {
  if (!api_->power_limit) return Status::Unsupported("libnvidia-ml.so.1 lacks nvmlDeviceGetEnforcedPowerLimit");
  unsigned milliwatts = 0;
  if (const int rc = api_->power_limit(api_->device, &milliwatts); rc != 0)
    return Status::Unsupported("NVML enforced power limit: " + api_->error(rc));
  *watts = milliwatts / 1e3;
  return Status::Ok();
}

}  // namespace mxmoe::smxx
