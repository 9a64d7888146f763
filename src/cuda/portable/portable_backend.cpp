// The portable backend as a Backend object: owns the prepared weights on the
// device (optionally inside poisoned margins), a workspace, and the timing loop.
#include "cuda/portable/portable_backend.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "cuda/portable/portable_launcher.h"
#include "mxmoe/format.h"
#include "mxmoe/prepare.h"

namespace mxmoe {
namespace {

Status cuda_check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Status::CudaError(fmt::format("portable: {}: {}", what, cudaGetErrorString(err)));
}
#define PORTABLE_CUDA(expr) MXMOE_RETURN_IF_ERROR(cuda_check((expr), #expr))

// A device allocation that frees itself.
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { if (ptr) cudaFree(ptr); }
  Status reserve(size_t n) {
    if (n <= bytes && ptr) return Status::Ok();
    if (ptr) cudaFree(ptr);
    ptr = nullptr;
    bytes = 0;
    const cudaError_t err = cudaMalloc(&ptr, std::max<size_t>(n, 256));
    if (err != cudaSuccess) {
      ptr = nullptr;
      return Status::OutOfMemory(fmt::format("portable: cudaMalloc({}): {}", n, cudaGetErrorString(err)));
    }
    bytes = n;
    return Status::Ok();
  }
  template <typename T> T* as() const { return static_cast<T*>(ptr); }
};

class PortableBackend final : public Backend {
 public:
  BackendKind kind() const override { return BackendKind::kPortable; }

  Status init(const MoeWeightsView& weights, const PortableOptions& opt) {
    margin_ = (std::max<int64_t>(opt.poison_margin_bytes, 0) + 255) / 256 * 256;
    const PreparePlan plan = make_plan(BackendKind::kPortable, weights.shape);
    PreparedWeights prep;
    MXMOE_RETURN_IF_ERROR(prepare_weights(plan, weights, &prep));
    portable::UploadedWeights up;
    MXMOE_RETURN_IF_ERROR(portable::upload_weights(prep, margin_, &up));
    dw_ = up.view;
    weights_ = up.storage;
    has_router_ = dw_.router_weight != nullptr;
    PORTABLE_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    return Status::Ok();
  }

  ~PortableBackend() override {
    if (stream_) cudaStreamDestroy(stream_);
  }

  Status forward_host(const float* x, int64_t tokens, const RoutingView* routing, float* y) override {
    const MoeShape& s = dw_.shape;
    if (tokens <= 0) return Status::InvalidArgument("portable: tokens must be positive");
    if (!x || !y) return Status::InvalidArgument("portable: null x or y");
    if (routing) {
      if (routing->tokens != tokens || routing->topk != s.topk)
        return Status::InvalidArgument(fmt::format("portable: routing is [{}, {}], expected [{}, {}]",
                                                   routing->tokens, routing->topk, tokens, s.topk));
      MXMOE_RETURN_IF_ERROR(validate_routing(*routing, s.experts));
    } else if (!has_router_) {
      return Status::InvalidArgument("portable: no routing given and the weights have no router");
    }
    const size_t nx = size_t(tokens * s.hidden), nr = size_t(tokens * s.topk);
    std::vector<uint16_t> xb(nx);
    for (size_t i = 0; i < nx; ++i) xb[i] = float_to_bf16(x[i]);
    MXMOE_RETURN_IF_ERROR(x_.reserve(nx * 2));
    MXMOE_RETURN_IF_ERROR(y_.reserve(nx * 4));
    PORTABLE_CUDA(cudaMemcpyAsync(x_.ptr, xb.data(), nx * 2, cudaMemcpyHostToDevice, stream_));
    portable::ForwardArgs a;
    a.x = x_.as<uint16_t>();
    a.tokens = tokens;
    a.y = y_.as<float>();
    if (routing) {
      MXMOE_RETURN_IF_ERROR(ids_.reserve(nr * 4));
      MXMOE_RETURN_IF_ERROR(rw_.reserve(nr * 4));
      PORTABLE_CUDA(cudaMemcpyAsync(ids_.ptr, routing->ids, nr * 4, cudaMemcpyHostToDevice, stream_));
      PORTABLE_CUDA(cudaMemcpyAsync(rw_.ptr, routing->weights, nr * 4, cudaMemcpyHostToDevice, stream_));
      a.topk_ids = ids_.as<int32_t>();
      a.topk_weights = rw_.as<float>();
    }
    const size_t wsb = portable::workspace_bytes(dw_, tokens);
    MXMOE_RETURN_IF_ERROR(ws_.reserve(wsb));
    if (margin_ > 0) {  // poisoned workspace: an unwritten row read back is NaN
      PORTABLE_CUDA(cudaMemsetAsync(ws_.ptr, 0xFF, wsb, stream_));
      PORTABLE_CUDA(cudaMemsetAsync(y_.ptr, 0xFF, nx * 4, stream_));
    }
    MXMOE_RETURN_IF_ERROR(portable::moe_forward(dw_, a, ws_.ptr, wsb, stream_));
    PORTABLE_CUDA(cudaMemcpyAsync(y, y_.ptr, nx * 4, cudaMemcpyDeviceToHost, stream_));
    PORTABLE_CUDA(cudaStreamSynchronize(stream_));
    return Status::Ok();
  }

