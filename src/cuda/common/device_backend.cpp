// The Backend object the CUDA backends share (see device_backend.h).
#include "cuda/common/device_backend.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "cuda/common/board_power.h"
#include "cuda/common/sm_clock_probe.h"
#include "mxmoe/format.h"

namespace mxmoe::smxx {

namespace {

#define DEVICE_CUDA(expr) MXMOE_RETURN_IF_ERROR(check((expr), #expr))

class DeviceBackend final : public Backend {
 public:
  DeviceBackend(BackendKind kind, const MoeShape& shape, bool has_router, int64_t margin,
                std::unique_ptr<DeviceForward> forward)
      : kind_(kind), shape_(shape), has_router_(has_router), margin_(margin), forward_(std::move(forward)) {}

  Status init() { return check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream"); }

  ~DeviceBackend() override {
    if (stream_) cudaStreamDestroy(stream_);
  }

  BackendKind kind() const override { return kind_; }

  Status forward_host(const float* x, int64_t tokens, const RoutingView* routing, float* y) override {
    const MoeShape& s = shape_;
    if (tokens <= 0) return Status::InvalidArgument(fmt::format("{}: tokens must be positive", name()));
    if (!x || !y) return Status::InvalidArgument(fmt::format("{}: null x or y", name()));
    if (routing) {
      if (routing->tokens != tokens || routing->topk != s.topk)
        return Status::InvalidArgument(fmt::format("{}: routing is [{}, {}], expected [{}, {}]", name(),
                                                   routing->tokens, routing->topk, tokens, s.topk));
      MXMOE_RETURN_IF_ERROR(validate_routing(*routing, s.experts));
    } else if (!has_router_) {
      return Status::InvalidArgument(fmt::format("{}: no routing given and the weights have no router", name()));
    }
    const size_t nx = size_t(tokens * s.hidden), nr = size_t(tokens * s.topk);
    std::vector<uint16_t> xb(nx);
    for (size_t i = 0; i < nx; ++i) xb[i] = float_to_bf16(x[i]);
    MXMOE_RETURN_IF_ERROR(x_.reserve(nx * 2));
    MXMOE_RETURN_IF_ERROR(y_.reserve(nx * 4));
    DEVICE_CUDA(cudaMemcpyAsync(x_.get(), xb.data(), nx * 2, cudaMemcpyHostToDevice, stream_));
    ForwardArgs a;
    a.x = x_.as<uint16_t>();
    a.tokens = tokens;
    a.y = y_.as<float>();
    if (routing) {
      MXMOE_RETURN_IF_ERROR(ids_.reserve(nr * 4));
      MXMOE_RETURN_IF_ERROR(rw_.reserve(nr * 4));
      DEVICE_CUDA(cudaMemcpyAsync(ids_.get(), routing->ids, nr * 4, cudaMemcpyHostToDevice, stream_));
      DEVICE_CUDA(cudaMemcpyAsync(rw_.get(), routing->weights, nr * 4, cudaMemcpyHostToDevice, stream_));
      a.topk_ids = ids_.as<int32_t>();
      a.topk_weights = rw_.as<float>();
    }
    const size_t wsb = forward_->workspace_bytes(tokens);
    MXMOE_RETURN_IF_ERROR(ws_.reserve(wsb));
    if (margin_ > 0) {  // poisoned workspace: an unwritten row read back is NaN
      DEVICE_CUDA(cudaMemsetAsync(ws_.get(), 0xFF, wsb, stream_));
      DEVICE_CUDA(cudaMemsetAsync(y_.get(), 0xFF, nx * 4, stream_));
    }
    MXMOE_RETURN_IF_ERROR(forward_->forward(a, ws_.get(), wsb, stream_));
    DEVICE_CUDA(cudaMemcpyAsync(y, y_.get(), nx * 4, cudaMemcpyDeviceToHost, stream_));
    DEVICE_CUDA(cudaStreamSynchronize(stream_));
    return Status::Ok();
  }

  Status time_forward(int64_t tokens, int routing_sets, int iterations, uint64_t seed, double min_warmup_s,
                      double power_window_s, ForwardTiming* out) override {
    const MoeShape& s = shape_;
    if (tokens <= 0 || !out) return Status::InvalidArgument(fmt::format("{}: tokens must be positive", name()));
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
    const size_t wsb = forward_->workspace_bytes(tokens);
    MXMOE_RETURN_IF_ERROR(ws.reserve(wsb));
    MXMOE_RETURN_IF_ERROR(ids.reserve(nr * 4 * size_t(sets)));
    MXMOE_RETURN_IF_ERROR(rw.reserve(nr * 4 * size_t(sets)));
    DEVICE_CUDA(cudaMemcpy(x.get(), xb.data(), nx * 2, cudaMemcpyHostToDevice));
    for (int i = 0; i < sets; ++i) {
      const Routing r = make_random_routing(tokens, s.experts, s.topk, seed + uint64_t(i));
      DEVICE_CUDA(cudaMemcpy(ids.as<int32_t>() + nr * size_t(i), r.ids.data(), nr * 4, cudaMemcpyHostToDevice));
      DEVICE_CUDA(cudaMemcpy(rw.as<float>() + nr * size_t(i), r.weights.data(), nr * 4, cudaMemcpyHostToDevice));
    }
    auto forward_of_set = [&](int i) {
      ForwardArgs a;
      a.x = x.as<uint16_t>();
      a.tokens = tokens;
      a.topk_ids = ids.as<int32_t>() + nr * size_t(i);
      a.topk_weights = rw.as<float>() + nr * size_t(i);
      a.y = y.as<float>();
      return forward_->forward(a, ws.get(), wsb, stream_);
    };
    // One graph per routing set (precomputed-routing path), and one graph of
    // every set's forward back to back.
    std::vector<cudaGraphExec_t> execs;
    cudaGraphExec_t chained = nullptr;
    Status st = Status::Ok();
    for (int i = 0; i < sets && st.ok(); ++i) {
      cudaGraphExec_t exec = nullptr;
      st = capture([&] { return forward_of_set(i); }, &exec);
      if (exec) execs.push_back(exec);
    }
    if (st.ok())
      st = capture(
          [&] {
            for (int i = 0; i < sets; ++i) MXMOE_RETURN_IF_ERROR(forward_of_set(i));
            return Status::Ok();
          },
          &chained);
    cudaEvent_t e0 = nullptr, e1 = nullptr;
    if (st.ok()) st = check(cudaEventCreate(&e0), "event");
    if (st.ok()) st = check(cudaEventCreate(&e1), "event");
    auto launch_sets = [&] {
      for (cudaGraphExec_t exec : execs) MXMOE_RETURN_IF_ERROR(check(cudaGraphLaunch(exec, stream_), "graph launch"));
      return Status::Ok();
    };
    auto launch_chained = [&] { return check(cudaGraphLaunch(chained, stream_), "graph launch"); };
    // Warm-up: at least max(3 sets, 5) replays, then whole rounds of the sets
    // until min_warmup_s has passed (the clock is read only after a
    // synchronisation). Under a sustained load the H200 reaches its 700 W cap
    // and lowers the SM clock (docs/PERF.md): the default times the forward
    // as a burst, a second of warm-up as a serving loop at full load.
    const int first_rounds = std::max(3, (5 + sets - 1) / sets);
    const auto warm_start = std::chrono::steady_clock::now();
    for (int round = 1; st.ok(); ++round) {
      st = launch_sets();
      if (round < first_rounds) continue;
      if (st.ok()) st = check(cudaStreamSynchronize(stream_), "warm-up");
      const std::chrono::duration<double> spent = std::chrono::steady_clock::now() - warm_start;
      if (spent.count() >= min_warmup_s) break;
    }
    // Each sample: one replay of every routing set between two events, back
    // to back (as a serving loop launches forwards), divided by the set
    // count; the median over at least 3 such batches. Then the same with the
    // sets in one graph, where a forward's first kernel overlaps the last one
    // of the forward before it (as in an engine's graph of a whole step).
    // After each batch, outside the events, the SM clock (the power cap may
    // have lowered it since the last batch).
    const int batches = std::max(iters / sets, 3);
    std::vector<double> times, chained_times, clocks, chained_clocks;
    DeviceBuffer clock_mhz;
    if (st.ok()) st = clock_mhz.reserve(sizeof(float));
    for (int b = 0; b < batches && st.ok(); ++b) {
      st = time_between_events(e0, e1, launch_sets, sets, &times);
      if (st.ok()) st = read_sm_clock(clock_mhz.as<float>(), &clocks);
    }
    for (int b = 0; b < first_rounds && st.ok(); ++b) st = launch_chained();
    for (int b = 0; b < batches && st.ok(); ++b) {
      st = time_between_events(e0, e1, launch_chained, sets, &chained_times);
      if (st.ok()) st = read_sm_clock(clock_mhz.as<float>(), &chained_clocks);
    }
    // Last, so that the timings above run as without it: the board's power
    // over about power_window_s of every set's graph replayed back to back.
    PowerWindow power;
    std::string power_note;
    std::vector<double> power_clock;
    if (power_window_s > 0 && st.ok()) {
      st = measure_power(execs, power_window_s, &power, &power_note);
      if (st.ok() && power.watts > 0) st = read_sm_clock(clock_mhz.as<float>(), &power_clock);
    }
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    for (auto ex : execs) cudaGraphExecDestroy(ex);
    if (chained) cudaGraphExecDestroy(chained);
    MXMOE_RETURN_IF_ERROR(st);
    ForwardTiming t;
    t.batch_us = times;
    t.batch_sm_clock_mhz = clocks;
    t.chained_batch_us = chained_times;
    t.chained_batch_sm_clock_mhz = chained_clocks;
    t.iterations = int(times.size()) * sets;
    t.median_us = median(times);
    t.min_us = *std::min_element(times.begin(), times.end());
    t.chained_median_us = median(chained_times);
    t.median_sm_clock_mhz = median(clocks);
    t.chained_median_sm_clock_mhz = median(chained_clocks);
    t.power_w = power.watts;
    t.power_window_us = power.us_per_launch;  // a launch is one forward
    t.energy_mj = power.watts * power.us_per_launch * 1e-3;
    t.power_window_sm_clock_mhz = power_clock.empty() ? 0.0 : power_clock[0];
    t.power_note = power_note;
    *out = std::move(t);
    return Status::Ok();
  }

 private:
  const char* name() const { return backend_name(kind_); }

  // Captures what `enqueue` launches on the stream into an executable graph.
  template <typename Enqueue>
  Status capture(Enqueue enqueue, cudaGraphExec_t* exec) {
    cudaGraph_t graph = nullptr;
    MXMOE_RETURN_IF_ERROR(check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "begin capture"));
    const Status st = enqueue();
    const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
    Status out = st.ok() ? check(end, "end capture") : st;
    if (out.ok()) out = check(cudaGraphInstantiate(exec, graph, 0), "graph instantiate");
    if (graph) cudaGraphDestroy(graph);
    return out;
  }

