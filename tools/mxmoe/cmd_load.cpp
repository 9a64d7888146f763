// mxmoe load: every MoE layer of a checkpoint (or those listed) onto a device,
// timed: seconds, GB/s of checkpoint bytes, the process's peak resident host
// memory and the most device memory in use beyond what was in use before.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include <fmt/format.h>
#ifdef MXMOE_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include "commands.h"
#include "mxmoe/device.h"
#include "mxmoe/load.h"

namespace mxmoe::cli {
namespace {

struct LoadCliOptions {
  std::string checkpoint, backend = "auto";
  std::vector<int64_t> layers;
  std::optional<int> device;  // unset: CUDA device 0 where there is one, else the CPU
  std::optional<int64_t> max_device_bytes;
  int host_threads = 0;
  int64_t host_stream_tokens = 0;
};

// VmHWM: the most resident memory the process has held.
int64_t peak_host_bytes() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return -1;
}

// Samples the device's used memory every millisecond while it lives.
class DevicePeak {
 public:
  explicit DevicePeak(int device) {
#ifdef MXMOE_WITH_CUDA
    if (device < 0 || cudaSetDevice(device) != cudaSuccess) return;
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) return;
    base_ = int64_t(total - free);
    peak_ = base_;
    thread_ = std::thread([this, device, total] {
      cudaSetDevice(device);
      while (!stop_) {
        size_t f = 0, t = 0;
        if (cudaMemGetInfo(&f, &t) == cudaSuccess && int64_t(total - f) > peak_) peak_ = int64_t(total - f);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
#else
    (void)device;
#endif
  }
  ~DevicePeak() { finish(); }
  int64_t finish() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return peak_ - base_;
  }

 private:
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> peak_{0};
  int64_t base_ = 0;
};

int run(const LoadCliOptions& options) {
  LoadCliOptions o = options;
  if (!o.device) o.device = list_devices().empty() ? -1 : 0;
  LoadOptions lo;
  lo.backend = o.backend;
  lo.device = *o.device;
  lo.max_device_bytes = o.max_device_bytes;
  lo.host_threads = o.host_threads;
  lo.host_stream_tokens = o.host_stream_tokens;
  lo.progress = [](int64_t done, int64_t total) { std::fprintf(stderr, "\rlayer %lld/%lld", (long long)done, (long long)total); };
  std::vector<std::unique_ptr<MoeLayer>> layers;
  LoadStats stats;
  DevicePeak device_peak(*o.device);
  const Status st = load_layers(o.checkpoint, o.layers, lo, &layers, &stats);
  const int64_t device_bytes = device_peak.finish();
  std::fprintf(stderr, "\n");
  if (!st.ok()) {
    std::fprintf(stderr, "mxmoe load: %s\n", st.message().c_str());
    return 2;
  }
  std::printf("%s", fmt::format("loaded {} layers ({}) on {}: {:.3f} s, {:.2f} GB of checkpoint bytes, {:.2f} GB/s\n",
                                layers.size(), layers.empty() ? "-" : backend_name(layers[0]->backend()),
                                *o.device < 0 ? std::string("the CPU") : fmt::format("CUDA device {}", *o.device),
                                stats.seconds, stats.bytes / 1e9, stats.bytes / 1e9 / stats.seconds)
                        .c_str());
  if (o.max_device_bytes)
    std::printf("%s", fmt::format("experts of {} layers on the GPU, {} in host memory (computed by the CPU)\n",
                                  stats.device_layers, stats.host_layers)
                          .c_str());
  std::printf("%s", fmt::format("peak host memory {:.2f} GB (pinned staging {:.2f} GB), peak device memory {:.2f} GB\n",
                                peak_host_bytes() / 1e9, stats.staging_host_bytes / 1e9, device_bytes / 1e9)
                        .c_str());
  return 0;
}

}  // namespace

Runner add_load(CLI::App& parent) {
  auto o = std::make_shared<LoadCliOptions>();
  CLI::App* sub = parent.add_subcommand("load", "load a checkpoint's MoE layers onto a device, timed");
  sub->add_option("--checkpoint", o->checkpoint, "folder or .safetensors file")->required();
  sub->add_option("--layers", o->layers, "layer indices (default: every layer)")->delimiter(',');
  sub->add_option("--device", o->device, "CUDA device index, or -1 for the CPU (default: device 0 where there is a GPU)")
      ->check(integer_at_least(-1));
  sub->add_option("--backend", o->backend, "auto or a backend name");
  sub->add_option("--max-device-bytes", o->max_device_bytes,
                  "device memory the layers may take, e.g. 40GB; the layers beyond it keep their experts in host "
                  "memory, computed by the CPU")
      ->transform(CLI::AsSizeValue(true));
  sub->add_option("--host-threads", o->host_threads, "threads of the host-memory layers' CPU work (0: OpenMP's)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--host-stream-tokens", o->host_stream_tokens,
                  "tokens from which the host-memory layers stream their experts to the GPU (0: where faster than "
                  "the CPU; -1: never)")
      ->check(integer_at_least(-1));
  return [o] { return run(*o); };
}

}  // namespace mxmoe::cli
