// Every MoE layer of a GPT-OSS checkpoint, ready on one device: the files are
// read with parallel reads into pinned staging (two layers' worth of host
// memory), each layer uploaded while the next is read, and prepared on the
// GPU (src/cuda/prepare/), or on the CPU for device -1.
//
//   std::vector<std::unique_ptr<MoeLayer>> layers;
//   load_layers("/models/gpt-oss-20b", {}, {.device = 0}, &layers);
//
// Memory besides the layers themselves: on a GPU, two pinned host buffers of
// one layer's checkpoint bytes each and one such buffer on the device (from
// options.allocator, freed at the end); on the CPU the layers are prepared
// from the mapped files.
// Errors name the layer (a truncated or inconsistent checkpoint, a NaN scale,
// a device out of memory); after an error no layer and no buffer is left.
//
// A GPU that cannot hold every layer: with max_device_bytes, the first layers
// whose experts fit go on the GPU and the others become host-memory layers
// (include/mxmoe/layer.h: experts in host memory, computed by the CPU, x and
// y on the GPU), so one model runs across both:
//   load_layers(path, {}, {.device = 0, .max_device_bytes = 40e9}, &layers);
//   // layers[i]->host_experts() says where layer i's experts went
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mxmoe/layer.h"

namespace mxmoe {

struct LoadOptions {
  std::string backend = "auto";  // as LayerOptions
  int device = -1;               // CUDA device index, or -1 for the CPU
  std::optional<int64_t> topk;   // overrides the checkpoint's
  ActivationOptions activations;
  // Called after each layer with (layers done, layers asked for); may be empty.
  std::function<void(int64_t done, int64_t total)> progress;
  int read_threads = 8;  // parallel reads of one layer's bytes (NVMe rewards several in flight)
  // As LayerOptions: where the layers' and the staging's device memory come
  // from, and the stream the uploads and preparation run on.
  std::shared_ptr<DeviceAllocator> allocator;
  CUstream_st* stream = nullptr;
  // GPU loads: the device bytes the layers' prepared weights may take (none:
  // every layer goes on the GPU; 0: every layer's experts stay in host
  // memory). The load's own staging, freed at its end, is not counted.
  std::optional<int64_t> max_device_bytes;
  // Host-memory layers: LayerOptions' host_threads, host_chunk_tokens and
  // host_stream_tokens.
  int host_threads = 0;
  int64_t host_chunk_tokens = 256;
  int64_t host_stream_tokens = 0;
};

struct LoadStats {
  double seconds = 0;
  int64_t bytes = 0;               // checkpoint bytes of the layers loaded
  int64_t staging_host_bytes = 0;  // pinned host staging held (GPU loads)
  int64_t device_layers = 0;       // layers whose experts are on the GPU (all of them, without a budget)
  int64_t host_layers = 0;         // host-memory layers
};

// How a GPU load splits its layers: the first `device_layers` on the GPU, at
// `bytes_per_device_layer` each, and the rest in host memory, at
// `bytes_per_host_layer` each (the cpu backend's packed weights).
struct LayerPlacement {
  int64_t device_layers = 0;
  int64_t host_layers = 0;
  int64_t bytes_per_device_layer = 0;
  int64_t bytes_per_host_layer = 0;
};

// OutOfMemory, saying how much is needed and what there is, when the
// placement's host layers need more than `available_bytes` (the host's
// MemAvailable; negative: unknown, never refused). A load checks this
// before it reads a layer: with overcommit the kernel would hand out the
// memory and kill the process once it is touched.
Status check_host_memory(const LayerPlacement& placement, int64_t available_bytes);

// The split of `layers` layers of `shape` under `max_device_bytes` (none:
// all on the GPU) for the GPU backend `backend` (BackendKind::kCpu: all in
// host memory): as many as fit, the bytes of each from the backend's
// preparation plan (the exact bytes its layer asks the allocator for).
Status plan_placement(BackendKind backend, const MoeShape& shape, bool has_router, int64_t layers,
                      std::optional<int64_t> max_device_bytes, LayerPlacement* out);

// `layers` empty: every MoE layer of the checkpoint, in order; else those listed.
Status load_layers(const std::string& path, const std::vector<int64_t>& layers, const LoadOptions& options,
                   std::vector<std::unique_ptr<MoeLayer>>* out, LoadStats* stats = nullptr);

}  // namespace mxmoe
