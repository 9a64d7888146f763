// load_layers: the checkpoint's MoE layers on one device (include/mxmoe/load.h).
#include "mxmoe/load.h"

#include <chrono>

#include <fmt/format.h>

#include "mxmoe/checkpoint.h"
#include "mxmoe/prepare.h"
#ifdef MXMOE_WITH_CUDA
#include "cuda/prepare/layer_loader.h"
#endif

namespace mxmoe {
namespace {

// The CPU layers are prepared from the mapped files (the cpu backend repacks
// while it copies); each layer's pages are released once it is built.
Status load_cpu_layers(const Checkpoint& ckpt, const std::vector<int64_t>& layers, const LoadOptions& o,
                       std::vector<std::unique_ptr<MoeLayer>>* out) {
  std::vector<std::unique_ptr<MoeLayer>> done;
  for (size_t i = 0; i < layers.size(); ++i) {
    MoeWeightsView v;
    Status st = ckpt.layer(layers[i], &v);
    std::unique_ptr<MoeLayer> layer;
    if (st.ok()) st = MoeLayer::create(v, {.backend = o.backend, .device = -1, .activations = o.activations}, &layer);
    if (!st.ok()) return Status(st.code(), fmt::format("layer {}: {}", layers[i], st.message()));
    const MoeShape& s = v.shape;
    ckpt.release_pages(v.w13.codes, size_t(s.experts * 2 * s.intermediate * s.hidden / 2));
    ckpt.release_pages(v.w2.codes, size_t(s.experts * s.hidden * s.intermediate / 2));
    done.push_back(std::move(layer));
    if (o.progress) o.progress(int64_t(i + 1), int64_t(layers.size()));
  }
  *out = std::move(done);
  return Status::Ok();
}

}  // namespace

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
  Status st;
  if (o.device < 0) {
    st = load_cpu_layers(*ckpt, layers, o, out);
  } else {
#ifdef MXMOE_WITH_CUDA
    st = smxx::load_device_layers(*ckpt, layers, o, out, stats);
#else
    st = Status::Unsupported("load_layers: this build has no CUDA");
#endif
  }
  MXMOE_RETURN_IF_ERROR(st);
  if (stats) {
    stats->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    stats->bytes = int64_t(layers.size()) * original_bytes(ckpt->info().shape) +
                   int64_t(layers.size()) * 2 * ckpt->info().shape.experts * (ckpt->info().shape.hidden + 1);
  }
  return Status::Ok();
}

}  // namespace mxmoe
