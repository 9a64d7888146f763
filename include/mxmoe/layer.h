// The engine-facing MoE layer: weights prepared once for one device, then
// forwards on that device's pointers, enqueued on the caller's stream.
//
// At weight-loading time (an engine's process_weights_after_loading):
//   MoeLayer::create(view, {.backend = "auto", .device = rank_device}, &layer)
//   workspace = alloc(layer->workspace_bytes(max_tokens))
// At each forward:
//   layer->forward({.x = x, .tokens = T, .y = y}, workspace, bytes, stream)
//
// Device layers (device >= 0): every pointer is memory of that CUDA device
// (device or managed memory); the forward enqueues its kernels on `stream`
// (a stream of that device; null means the legacy default stream) and
// returns: no host synchronisation, no allocation, no host-to-device copy, so
// it can be captured in a CUDA graph. The weights are copied (prepared) at
// create: the view may be freed afterwards. The weights may be host memory or
// memory of the layer's device (every tensor in one place; found with
// cudaPointerGetAttributes): device weights are checked and prepared there by
// kernels, with no copy through host memory and no device memory beyond the
// layer's own (create first waits for the device's pending work, the
// writes of the weights); weights on another device are refused. Its device
// memory comes from options.allocator (include/mxmoe/allocator.h), in
// options.stream's order: the weights' image, one allocation a tensor, and
// while create runs the device checks' 64 bytes and, for host weights, a
// staging copy of them (freed before create returns).
// CPU layers (device = -1): every pointer is host memory, `stream` is ignored
// and the forward runs to completion before it returns.
// Host-memory layers (backend "cpu" on a CUDA device; dispatch never picks
// one itself): the experts live in host memory, packed for the cpu backend,
// and the CPU computes them; x, the routing and y are memory of the layer's
// device, as for a device layer (it needs no workspace: 0 bytes). The
// forward enqueues on `stream` the copies of x and the routing into the
// layer's pinned staging, a host function that runs the cpu backend on
// host_threads threads, and the copy of y back, a piece of host_chunk_tokens
// tokens at a time: no host synchronisation, and a CUDA graph can record it
// (memcpy and host nodes). A thread that spins waiting for the stream takes
// a core from that work (docs/PERF.md, "Experts in host memory").
// From host_stream_tokens tokens on, a forward copies every expert over PCIe
// into its workspace instead (device memory, forward_workspace_bytes),
// re-lays them there for the GPU kernels and runs those: the same bits as a
// device layer of that backend on the same routing.
// Those forwards share the layer's one staging: forwards on different streams
// (or graphs holding them) must be ordered by the caller, e.g. by events. An
// out-of-range id makes its token's row NaN, as on a GPU backend.
//
// Threads: a layer is immutable after create. Its const members may be called
// from several threads at once, each with its own workspace (and, on a GPU,
// its own stream or an order between them): a forward writes only y and the
// workspace. Destroy the layer only once no forward using it is in flight:
// with a stream-ordered allocator its memory goes back in options.stream's
// order, which need not follow forwards enqueued on other streams.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "mxmoe/allocator.h"
#include "mxmoe/backend.h"
#include "mxmoe/moe.h"
#include "mxmoe/status.h"

namespace mxmoe {

enum class OutputDtype { kBf16, kFp32 };

struct LayerOptions {
  // "auto" (MXMOE_BACKEND when set, else the dispatch table: mxmoe/dispatch.h)
  // or a backend name ("cpu", "portable", "sm90", ...).
  std::string backend = "auto";
  // CUDA device index, or -1 for the CPU.
  int device = -1;
  // What the expert GEMMs consume; backends of another format are passed
  // over (auto) or refused (forced). bf16: every backend but sm100 and sm120;
  // mxfp8: reference (the fp64 oracle, on the CPU), sm100, sm120.
  ActivationOptions activations;
  // Device layers: where their device memory comes from (null:
  // cuda_malloc_allocator()), and the stream that create's work (staging,
  // preparation, checks) is enqueued on and the memory is allocated and, when
  // the layer is destroyed, given back in (null: the legacy default stream).
  // create returns once that work is complete.
  std::shared_ptr<DeviceAllocator> allocator;
  CUstream_st* stream = nullptr;
  // Host-memory layers: the OpenMP threads a forward's CPU work runs on (0:
  // omp_get_max_threads(), i.e. OMP_NUM_THREADS or every core), and the
  // tokens the pinned staging holds (about 6 H + 8 k bytes a token: 17 KB at
  // gpt-oss's H = 2880); a longer forward runs in pieces of that many, each
  // reading the experts it touches again.
  int host_threads = 0;
  int64_t host_chunk_tokens = 256;
  // Host-memory layers: the tokens from which a forward streams the experts
  // over PCIe to the GPU and runs them there (the portable or sm90 kernels,
  // whichever dispatch picks for the device) instead of computing them on the
  // CPU. 0: where that is faster, stream_from_tokens() of the layer's shape
  // and host_threads (src/api/host_stream_heuristics.h); -1: never. Such a
  // forward needs a workspace of about the layer's GPU image (1.7 GB at
  // gpt-oss-120b's shape) and pins the experts' host memory at create.
  int64_t host_stream_tokens = 0;
};

struct LayerForwardArgs {
  const uint16_t* x = nullptr;  // bf16 [tokens, H]; 16-byte aligned on a GPU
  int64_t x_row_stride = 0;     // elements between rows of x; 0 means H. A multiple of 8, >= H
  int64_t tokens = 0;           // T >= 0; T = 0 does nothing
  // The caller's routing, dense [T, k]: expert ids and their weights (used
  // as given: softmaxed or not). Both null: the layer's router runs on x.
  // On the CPU an id outside [0, E) is an InvalidArgument. On a GPU it is
  // checked by a kernel (a host check would need a synchronisation): each
  // token with such an id gets a NaN row in y, and no other token changes.
  const int32_t* topk_ids = nullptr;
  const float* topk_weights = nullptr;
  void* y = nullptr;            // [T, H] dense, of y_dtype; 16-byte aligned on a GPU
  OutputDtype y_dtype = OutputDtype::kBf16;
};

class MoeLayer {
 public:
  // Validates the weights (shape, extents, no 0xFF scale, finite biases and
  // router) and prepares them for the chosen backend on options.device.
  // Errors name the option, tensor or value at fault: an unknown backend, a
  // backend that cannot run on that device (Unsupported, with the reason), a
  // device that does not exist.
  static Status create(const MoeWeightsView& weights, const LayerOptions& options,
                       std::unique_ptr<MoeLayer>* out);

