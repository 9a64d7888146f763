// The C functions the Python package calls through ctypes for what is no
// tensor op: creating and releasing layers (host set-up, outside any graph),
// the dispatch table, and MXFP4 quantisation of dequantised weights. Each
// returns 0 or a positive handle on success, and on failure -(StatusCode)
// with the message in `error` (NUL-terminated, truncated to error_size).
#include <cstdio>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "layer_registry.h"
#ifdef USE_CUDA
#include "torch_allocator.h"
#endif
#include "mxmoe/checkpoint.h"
#include "mxmoe/dispatch.h"
#include "mxmoe/format.h"
#include "mxmoe/layer.h"
#include "mxmoe/load.h"

namespace {

using namespace mxmoe;

// Device layers take their memory from torch's caching allocator, in the order
// of the calling thread's current stream on their device (torch_allocator.h).
template <typename Options>
void use_torch_memory(int device, Options* o) {
#ifdef USE_CUDA
  if (device < 0) return;
  o->allocator = python::torch_cuda_allocator();
  o->stream = python::torch_current_stream(device);
#else
  (void)device;
  (void)o;
#endif
}

int64_t fail(const Status& st, char* error, size_t error_size) {
  if (error && error_size) std::snprintf(error, error_size, "%s", st.message().c_str());
  return -int64_t(st.code());
}

// activations: 0 bf16, 1 mxfp8; scale_rule: 0 ceil (kTriton), 1 OCP.
// host_threads, host_stream_tokens: LayerOptions' (host-memory layers).
int64_t create(const MoeWeightsView& v, const char* backend, int device, int activations, int scale_rule,
               int host_threads, int64_t host_stream_tokens, char* error, size_t error_size) {
  LayerOptions o;
  o.backend = backend ? backend : "auto";
  o.device = device;
  o.host_threads = host_threads;
  o.host_stream_tokens = host_stream_tokens;
  o.activations.format = activations == 1 ? ActivationFormat::kMxfp8 : ActivationFormat::kBf16;
  o.activations.mxfp8_scale_rule = scale_rule == 1 ? MxScaleRule::kOcp : MxScaleRule::kTriton;
  use_torch_memory(device, &o);
  std::unique_ptr<MoeLayer> layer;
  const Status st = MoeLayer::create(v, o, &layer);
  if (!st.ok()) return fail(st, error, error_size);
  return python::register_layer(std::move(layer));
}

int64_t write_json(const nlohmann::json& j, char* out, size_t out_size) {
  const std::string s = j.dump();
  if (s.size() + 1 > out_size) return int64_t(s.size() + 1);  // the size needed
  std::memcpy(out, s.c_str(), s.size() + 1);
  return 0;
}

}  // namespace