  // Times what `launch` enqueues between two events and appends the time per
  // forward (µs over `forwards`) to `times`.
  template <typename Launch>
  Status time_between_events(cudaEvent_t e0, cudaEvent_t e1, Launch launch, int forwards,
                             std::vector<double>* times) {
    DEVICE_CUDA(cudaEventRecord(e0, stream_));
    MXMOE_RETURN_IF_ERROR(launch());
    DEVICE_CUDA(cudaEventRecord(e1, stream_));
    DEVICE_CUDA(cudaEventSynchronize(e1));
    float ms = 0;
    DEVICE_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    times->push_back(double(ms) * 1e3 / forwards);
    return Status::Ok();
  }
  // The upper median (a copy is sorted).
  static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }
  // measure_board_power over the sets' graphs in turn; the counter is opened
  // on first use (where it cannot be, *note says why).
  Status measure_power(const std::vector<cudaGraphExec_t>& execs, double window_s, PowerWindow* out,
                       std::string* note) {
    if (!energy_tried_) {
      int dev = 0;
      DEVICE_CUDA(cudaGetDevice(&dev));
      energy_ = BoardEnergyCounter::open(dev, &energy_why_);
      energy_tried_ = true;
    }
    if (!energy_) {
      *note = energy_why_;
      return Status::Ok();
    }
    const auto launch = [&](int64_t i) {
      return check(cudaGraphLaunch(execs[size_t(i % int64_t(execs.size()))], stream_), "graph launch");
    };
    return measure_board_power(*energy_, launch, stream_, window_s, out, note);
  }
  // Appends the SM clock now (MHz), by the probe kernel; synchronises.
  Status read_sm_clock(float* mhz_device, std::vector<double>* clocks) {
    MXMOE_RETURN_IF_ERROR(launch_sm_clock_probe(mhz_device, stream_, name()));
    float mhz = 0;
    DEVICE_CUDA(cudaMemcpyAsync(&mhz, mhz_device, sizeof(float), cudaMemcpyDeviceToHost, stream_));
    DEVICE_CUDA(cudaStreamSynchronize(stream_));
    clocks->push_back(double(mhz));
    return Status::Ok();
  }
  Status check(cudaError_t err, const char* what) const {
    if (err == cudaSuccess) return Status::Ok();
    return Status::CudaError(fmt::format("{}: {}: {}", name(), what, cudaGetErrorString(err)));
  }

  BackendKind kind_;
  MoeShape shape_;
  bool has_router_ = false;
  int64_t margin_ = 0;
  std::unique_ptr<DeviceForward> forward_;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer x_, y_, ids_, rw_, ws_;
  std::unique_ptr<BoardEnergyCounter> energy_;
  std::string energy_why_;
  bool energy_tried_ = false;
};

}  // namespace

Status make_device_backend(BackendKind kind, const MoeShape& shape, bool has_router, int64_t poison_margin_bytes,
                           std::unique_ptr<DeviceForward> forward, std::unique_ptr<Backend>* out) {
  auto b = std::make_unique<DeviceBackend>(kind, shape, has_router, poison_margin_bytes, std::move(forward));
  MXMOE_RETURN_IF_ERROR(b->init());
  *out = std::move(b);
  return Status::Ok();
}

}  // namespace mxmoe::smxx