  virtual ~MoeLayer() = default;
  MoeLayer(const MoeLayer&) = delete;
  MoeLayer& operator=(const MoeLayer&) = delete;

  BackendKind backend() const { return backend_; }
  // One line: "<backend>: <why it was chosen>" (dispatch's reason).
  const std::string& backend_reason() const { return reason_; }
  int device() const { return device_; }  // -1: the CPU
  const MoeShape& shape() const { return shape_; }
  bool has_router() const { return has_router_; }  // false: every forward needs routing
  ActivationFormat activations() const { return activations_; }

  // Device memory the layer holds (its prepared weights, one allocation a
  // tensor, as asked of the allocator); 0 for a CPU or host-memory layer.
  virtual size_t device_bytes() const { return 0; }
  // Whether the experts live in host memory while x and y are on a GPU (a
  // host-memory layer: backend cpu, device >= 0).
  bool host_experts() const { return backend_ == BackendKind::kCpu && device_ >= 0; }
  // A host-memory layer's forwards of at least this many tokens stream the
  // experts to the GPU (LayerOptions::host_stream_tokens); 0: none do.
  virtual int64_t host_stream_from() const { return 0; }

  // Workspace bytes that serve any forward of 1..max_tokens tokens (host work
  // proportional to max_tokens: call it once, at set-up).
  size_t workspace_bytes(int64_t max_tokens) const;
  // Workspace bytes a forward of exactly `tokens` tokens needs (cheap; at most
  // workspace_bytes(tokens)).
  virtual size_t forward_workspace_bytes(int64_t tokens) const = 0;

  // y = MoE(x). `workspace` holds at least forward_workspace_bytes(tokens)
  // bytes, 256-byte aligned (it may be null where that is 0); its contents
  // need not be kept between calls.
  // Errors (nothing is enqueued then) name the argument: null, misaligned or
  // wrongly placed pointers (host memory for a device layer, another
  // device's memory), a row stride below H, a workspace too small for T,
  // routing given by half.
  virtual Status forward(const LayerForwardArgs& args, void* workspace, size_t workspace_size,
                         CUstream_st* stream) const = 0;

 protected:
  MoeLayer(BackendKind backend, std::string reason, int device, const MoeShape& shape, bool has_router,
           ActivationFormat activations = ActivationFormat::kBf16)
      : backend_(backend), reason_(std::move(reason)), device_(device), shape_(shape), has_router_(has_router),
        activations_(activations) {}
  // The checks every layer makes before its own: T < 0, routing without its
  // other half, a missing router, null x or y, and for T > 0 a workspace of
  // fewer than forward_workspace_bytes(T) bytes.
  Status check_common(const LayerForwardArgs& args, const void* workspace, size_t workspace_size) const;

 private:
  BackendKind backend_;
  std::string reason_;
  int device_;
  MoeShape shape_;
  bool has_router_;
  ActivationFormat activations_;
};

// Rejects weights whose values would poison every output they touch: an E8M0
// scale byte 0xFF (NaN) in w13 or w2, or an Inf/NaN router weight, router
// bias or expert bias. Names the tensor, expert, row and block or entry.
Status validate_weight_values(const MoeWeightsView& weights);

}  // namespace mxmoe
