// load_layers: the checkpoint's MoE layers on one device, or split between a
// GPU and host memory under a budget (include/mxmoe/load.h).
#include "mxmoe/load.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "cpu/huge_pages.h"
#include "mxmoe/checkpoint.h"
#include "mxmoe/dispatch.h"
#include "mxmoe/prepare.h"
#include "prepare/device_image.h"
#ifdef MXMOE_WITH_CUDA
#include "cuda/prepare/layer_loader.h"
#endif

namespace mxmoe {
namespace {

// Layers prepared on the CPU from the mapped files (the cpu backend repacks
// while it copies), each layer's pages released once it is built: CPU layers
// (device -1) or host-memory layers of GPU device o.device. `progress` is
// told (first + i + 1, total) after layer i.
Status load_host_layers(const Checkpoint& ckpt, const std::vector<int64_t>& layers, const LoadOptions& o,
                        int64_t first, int64_t total, std::vector<std::unique_ptr<MoeLayer>>* out) {
  LayerOptions lo;
  lo.backend = o.device < 0 ? o.backend : "cpu";
  lo.device = o.device;
  lo.activations = o.activations;
  lo.host_threads = o.host_threads;
  lo.host_chunk_tokens = o.host_chunk_tokens;
  lo.host_stream_tokens = o.host_stream_tokens;
  for (size_t i = 0; i < layers.size(); ++i) {
    MoeWeightsView v;
    Status st = ckpt.layer(layers[i], &v);
    std::unique_ptr<MoeLayer> layer;
    if (st.ok()) st = MoeLayer::create(v, lo, &layer);
    if (!st.ok()) return Status(st.code(), fmt::format("layer {}: {}", layers[i], st.message()));
    const MoeShape& s = v.shape;
    ckpt.release_pages(v.w13.codes, size_t(s.experts * 2 * s.intermediate * s.hidden / 2));
    ckpt.release_pages(v.w2.codes, size_t(s.experts * s.hidden * s.intermediate / 2));
    out->push_back(std::move(layer));
    if (o.progress) o.progress(first + int64_t(i + 1), total);
  }
  return Status::Ok();
}

// The GPU backend a load onto CUDA device o.device prepares for (kCpu where
// "cpu" is asked for: every layer a host-memory layer).
Status device_backend(const MoeShape& shape, const LoadOptions& o, BackendKind* out) {
  DispatchInput in = dispatch_input_for_device(o.backend, shape, o.device);
  in.activations = o.activations.format;
  DispatchResult pick;
  MXMOE_RETURN_IF_ERROR(choose_backend(in, &pick));
  *out = pick.backend;
  return Status::Ok();
}

// A load onto CUDA device o.device: the first layers that fit the budget
// there, the rest host-memory layers, appended to `out` (empty at the call).
Status load_split(const Checkpoint& ckpt, const std::vector<int64_t>& layers, const LoadOptions& o,
                  std::vector<std::unique_ptr<MoeLayer>>* out, LoadStats* stats) {
  const int64_t n = int64_t(layers.size());
  BackendKind kind = BackendKind::kCpu;
  MXMOE_RETURN_IF_ERROR(device_backend(ckpt.info().shape, o, &kind));
  LayerPlacement place{n, 0, 0, 0};
  // Without a GPU backend (reference) the device loader's MoeLayer::create says why.
  if ((kind == BackendKind::kCpu || o.max_device_bytes) && kind != BackendKind::kReference)
    MXMOE_RETURN_IF_ERROR(plan_placement(kind, ckpt.info().shape, true, n, o.max_device_bytes, &place));
  MXMOE_RETURN_IF_ERROR(check_host_memory(place, cpu::host_memory_available()));
  const std::vector<int64_t> on_device(layers.begin(), layers.begin() + place.device_layers);
  const std::vector<int64_t> in_host(layers.begin() + place.device_layers, layers.end());
  if (!on_device.empty()) {
#ifdef MXMOE_WITH_CUDA
    LoadOptions od = o;
    if (o.progress) od.progress = [&](int64_t d, int64_t) { o.progress(d, n); };
    MXMOE_RETURN_IF_ERROR(smxx::load_device_layers(ckpt, on_device, od, out, stats));
#else
    return Status::Unsupported("load_layers: this build has no CUDA");
#endif
  }
  MXMOE_RETURN_IF_ERROR(load_host_layers(ckpt, in_host, o, place.device_layers, n, out));
  if (stats) {
    stats->device_layers = place.device_layers;
    stats->host_layers = place.host_layers;
  }
  return Status::Ok();
}

}  // namespace

Status plan_placement(BackendKind backend, const MoeShape& shape, bool has_router, int64_t layers,
                      std::optional<int64_t> max_device_bytes, LayerPlacement* out) {
  if (layers < 0) return Status::InvalidArgument(fmt::format("placement: {} layers", layers));
  if (max_device_bytes && *max_device_bytes < 0)
    return Status::InvalidArgument(fmt::format("load_layers: max_device_bytes = {} is negative", *max_device_bytes));
  if (backend == BackendKind::kReference)
    return Status::InvalidArgument("placement: the reference backend has no device layers");
  LayerPlacement p;
  p.bytes_per_host_layer = make_plan(BackendKind::kCpu, shape).prepared_bytes() +
                           (has_router ? 2 * shape.experts * (shape.hidden + 1) : 0);
  if (backend != BackendKind::kCpu) {
    // One allocation a piece, of at least 256 bytes (smxx::DeviceBuffer).
    for (int64_t piece : image_piece_bytes(make_plan(backend, shape), scale_image_of(backend), has_router))
      if (piece > 0) p.bytes_per_device_layer += std::max<int64_t>(piece, 256);
    p.device_layers = max_device_bytes ? std::min(layers, *max_device_bytes / p.bytes_per_device_layer) : layers;
  }
  p.host_layers = layers - p.device_layers;
  *out = p;
  return Status::Ok();
}

Status check_host_memory(const LayerPlacement& p, int64_t available_bytes) {
  const int64_t need = p.host_layers * p.bytes_per_host_layer;
  if (available_bytes < 0 || need <= available_bytes) return Status::Ok();
  return Status::OutOfMemory(fmt::format(
      "load_layers: {} layers' experts in host memory need {:.2f} GB; the host has {:.2f} GB available "
      "(MemAvailable){}",
      p.host_layers, need / 1e9, available_bytes / 1e9,
      p.device_layers > 0 || p.bytes_per_device_layer > 0 ? "; a larger max_device_bytes keeps more on the GPU" : ""));
}

Status load_layers(const std::string& path, const std::vector<int64_t>& asked, const LoadOptions& o,
                   std::vector<std::unique_ptr<MoeLayer>>* out, LoadStats* stats) {
  if (!out) return Status::InvalidArgument("load_layers: null output");
  const auto t0 = std::chrono::steady_clock::now();
  CheckpointOptions co;
  co.topk = o.topk;
  std::unique_ptr<Checkpoint> ckpt;
  MXMOE_RETURN_IF_ERROR(Checkpoint::open(path, co, &ckpt));
  const int64_t n = ckpt->info().layers;
  std::vector<int64_t> layers = asked;
  if (layers.empty())
    for (int64_t i = 0; i < n; ++i) layers.push_back(i);
  for (int64_t l : layers)
    if (l < 0 || l >= n) return Status::InvalidArgument(fmt::format("{}: layer {} is out of range [0, {})", path, l, n));
  out->clear();
  if (o.device < -1)
    return Status::InvalidArgument(fmt::format("load_layers: device {} is neither a CUDA device index nor -1", o.device));
  if (o.max_device_bytes && o.device < 0)
    return Status::InvalidArgument("load_layers: max_device_bytes is for GPU loads (device >= 0)");
  if (o.max_device_bytes && *o.max_device_bytes < 0)  // before the dispatch, which may find no GPU
    return Status::InvalidArgument(fmt::format("load_layers: max_device_bytes = {} is negative", *o.max_device_bytes));
  std::vector<std::unique_ptr<MoeLayer>> done;  // handed out only whole: after an error nothing is left
  if (o.device < 0) {
    LayerPlacement all_host;
    MXMOE_RETURN_IF_ERROR(
        plan_placement(BackendKind::kCpu, ckpt->info().shape, true, int64_t(layers.size()), std::nullopt, &all_host));
    MXMOE_RETURN_IF_ERROR(check_host_memory(all_host, cpu::host_memory_available()));
    MXMOE_RETURN_IF_ERROR(load_host_layers(*ckpt, layers, o, 0, int64_t(layers.size()), &done));
  } else {
    MXMOE_RETURN_IF_ERROR(load_split(*ckpt, layers, o, &done, stats));
  }
  *out = std::move(done);
  if (stats) {
    stats->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    stats->bytes = int64_t(layers.size()) * original_bytes(ckpt->info().shape) +
                   int64_t(layers.size()) * 2 * ckpt->info().shape.experts * (ckpt->info().shape.hidden + 1);
    if (o.device < 0) stats->host_layers = int64_t(layers.size());
  }
  return Status::Ok();
}

}  // namespace mxmoe
