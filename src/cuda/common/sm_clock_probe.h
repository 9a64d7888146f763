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

// The probe's window: the global timer ticks in tens of ns, so 20 us keeps the
// reading within ~0.2%; the probe is one thread, so it adds no load.
inline constexpr unsigned long long kSmClockWindowNs = 20000;

}  // namespace mxmoe::smxx
