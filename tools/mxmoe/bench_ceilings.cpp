#include "bench_ceilings.h"

#include <fmt/format.h>

#ifdef MXMOE_WITH_CUDA
#include <cuda_runtime.h>

#include <fstream>
#include <memory>

#include "ceilings_cache.h"
#include "cuda/common/board_energy.h"
#include "cuda/common/board_power.h"
#include "measure_ceilings.h"
#endif

namespace mxmoe::cli {

#ifndef MXMOE_WITH_CUDA
DeviceCeilings bench_ceilings(int device, const std::string&, bool, std::string*) {
  return known_ceilings(kH200Ceilings, fmt::format("GPU {}", device), "this build has no CUDA");
}
#else
namespace {

constexpr const char* kMeasured = "measured";
constexpr const char* kNvml = "NVML";
// The idle draw's window: three or so of the energy counter's ~100 ms steps.
constexpr double kIdleWindowS = 0.3;

Status cuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Status::CudaError(fmt::format("{}: {}", what, cudaGetErrorString(err)));
}

// The kernel module's version line names the driver exactly (580.159.04 and
// its build); CUDA's driver version only the CUDA release it serves.
std::string driver_version() {
  std::ifstream f("/proc/driver/nvidia/version");
  std::string line;
  if (f && std::getline(f, line) && !line.empty()) return line;
  int version = 0;
  if (cudaDriverGetVersion(&version) != cudaSuccess) return "unknown";
  return fmt::format("CUDA driver {}", version);
}

Status device_identity(int device, DeviceIdentity* id, int* sm_major) {
  cudaDeviceProp prop{};
  MXMOE_RETURN_IF_ERROR(cuda(cudaGetDeviceProperties(&prop, device), "device properties"));
  char bus_id[32] = {};
  MXMOE_RETURN_IF_ERROR(cuda(cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, device), "PCI bus id"));
  const auto* u = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
  // As nvidia-smi prints it: GPU-8-4-4-4-12 hex digits.
  id->uuid = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) id->uuid += '-';
    id->uuid += fmt::format("{:02x}", u[i]);
  }
  id->name = prop.name;
  id->pci_bus_id = bus_id;
  id->driver = driver_version();
  *sm_major = prop.major;
  return Status::Ok();
}

// This process's context on `device` (the current device is kept).
Status open_context(int device) {
  int previous = 0;
  MXMOE_RETURN_IF_ERROR(cuda(cudaGetDevice(&previous), "cudaGetDevice"));
  MXMOE_RETURN_IF_ERROR(cuda(cudaSetDevice(device), "cudaSetDevice"));
  const Status s = cuda(cudaFree(nullptr), "context");
  MXMOE_RETURN_IF_ERROR(cuda(cudaSetDevice(previous), "cudaSetDevice"));
  return s;
}

DeviceCeilings measure(int device, const std::string& name, int sm_major) {
  DeviceCeilings c = known_ceilings(kH200Ceilings, name, "");
  auto fallback = [](const Status& s) { return known_source(kH200Ceilings, s.message()); };
  // The idle draw first, as bench/power_ceilings reads it: with a context on
  // the board, before this process's first kernel and large allocation.
  std::string why;
  const Status context = open_context(device);
  if (!context.ok()) {
    c.power_limit_source = c.idle_source = fallback(context);
  } else if (const auto counter = smxx::BoardEnergyCounter::open(device, &why)) {
    double watts = 0;
    const Status limit = counter->read_power_limit_w(&watts);
    c.power_limit_w = limit.ok() ? watts : c.power_limit_w;
    c.power_limit_source = limit.ok() ? kNvml : fallback(limit);
    const Status idle = smxx::measure_idle_power(*counter, kIdleWindowS, &watts);
    c.idle_w = idle.ok() ? watts : c.idle_w;
    c.idle_source = idle.ok() ? kNvml : fallback(idle);
  } else {
    c.power_limit_source = c.idle_source = known_source(kH200Ceilings, "no NVML: " + why);
  }
  double rate = 0;
  const Status read = measure_read_rate(device, &rate);
  c.copy_bytes_per_s = read.ok() ? rate : c.copy_bytes_per_s;
  c.copy_source = read.ok() ? kMeasured : fallback(read);
  const Status gemm = measure_bf16_gemm_rate(device, &rate);
  c.bf16_flops_per_s = gemm.ok() ? rate : c.bf16_flops_per_s;
  c.gemm_source = gemm.ok() ? kMeasured : fallback(gemm);
  if (sm_major * 10 == kKnownEnergySm) {
    c.energy_source = known_source(kH200Ceilings, "every SM90 board; bench/power_ceilings measures a board's own");
  } else {
    c.joules_per_byte_read = c.joules_per_bf16_flop = 0;
    c.energy_source = fmt::format("none: measured on SM{} only (bench/power_ceilings measures them)", kKnownEnergySm);
  }
  return c;
}

bool measured_in_full(const DeviceCeilings& c) {
  return c.copy_source == kMeasured && c.gemm_source == kMeasured && c.power_limit_source == kNvml &&
         c.idle_source == kNvml;
}

}  // namespace

DeviceCeilings bench_ceilings(int device, const std::string& cache_dir, bool remeasure, std::string* note) {
  note->clear();
  DeviceIdentity id;
  int sm_major = 0;
  if (const Status s = device_identity(device, &id, &sm_major); !s.ok())
    return known_ceilings(kH200Ceilings, fmt::format("GPU {}", device), s.message());
  DeviceCeilings c;
  if (!remeasure && !cache_dir.empty() && load_cached_ceilings(cache_dir, id, &c)) return c;
  c = measure(device, id.name, sm_major);
  if (cache_dir.empty()) {
    *note = "ceilings not kept: neither XDG_CACHE_HOME nor HOME is set";
  } else if (!measured_in_full(c)) {
    *note = "ceilings not kept: some could not be measured";
  } else if (const Status s = store_ceilings(cache_dir, id, c); !s.ok()) {
    *note = "ceilings not kept: " + s.message();
  }
  return c;
}
#endif

}  // namespace mxmoe::cli