extern "C" {

// Dense HF-layout tensors, all in host memory or all in the memory of CUDA
// device `device` (prepared there): codes [E, 2I, H/2] (= blocks [E, 2I,
// H/32, 16]), scales [E, 2I, H/32], b13 [E, 2I] bf16, w2 codes [E, H, I/2],
// scales [E, H, I/32], b2 [E, H] bf16; router [E, H] / [E] bf16 or both null.
__attribute__((visibility("default"))) int64_t mxmoe_create_layer(
    const uint16_t* router_weight, const uint16_t* router_bias, const uint8_t* w13_codes, const uint8_t* w13_scales,
    const uint16_t* b13, const uint8_t* w2_codes, const uint8_t* w2_scales, const uint16_t* b2, int64_t experts,
    int64_t hidden, int64_t intermediate, int64_t topk, double swiglu_alpha, double swiglu_limit, const char* backend,
    int device, int activations, int scale_rule, int host_threads, int64_t host_stream_tokens, char* error,
    size_t error_size) {
  MoeWeightsView v;
  v.shape = {experts, hidden, intermediate, topk};
  v.swiglu = {float(swiglu_alpha), float(swiglu_limit)};
  v.router_weight = router_weight;
  v.router_bias = router_bias;
  v.w13 = MxMatrixView::dense(w13_codes, w13_scales, experts, 2 * intermediate, hidden);
  v.b13 = b13;
  v.b13_expert_stride = 2 * intermediate;
  v.w2 = MxMatrixView::dense(w2_codes, w2_scales, experts, hidden, intermediate);
  v.b2 = b2;
  v.b2_expert_stride = hidden;
  return create(v, backend, device, activations, scale_rule, host_threads, host_stream_tokens, error, error_size);
}

// Layer `layer` of a GPT-OSS checkpoint (folder or .safetensors file); topk <= 0
// keeps the checkpoint's.
__attribute__((visibility("default"))) int64_t mxmoe_create_layer_from_checkpoint(
    const char* path, int64_t layer, int64_t topk, const char* backend, int device, int activations, int scale_rule,
    char* error, size_t error_size) {
  std::unique_ptr<Checkpoint> ckpt;
  Status st = Checkpoint::open(path, topk > 0 ? std::optional<int64_t>(topk) : std::nullopt, &ckpt);
  if (!st.ok()) return fail(st, error, error_size);
  MoeWeightsView v;
  st = ckpt->layer(layer, &v);
  if (!st.ok()) return fail(st, error, error_size);
  return create(v, backend, device, activations, scale_rule, 0, 0, error, error_size);  // the layer copies
}

// Layers `layers` (n_layers of them; 0: every layer) of a checkpoint onto
// `device`, their handles written to `handles` (room for max_handles);
// returns how many, or -(StatusCode). `progress(done, total)` may be null.
// max_device_bytes < 0: no budget; else the layers beyond it keep their
// experts in host memory, computed on host_threads threads (0: OpenMP's).
__attribute__((visibility("default"))) int64_t mxmoe_load_layers(
    const char* path, const int64_t* layers, int64_t n_layers, int64_t topk, const char* backend, int device,
    int activations, int scale_rule, int64_t max_device_bytes, int host_threads, int64_t host_stream_tokens,
    void (*progress)(int64_t, int64_t),
    int64_t* handles, int64_t max_handles, char* error, size_t error_size) {
  LoadOptions o;
  o.backend = backend ? backend : "auto";
  o.device = device;
  if (max_device_bytes >= 0) o.max_device_bytes = max_device_bytes;
  o.host_threads = host_threads;
  o.host_stream_tokens = host_stream_tokens;
  if (topk > 0) o.topk = topk;
  o.activations.format = activations == 1 ? ActivationFormat::kMxfp8 : ActivationFormat::kBf16;
  o.activations.mxfp8_scale_rule = scale_rule == 1 ? MxScaleRule::kOcp : MxScaleRule::kTriton;
  if (progress) o.progress = progress;
  use_torch_memory(device, &o);
  std::vector<std::unique_ptr<MoeLayer>> loaded;
  const Status st = load_layers(path, std::vector<int64_t>(layers, layers + n_layers), o, &loaded);
  if (!st.ok()) return fail(st, error, error_size);
  if (int64_t(loaded.size()) > max_handles)
    return fail(Status::InvalidArgument("load_layers: more layers than handles"), error, error_size);
  for (size_t i = 0; i < loaded.size(); ++i) handles[i] = python::register_layer(std::move(loaded[i]));
  return int64_t(loaded.size());
}

// Workspace bytes that serve any forward of 1..max_tokens tokens (-1: unknown handle).
__attribute__((visibility("default"))) int64_t mxmoe_layer_workspace_bytes(int64_t handle, int64_t max_tokens) {
  const auto layer = mxmoe::python::find_layer(handle);
  return layer ? int64_t(layer->workspace_bytes(max_tokens)) : -1;
}

__attribute__((visibility("default"))) void mxmoe_release_layer(int64_t handle) {
  mxmoe::python::release_layer(handle);
}

// {"backend", "reason", "device", "experts", "hidden", "intermediate", "topk",
// "has_router", "device_bytes", "host_experts"} of a layer; returns 0, the bytes needed when out is too
// small, or -1 for an unknown handle.
__attribute__((visibility("default"))) int64_t mxmoe_layer_info(int64_t handle, char* out, size_t out_size) {
  const auto layer = mxmoe::python::find_layer(handle);
  if (!layer) return -1;
  const MoeShape& s = layer->shape();
  return write_json({{"backend", backend_name(layer->backend())},
                     {"activations", activation_format_name(layer->activations())},
                     {"reason", layer->backend_reason()},
                     {"device", layer->device()},
                     {"experts", s.experts},
                     {"hidden", s.hidden},
                     {"intermediate", s.intermediate},
                     {"topk", s.topk},
                     {"has_router", layer->has_router()},
                     {"device_bytes", layer->device_bytes()},
                     {"host_experts", layer->host_experts()},
                     {"host_stream_from", layer->host_stream_from()}},
                    out, out_size);
}

// The dispatch table for `shape` on CUDA device `device` (-1: the CPU):
// {"device": {...} or null, "compiled_archs", "cpu_kernels" (the cpu
// backend's kernel path and why, or why none), "backends": [{"name", "built",
// "why_not_built", "available", "why"}], "pick", "reason", "device_layer_bytes" (what a
// layer of the pick holds on the device, with a router; 0 on the CPU)} ("pick" null and
// "error" set when nothing can run).
__attribute__((visibility("default"))) int64_t mxmoe_dispatch_info(int64_t experts, int64_t hidden,
                                                                   int64_t intermediate, int64_t topk, int device,
                                                                   const char* backend, int activations, char* out,
                                                                   size_t out_size) {
  const MoeShape shape{experts, hidden, intermediate, topk};
  DispatchInput in = dispatch_input_for_device(backend ? backend : "auto", shape, device);
  in.activations = activations == 1 ? ActivationFormat::kMxfp8 : ActivationFormat::kBf16;
  nlohmann::json j;
  j["device"] = in.device_sm ? nlohmann::json{{"index", in.device_index}, {"name", in.device_name},
                                              {"sm", *in.device_sm}}
                             : nlohmann::json(nullptr);
  if (!in.device_sm) j["no_device_reason"] = in.no_device_reason;
  j["compiled_archs"] = in.compiled_archs;
  j["cpu_kernels"] = in.cpu_kernels;
  j["backends"] = nlohmann::json::array();
  for (BackendKind k : kAllBackends) {
    std::string why;
    const bool available = backend_available(k, in, &why);
    std::string why_not_built;
    const bool built = backend_built(k, in, &why_not_built);
    j["backends"].push_back({{"name", backend_name(k)},
                             {"built", built},
                             {"why_not_built", why_not_built},
                             {"available", available},
                             {"why", available ? "" : why}});
  }
  DispatchResult pick;
  const Status st = choose_backend(in, &pick);
  j["pick"] = st.ok() ? nlohmann::json(backend_name(pick.backend)) : nlohmann::json(nullptr);
  j[st.ok() ? "reason" : "error"] = st.ok() ? pick.reason : st.message();
  LayerPlacement one;
  const bool on_device = st.ok() && device >= 0 && pick.backend != BackendKind::kReference;
  j["device_layer_bytes"] =
      on_device && plan_placement(pick.backend, shape, true, 1, std::nullopt, &one).ok() ? one.bytes_per_device_layer : 0;
  return write_json(j, out, out_size);
}

// rows x cols floats (cols % 32 == 0) to MXFP4 by the OCP rule (scale =
// floor(log2(amax)) - 2): values that were MXFP4 (E2M1 times a power of two
// per block of 32) come back exactly.
__attribute__((visibility("default"))) int64_t mxmoe_quantize_mxfp4(const float* x, int64_t rows, int64_t cols,
                                                                    uint8_t* codes, uint8_t* scales, char* error,
                                                                    size_t error_size) {
  if (cols % kMxBlock != 0)
    return fail(Status::InvalidArgument("quantize: the row length must be a multiple of 32"), error, error_size);
  for (int64_t r = 0; r < rows; ++r)
    if (!mxfp4_quantize_row(x + r * cols, cols, codes + r * (cols / 2), scales + r * (cols / kMxBlock)))
      return fail(Status::InvalidArgument("quantize: row " + std::to_string(r) + " holds NaN or Inf"), error,
                  error_size);
  return 0;
}

}  // extern "C"
