// The SM clock at a moment between timed launches: under a sustained load the
// board's power cap lowers it within tens of milliseconds (H200 at 700 W:
// 1.98 GHz down to ~1.5 GHz), and a timing means little without it.
#pragma once

#include <cuda_runtime.h>

#include "mxmoe/status.h"

namespace mxmoe::smxx {

// Runs one thread for kSmClockWindowNs of the global timer on `stream`,
// counting SM cycles, and writes cycles / ns * 1000 (MHz) to *mhz_device.
Status launch_sm_clock_probe(float* mhz_device, cudaStream_t stream, const char* who);

// The probe's window, long against the global timer's tick: on an H200 below
// its power cap (decode timings) the readings fall within 0.4% of its 1980 MHz
// boost clock. One thread, so the probe adds no load of its own.
inline constexpr unsigned long long kSmClockWindowNs = 20000;

}  // namespace mxmoe::smxx
