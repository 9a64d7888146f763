// The board's mean power while a GPU workload runs back to back, or while the
// GPU is idle, from two update edges of its energy counter (board_energy.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <cuda_runtime.h>

#include "cuda/common/board_energy.h"
#include "mxmoe/status.h"

namespace mxmoe::smxx {

struct PowerWindow {
  double watts = 0;          // between the two counter edges
  double us_per_launch = 0;  // GPU time per launch over all the launches (events)
};

// Launches before the window may open, so that it opens on a GPU already
// under the load and with launches queued ahead of it (a graph launch takes a
// few µs of host time, a forward 20 µs to 6 ms of GPU time).
inline constexpr double kPowerLeadS = 0.05;

// Calls launch(i) for i = 0, 1, ... (each enqueues one unit of work on
// `stream`) until a thread reading `counter` back to back has seen two of its
// update edges at least `window_s` apart, the first kPowerLeadS after the
// start, then synchronises. The counter steps about every 100 ms and a read
// takes ~3 ms (H200, driver 580), so an edge's time is known to a read:
// within ~1% over a 0.5 s window. The stream must still be busy at the
// second edge, else *note says so and *out stays empty; *note also says why
// where the counter did not move.
Status measure_board_power(const BoardEnergyCounter& counter, const std::function<Status(int64_t)>& launch,
                           cudaStream_t stream, double window_s, PowerWindow* out, std::string* note);

// The board's mean power with nothing running on the GPU, between two update
// edges of its counter at least window_s apart: the draw every workload's
// energy is counted above. The caller leaves the GPU idle meanwhile (the
// board's power settles within ~0.1 s of the last kernel, H200). Unsupported
// where the counter does not step within kEdgeWaitS.
Status measure_idle_power(const BoardEnergyCounter& counter, double window_s, double* watts);

// Longer than the counter's update period (~100 ms, H200, driver 580) many times over.
inline constexpr double kEdgeWaitS = 1.0;

}  // namespace mxmoe::smxx
