// See board_power.h.
#include "cuda/common/board_power.h"

#include <atomic>
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "cuda/common/smxx_moe_kernels.h"

namespace mxmoe::smxx {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

Status cuda(cudaError_t err, const char* what) { return cuda_status(err, "board power", what); }

// What the reader thread saw: the window's two counter edges.
struct Edges {
  uint64_t mj0 = 0, mj1 = 0;
  Clock::time_point t0, t1;
  bool closed = false, busy_at_close = false;
  Status status;
};

// Reads the counter back to back until the window closes, a read fails or
// `stop` is set (then sets reader_done):
// the first value that differs from the one before, after kPowerLeadS, opens
// the window, the first such change at least window_s later closes it.
void read_edges(const BoardEnergyCounter& counter, cudaStream_t stream, Clock::time_point start, double window_s,
                const std::atomic<bool>& stop, std::atomic<bool>& reader_done, Edges* e) {
  uint64_t prev = 0;
  e->status = counter.read_mj(&prev);
  bool opened = false;
  while (e->status.ok() && !stop.load(std::memory_order_relaxed)) {
    uint64_t mj = 0;
    e->status = counter.read_mj(&mj);
    const Clock::time_point now = Clock::now();
    if (!e->status.ok()) break;
    if (mj != prev && seconds(now - start) >= kPowerLeadS) {
      if (!opened) {
        opened = true;
        e->t0 = now;
        e->mj0 = mj;
      } else if (seconds(now - e->t0) >= window_s) {
        e->t1 = now;
        e->mj1 = mj;
        e->busy_at_close = cudaStreamQuery(stream) == cudaErrorNotReady;
        e->closed = true;
        break;
      }
    }
    prev = mj;
  }
  reader_done.store(true, std::memory_order_release);
}

}  // namespace

Status measure_board_power(const BoardEnergyCounter& counter, const std::function<Status(int64_t)>& launch,
                           cudaStream_t stream, double window_s, PowerWindow* out, std::string* note) {
  // Past the window with no closing edge: the counter is stuck.
  constexpr double kGiveUpS = 2.0;
  *out = PowerWindow{};
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  Status st = cuda(cudaEventCreate(&e0), "event");
  if (st.ok()) st = cuda(cudaEventCreate(&e1), "event");
  if (st.ok()) st = cuda(cudaEventRecord(e0, stream), "event record");
  int64_t launches = 0;
  Edges edges;
  if (st.ok()) {
    // A read of the counter takes milliseconds of host time (3.3 ms on the
    // H200's driver), so it runs on its own thread while this one keeps the
    // launch queue full.
    const Clock::time_point start = Clock::now();
    std::atomic<bool> stop{false}, reader_done{false};
    std::thread reader(read_edges, std::cref(counter), stream, start, window_s, std::cref(stop), std::ref(reader_done),
                       &edges);
    while (st.ok() && !reader_done.load(std::memory_order_acquire) &&
           seconds(Clock::now() - start) < kPowerLeadS + window_s + kGiveUpS)
      st = launch(launches++);
    stop.store(true, std::memory_order_relaxed);
    reader.join();
    if (st.ok()) st = edges.status;
  }
  if (st.ok()) st = cuda(cudaEventRecord(e1, stream), "event record");
  if (st.ok()) st = cuda(cudaEventSynchronize(e1), "event synchronize");
  float ms = 0;
  if (st.ok()) st = cuda(cudaEventElapsedTime(&ms, e0, e1), "event elapsed");
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  MXMOE_RETURN_IF_ERROR(st);
  if (!edges.closed) {
    *note = fmt::format("the board's energy counter did not move twice within {:.1f} s", window_s + kGiveUpS);
    return Status::Ok();
  }
  if (!edges.busy_at_close) {
    *note = "the GPU ran out of launches before the window closed (the host fell behind)";
    return Status::Ok();
  }
  out->watts = double(edges.mj1 - edges.mj0) * 1e-3 / seconds(edges.t1 - edges.t0);
  out->us_per_launch = double(ms) * 1e3 / double(launches);
  return Status::Ok();
}

Status measure_idle_power(const BoardEnergyCounter& counter, double window_s, double* watts) {
  // The first read after the counter's value changes: the time of an edge,
  // within one read (~3 ms).
  auto next_edge = [&](uint64_t* mj, Clock::time_point* t) {
    uint64_t first = 0;
    MXMOE_RETURN_IF_ERROR(counter.read_mj(&first));
    const Clock::time_point start = Clock::now();
    for (*mj = first; *mj == first;) {
      if (seconds(Clock::now() - start) > kEdgeWaitS)
        return Status::Unsupported(fmt::format("the board's energy counter did not move within {:.1f} s", kEdgeWaitS));
      MXMOE_RETURN_IF_ERROR(counter.read_mj(mj));
    }
    *t = Clock::now();
    return Status::Ok();
  };
  uint64_t mj0 = 0, mj1 = 0;
  Clock::time_point t0, t1;
  MXMOE_RETURN_IF_ERROR(next_edge(&mj0, &t0));
  std::this_thread::sleep_for(std::chrono::duration<double>(window_s));
  MXMOE_RETURN_IF_ERROR(next_edge(&mj1, &t1));
  *watts = double(mj1 - mj0) * 1e-3 / seconds(t1 - t0);
  return Status::Ok();
}

}  // namespace mxmoe::smxx
