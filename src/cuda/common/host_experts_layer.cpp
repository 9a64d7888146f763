// The host-memory layer: each forward is, per piece of at most C tokens,
//   copy x's rows (and the routing) device -> pinned staging,
//   a host function: the cpu backend on the staging,
//   copy y's rows pinned staging -> device,
// all on the caller's stream, so the stream's order is the only
// synchronisation and a graph capture records copy and host nodes. The host
// function's argument says what the piece is (its rows, its y dtype, whether
// routing came with it) and nothing of the forward's pointers: one immutable
// argument per kind of piece, kept by the layer, serves every forward and
// every graph that recorded one.
#include "api/host_experts_layer.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <omp.h>

#include "api/device_layer.h"
#include "api/host_stream_heuristics.h"
#include "cpu/cpu_moe.h"
#include "cuda/common/host_experts_stream.h"
#include "cuda/common/layer_device.h"
#include "cuda/common/smxx_moe_kernels.h"
#include "mxmoe/dispatch.h"

namespace mxmoe {
namespace {

constexpr const char* kWho = "cpu";

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// One pinned allocation, carved into the piece's x, routing and y.
class PinnedStaging {
 public:
  ~PinnedStaging() {
    if (base_) cudaFreeHost(base_);
  }
  Status allocate(const MoeShape& s, int64_t tokens) {
    const size_t x_bytes = round_up(size_t(tokens * s.hidden) * 2, 256);
    const size_t ids_bytes = round_up(size_t(tokens * s.topk) * 4, 256);
    const size_t y_bytes = size_t(tokens * s.hidden) * 4;  // fp32, the wider y
    const size_t bytes = x_bytes + 2 * ids_bytes + y_bytes;
    const cudaError_t err = cudaHostAlloc(&base_, bytes, cudaHostAllocDefault);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      base_ = nullptr;
      return Status::OutOfMemory(fmt::format("cpu: no {} bytes of pinned host memory for the staging of {} tokens",
                                             bytes, tokens));
    }
    MXMOE_RETURN_IF_ERROR(smxx::cuda_status(err, kWho, "allocate the pinned staging"));
    uint8_t* p = static_cast<uint8_t*>(base_);
    x = reinterpret_cast<uint16_t*>(p);
    ids = reinterpret_cast<int32_t*>(p + x_bytes);
    weights = reinterpret_cast<float*>(p + x_bytes + ids_bytes);
    y = p + x_bytes + 2 * ids_bytes;
    return Status::Ok();
  }
  uint16_t* x = nullptr;
  int32_t* ids = nullptr;
  float* weights = nullptr;
  void* y = nullptr;

 private:
  void* base_ = nullptr;
};

class HostExpertsLayer;

// What one host function computes: the first `tokens` rows of the staging.
struct Piece {
  const HostExpertsLayer* layer;
  int64_t tokens;
  bool routed;  // the caller's routing is in the staging; else the router runs
  OutputDtype y_dtype;
};

class HostExpertsLayer final : public MoeLayer {
 public:
  HostExpertsLayer(std::string reason, int device, std::unique_ptr<cpu::CpuMoe> moe, int threads, int64_t chunk,
                   std::unique_ptr<smxx::ExpertStream> stream, int64_t stream_from)
      : MoeLayer(BackendKind::kCpu, std::move(reason), device, moe->shape(), moe->has_router()),
        moe_(std::move(moe)),
        threads_(threads),
        chunk_(chunk),
        stream_(std::move(stream)),
        stream_from_(stream_from),
        cpu_workspace_bytes_(round_up(moe_->workspace_bytes(chunk), 4096)),
        cpu_workspace_(static_cast<uint8_t*>(std::aligned_alloc(4096, cpu_workspace_bytes_)), &std::free),
        poisoned_(size_t(chunk)) {}

  ~HostExpertsLayer() override {
    smxx::DeviceGuard guard;  // the staging was pinned on the layer's device
    (void)guard.enter(device(), kWho);
    staging_.reset();
    stream_.reset();  // unpins the pack before moe_ frees it
  }

  Status init() {
    if (!cpu_workspace_) return Status::OutOfMemory("cpu: no host memory for the forward's workspace");
    smxx::DeviceGuard guard;
    MXMOE_RETURN_IF_ERROR(guard.enter(device(), kWho));
    staging_ = std::make_unique<PinnedStaging>();
    return staging_->allocate(shape(), chunk_);
  }

  int64_t host_stream_from() const override { return stream_ ? stream_from_ : 0; }

  size_t forward_workspace_bytes(int64_t tokens) const override {
    return streams(tokens) ? stream_->workspace_bytes(tokens) : 0;
  }