  Status time_forward(int64_t tokens, int routing_sets, int iterations, uint64_t seed,
                      ForwardTiming* out) override {
    const MoeShape& s = dw_.shape;
    if (tokens <= 0 || !out) return Status::InvalidArgument("portable: tokens must be positive");
    const int sets = std::max(routing_sets, 1), iters = std::max(iterations, 1);
    const size_t nx = size_t(tokens * s.hidden), nr = size_t(tokens * s.topk);
    // Random bf16 x, N(0, 1).
    std::vector<uint16_t> xb(nx);
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> nd(0.f, 1.f);
    for (auto& v : xb) v = float_to_bf16(nd(rng));
    DeviceBuffer x, y, ws, ids, rw;
    MXMOE_RETURN_IF_ERROR(x.reserve(nx * 2));
    MXMOE_RETURN_IF_ERROR(y.reserve(nx * 4));
    const size_t wsb = portable::workspace_bytes(dw_, tokens);
    MXMOE_RETURN_IF_ERROR(ws.reserve(wsb));
    MXMOE_RETURN_IF_ERROR(ids.reserve(nr * 4 * size_t(sets)));
    MXMOE_RETURN_IF_ERROR(rw.reserve(nr * 4 * size_t(sets)));
    PORTABLE_CUDA(cudaMemcpy(x.ptr, xb.data(), nx * 2, cudaMemcpyHostToDevice));
    for (int i = 0; i < sets; ++i) {
      const Routing r = make_random_routing(tokens, s.experts, s.topk, seed + uint64_t(i));
      PORTABLE_CUDA(cudaMemcpy(ids.as<int32_t>() + nr * size_t(i), r.ids.data(), nr * 4, cudaMemcpyHostToDevice));
      PORTABLE_CUDA(cudaMemcpy(rw.as<float>() + nr * size_t(i), r.weights.data(), nr * 4, cudaMemcpyHostToDevice));
    }
    // One graph per routing set (precomputed-routing path).
    std::vector<cudaGraphExec_t> execs;
    Status st = Status::Ok();
    for (int i = 0; i < sets && st.ok(); ++i) {
      portable::ForwardArgs a;
      a.x = x.as<uint16_t>();
      a.tokens = tokens;
      a.topk_ids = ids.as<int32_t>() + nr * size_t(i);
      a.topk_weights = rw.as<float>() + nr * size_t(i);
      a.y = y.as<float>();
      cudaGraph_t graph = nullptr;
      st = cuda_check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "begin capture");
      if (!st.ok()) break;
      const Status fst = portable::moe_forward(dw_, a, ws.ptr, wsb, stream_);
      const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
      st = fst.ok() ? cuda_check(end, "end capture") : fst;
      if (st.ok()) {
        cudaGraphExec_t exec = nullptr;
        st = cuda_check(cudaGraphInstantiate(&exec, graph, 0), "graph instantiate");
        if (st.ok()) execs.push_back(exec);
      }
      if (graph) cudaGraphDestroy(graph);
    }
    std::vector<double> times;
    cudaEvent_t e0 = nullptr, e1 = nullptr;
    if (st.ok()) st = cuda_check(cudaEventCreate(&e0), "event");
    if (st.ok()) st = cuda_check(cudaEventCreate(&e1), "event");
    const int warmup = std::max(3 * sets, 5);
    for (int it = 0; it < warmup && st.ok(); ++it)
      st = cuda_check(cudaGraphLaunch(execs[size_t(it % sets)], stream_), "graph launch");
    if (st.ok()) st = cuda_check(cudaStreamSynchronize(stream_), "warm-up");
    // Each sample: one replay of every routing set, back to back between two
    // events (as a serving loop launches forwards), divided by the set count;
    // the median over at least 3 such batches.
    const int batches = std::max(iters / sets, 3);
    for (int b = 0; b < batches && st.ok(); ++b) {
      st = cuda_check(cudaEventRecord(e0, stream_), "event record");
      for (int i = 0; i < sets && st.ok(); ++i)
        st = cuda_check(cudaGraphLaunch(execs[size_t(i)], stream_), "graph launch");
      if (st.ok()) st = cuda_check(cudaEventRecord(e1, stream_), "event record");
      if (st.ok()) st = cuda_check(cudaEventSynchronize(e1), "event sync");
      float ms = 0;
      if (st.ok()) st = cuda_check(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
      times.push_back(double(ms) * 1e3 / sets);
    }
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    for (auto ex : execs) cudaGraphExecDestroy(ex);
    MXMOE_RETURN_IF_ERROR(st);
    std::sort(times.begin(), times.end());
    *out = {times[times.size() / 2], times.front(), int(times.size()) * sets};
    return Status::Ok();
  }