  Status forward(const LayerForwardArgs& a, void* workspace, size_t workspace_size,
                 CUstream_st* stream) const override {
    MXMOE_RETURN_IF_ERROR(check_common(a, workspace, workspace_size));
    const MoeShape& s = shape();
    const int64_t T = a.tokens, H = s.hidden, k = s.topk;
    if (T == 0) return Status::Ok();
    const int64_t stride = a.x_row_stride ? a.x_row_stride : H;
    if (stride < H) return Status::InvalidArgument(fmt::format("cpu: x_row_stride {} is below H = {}", stride, H));
    MXMOE_RETURN_IF_ERROR(smxx::check_on_device(kWho, "x", a.x, device()));
    MXMOE_RETURN_IF_ERROR(smxx::check_on_device(kWho, "y", a.y, device()));
    const bool routed = a.topk_ids != nullptr;
    if (routed) {
      MXMOE_RETURN_IF_ERROR(smxx::check_on_device(kWho, "topk_ids", a.topk_ids, device()));
      MXMOE_RETURN_IF_ERROR(smxx::check_on_device(kWho, "topk_weights", a.topk_weights, device()));
    }
    smxx::DeviceGuard guard;
    MXMOE_RETURN_IF_ERROR(guard.enter(device(), kWho));
    if (streams(T)) {
      MXMOE_RETURN_IF_ERROR(smxx::check_on_device(kWho, "workspace", workspace, device()));
      return stream_->forward(smxx::forward_args_of(a), workspace, workspace_size, stream);
    }
    const size_t y_size = a.y_dtype == OutputDtype::kFp32 ? 4 : 2;
    const PinnedStaging& st = *staging_;
    auto status = [](cudaError_t err, const char* what) { return smxx::cuda_status(err, kWho, what); };
    for (int64_t t0 = 0; t0 < T; t0 += chunk_) {
      const int64_t n = std::min(chunk_, T - t0);
      MXMOE_RETURN_IF_ERROR(status(cudaMemcpy2DAsync(st.x, size_t(H) * 2, a.x + t0 * stride, size_t(stride) * 2,
                                                     size_t(H) * 2, size_t(n), cudaMemcpyDeviceToHost, stream),
                                   "copy x to the staging"));
      if (routed) {
        MXMOE_RETURN_IF_ERROR(status(cudaMemcpyAsync(st.ids, a.topk_ids + t0 * k, size_t(n * k) * 4,
                                                     cudaMemcpyDeviceToHost, stream),
                                     "copy topk_ids to the staging"));
        MXMOE_RETURN_IF_ERROR(status(cudaMemcpyAsync(st.weights, a.topk_weights + t0 * k, size_t(n * k) * 4,
                                                     cudaMemcpyDeviceToHost, stream),
                                     "copy topk_weights to the staging"));
      }
      MXMOE_RETURN_IF_ERROR(
          status(cudaLaunchHostFunc(stream, &HostExpertsLayer::run, const_cast<Piece*>(piece(n, routed, a.y_dtype))),
                 "enqueue the CPU's work"));
      MXMOE_RETURN_IF_ERROR(status(cudaMemcpyAsync(static_cast<uint8_t*>(a.y) + size_t(t0 * H) * y_size, st.y,
                                                   size_t(n * H) * y_size, cudaMemcpyHostToDevice, stream),
                                   "copy y from the staging"));
    }
    return Status::Ok();
  }

 private:
  // The host function: the cpu backend on the staging's first rows. It may
  // make no CUDA call. A token with an id outside [0, E) is computed with
  // expert 0 at weight 0, so the others go through, and its row is then NaN.
  static void CUDART_CB run(void* arg) {
    const Piece& p = *static_cast<const Piece*>(arg);
    p.layer->compute(p);
  }

  void compute(const Piece& p) const {
    const MoeShape& s = shape();
    const int64_t n = p.tokens, k = s.topk, H = s.hidden;
    const PinnedStaging& st = *staging_;
    std::fill(poisoned_.begin(), poisoned_.begin() + n, 0);
    if (p.routed)
      for (int64_t t = 0; t < n; ++t) {
        bool bad = false;
        for (int64_t j = 0; j < k; ++j) bad |= st.ids[t * k + j] < 0 || st.ids[t * k + j] >= s.experts;
        if (!bad) continue;
        poisoned_[size_t(t)] = 1;
        for (int64_t j = 0; j < k; ++j) {
          st.ids[t * k + j] = 0;
          st.weights[t * k + j] = 0.0f;
        }
      }
    LayerForwardArgs a{.x = st.x, .tokens = n, .y = st.y, .y_dtype = p.y_dtype};
    if (p.routed) {
      a.topk_ids = st.ids;
      a.topk_weights = st.weights;
    }
    // After the checks above it cannot fail; if it does, every row says so.
    if (!moe_->forward(a, cpu_workspace_.get(), cpu_workspace_bytes_, threads_).ok())
      std::fill(poisoned_.begin(), poisoned_.begin() + n, 1);
    for (int64_t t = 0; t < n; ++t) {
      if (!poisoned_[size_t(t)]) continue;
      if (p.y_dtype == OutputDtype::kFp32) std::fill_n(static_cast<float*>(st.y) + t * H, H, std::nanf(""));
      else std::fill_n(static_cast<uint16_t*>(st.y) + t * H, H, uint16_t(0x7FC0));
    }
  }