 private:
  portable::DeviceWeights dw_;
  bool has_router_ = false;
  int64_t margin_ = 0;
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<void> weights_;  // the one allocation dw_ points into
  DeviceBuffer x_, y_, ids_, rw_, ws_;
};

}  // namespace

Status portable::upload_weights(const PreparedWeights& prep, int64_t poison_margin_bytes,
                                UploadedWeights* out) {
  const PreparePlan& plan = prep.plan;
  const MoeWeights& p = prep.weights;
  const size_t margin = size_t((std::max<int64_t>(poison_margin_bytes, 0) + 255) / 256 * 256);
  DeviceWeights& dw = out->view;
  dw = DeviceWeights{};
  dw.shape = plan.shape;
  dw.hidden_padded = plan.hidden_padded;
  dw.intermediate_padded = plan.intermediate_padded;
  dw.swiglu = p.swiglu;
  // One allocation holds every tensor, each inside its own poisoned margins.
  struct Piece { const void* src; size_t bytes; uint8_t poison; bool bf16_nan; size_t off = 0; };
  std::vector<Piece> pieces = {
      {p.w13_codes.data(), p.w13_codes.size(), 0x77, false},
      {p.w13_scales.data(), p.w13_scales.size(), kE8M0NaN, false},
      {p.b13.data(), p.b13.size() * 2, 0, true},
      {p.w2_codes.data(), p.w2_codes.size(), 0x77, false},
      {p.w2_scales.data(), p.w2_scales.size(), kE8M0NaN, false},
      {p.b2.data(), p.b2.size() * 2, 0, true},
      {p.router_weight.data(), p.router_weight.size() * 2, 0, true},
      {p.router_bias.data(), p.router_bias.size() * 2, 0, true},
  };
  size_t off = 0;
  for (Piece& pc : pieces) {
    off += margin;
    pc.off = off;
    off += (pc.bytes + 255) / 256 * 256 + margin;
  }
  auto storage = std::make_shared<DeviceBuffer>();
  MXMOE_RETURN_IF_ERROR(storage->reserve(off));
  uint8_t* dev = storage->as<uint8_t>();
  // Each piece goes up on its own, so the host holds at most one staging chunk
  // beside the prepared weights (not a second copy of the whole layer).
  const int64_t E = plan.shape.experts;
  const struct { int64_t rows, cols; } code_shape[2] = {
      {E * 2 * plan.intermediate_padded, plan.hidden_padded},   // pieces[0], w13
      {E * plan.hidden_padded, plan.intermediate_padded}};      // pieces[3], w2
  std::vector<uint8_t> stage;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& pc = pieces[i];
    // Poison: the margin before the piece, its 256-byte rounding and the margin after.
    const size_t tail = (pc.bytes + 255) / 256 * 256 - pc.bytes + margin;
    stage.assign(std::max(margin, tail), pc.poison);
    if (pc.bf16_nan)
      for (size_t j = 0; j < stage.size(); ++j) stage[j] = (j & 1) ? 0x7F : 0xC0;
    if (margin) PORTABLE_CUDA(cudaMemcpy(dev + pc.off - margin, stage.data(), margin, cudaMemcpyHostToDevice));
    if (tail) PORTABLE_CUDA(cudaMemcpy(dev + pc.off + pc.bytes, stage.data(), tail, cudaMemcpyHostToDevice));
    if (pc.bytes == 0) continue;
    if (i != 0 && i != 3) {
      PORTABLE_CUDA(cudaMemcpy(dev + pc.off, pc.src, pc.bytes, cudaMemcpyHostToDevice));
      continue;
    }
    // Codes: the kernels read them in the plan's fragment order; swizzle
    // groups of 16 rows a chunk of at most 64 MB at a time.
    const auto [rows, cols] = code_shape[i == 0 ? 0 : 1];
    const int64_t row_bytes = cols / 2;
    const int64_t chunk_rows = std::max<int64_t>(16, (int64_t(64) << 20) / row_bytes / 16 * 16);
    const uint8_t* src = static_cast<const uint8_t*>(pc.src);
    for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
      const int64_t nr = std::min(chunk_rows, rows - r0);
      stage.resize(size_t(nr * row_bytes));
      MXMOE_RETURN_IF_ERROR(swizzle_codes(plan.swizzle, src + r0 * row_bytes, nr, cols, stage.data()));
      PORTABLE_CUDA(cudaMemcpy(dev + pc.off + r0 * row_bytes, stage.data(), stage.size(), cudaMemcpyHostToDevice));
    }
  }
  const uint8_t* base = storage->as<uint8_t>();
  dw.w13_codes = base + pieces[0].off;
  dw.w13_scales = base + pieces[1].off;
  dw.b13 = reinterpret_cast<const uint16_t*>(base + pieces[2].off);
  dw.w2_codes = base + pieces[3].off;
  dw.w2_scales = base + pieces[4].off;
  dw.b2 = reinterpret_cast<const uint16_t*>(base + pieces[5].off);
  if (!p.router_weight.empty()) {
    dw.router_weight = reinterpret_cast<const uint16_t*>(base + pieces[6].off);
    dw.router_bias = reinterpret_cast<const uint16_t*>(base + pieces[7].off);
  }
  out->storage = std::move(storage);
  return Status::Ok();
}

Status create_portable_backend(const MoeWeightsView& weights, const PortableOptions& options,
                               std::unique_ptr<Backend>* out) {
  if (!out) return Status::InvalidArgument("portable: null output");
  MXMOE_RETURN_IF_ERROR(validate_weights(weights));
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return Status::Unsupported("portable: no CUDA device");
  }
  int dev = 0, major = 0;
  MXMOE_RETURN_IF_ERROR(cuda_check(cudaGetDevice(&dev), "cudaGetDevice"));
  MXMOE_RETURN_IF_ERROR(cuda_check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), "attribute"));
  if (major < 8) return Status::Unsupported(fmt::format("portable: needs SM80+, device is SM{}x", major));
  auto b = std::make_unique<PortableBackend>();
  MXMOE_RETURN_IF_ERROR(b->init(weights, options));
  *out = std::move(b);
  return Status::Ok();
}

Status create_portable_backend(const MoeWeightsView& weights, std::unique_ptr<Backend>* out) {
  return create_portable_backend(weights, PortableOptions{}, out);
}

}  // namespace mxmoe