  // The host function's argument for a piece of this kind: made at the first
  // forward that needs it, kept (at the same address) while the layer lives,
  // since graphs hold it.
  const Piece* piece(int64_t tokens, bool routed, OutputDtype y_dtype) const {
    std::lock_guard<std::mutex> lock(pieces_mutex_);
    const auto key = std::make_tuple(tokens, routed, int(y_dtype));
    auto it = pieces_.find(key);
    if (it == pieces_.end()) it = pieces_.emplace(key, Piece{this, tokens, routed, y_dtype}).first;
    return &it->second;
  }

  bool streams(int64_t tokens) const { return stream_ && tokens >= stream_from_; }

  std::unique_ptr<cpu::CpuMoe> moe_;
  int threads_;
  int64_t chunk_;
  std::unique_ptr<smxx::ExpertStream> stream_;  // null: the CPU computes every forward
  int64_t stream_from_;                          // tokens from which forwards stream
  size_t cpu_workspace_bytes_;
  std::unique_ptr<uint8_t, decltype(&std::free)> cpu_workspace_;
  std::unique_ptr<PinnedStaging> staging_;
  mutable std::vector<uint8_t> poisoned_;  // the piece's tokens with a bad id (host functions run one at a time)
  mutable std::mutex pieces_mutex_;
  mutable std::map<std::tuple<int64_t, bool, int>, Piece> pieces_;
};

}  // namespace

Status create_host_experts_layer(std::string reason, const MoeWeightsView& weights, const LayerOptions& options,
                                 std::unique_ptr<MoeLayer>* out) {
  if (options.host_chunk_tokens < 1)
    return Status::InvalidArgument(
        fmt::format("cpu: host_chunk_tokens = {} (the staging's tokens) must be positive", options.host_chunk_tokens));
  if (options.host_threads < 0)
    return Status::InvalidArgument(fmt::format("cpu: host_threads = {} is negative", options.host_threads));
  int weights_on = -1;
  MXMOE_RETURN_IF_ERROR(weights_device(weights, &weights_on));
  if (weights_on >= 0)
    return Status::InvalidArgument(fmt::format(
        "cpu: the weights are on CUDA device {}; a host-memory layer prepares its experts from host memory",
        weights_on));
  {
    smxx::DeviceGuard guard;  // a device that does not exist is refused before the packing's work
    const Status st = guard.enter(options.device, kWho);
    if (!st.ok())
      return Status::Unsupported(fmt::format("cpu: CUDA device {} cannot take a host-memory layer's activations ({})",
                                             options.device, st.message()));
  }
  if (options.host_stream_tokens < -1)
    return Status::InvalidArgument(fmt::format(
        "cpu: host_stream_tokens = {} (-1: never stream, 0: where faster, else from that T)", options.host_stream_tokens));
  std::unique_ptr<cpu::CpuMoe> moe;
  MXMOE_RETURN_IF_ERROR(cpu::CpuMoe::create(weights, &moe));
  std::string what = fmt::format("{}; experts in host memory, x and y on CUDA device {}", reason, options.device);
  std::unique_ptr<smxx::ExpertStream> stream;
  int64_t stream_from = 0;
  if (options.host_stream_tokens != -1) {
    // The GPU kernels dispatch picks for this device (MXMOE_BACKEND aside).
    DispatchInput in = dispatch_input_for_device("auto", weights.shape, options.device);
    in.override_name = "auto";
    DispatchResult gpu;
    MXMOE_RETURN_IF_ERROR(choose_backend(in, &gpu));
    if (gpu.backend == BackendKind::kPortable || gpu.backend == BackendKind::kSm90) {
      smxx::DeviceGuard guard;
      MXMOE_RETURN_IF_ERROR(guard.enter(options.device, kWho));
      MXMOE_RETURN_IF_ERROR(smxx::ExpertStream::create(gpu.backend, *moe, &stream));
      const int threads = options.host_threads > 0 ? options.host_threads : omp_get_max_threads();
      stream_from = options.host_stream_tokens > 0 ? options.host_stream_tokens
                                                   : stream_from_tokens(weights.shape, threads);
      what += fmt::format("; from T = {} ({}) the experts stream over PCIe to the {} kernels", stream_from,
                          options.host_stream_tokens > 0 ? "host_stream_tokens" : "where that beats the CPU",
                          backend_name(gpu.backend));
    } else {
      what += fmt::format("; never streamed to the GPU (streams feed the portable and sm90 kernels; dispatch "
                          "picks {} here)", backend_name(gpu.backend));
    }
  }
  auto layer = std::make_unique<HostExpertsLayer>(std::move(what), options.device, std::move(moe), options.host_threads,
                                                  options.host_chunk_tokens, std::move(stream), stream_from);
  MXMOE_RETURN_IF_ERROR(layer->init());
  *out = std::move(layer);
  return Status::Ok();
}

}  // namespace mxmoe
