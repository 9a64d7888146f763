// Timing of a host forward (the cpu and reference backends' time_forward).
#pragma once

#include <cstdint>
#include <functional>

#include "mxmoe/backend.h"

namespace mxmoe {

// Times `forward` (one call = one forward of `tokens` tokens with the given
// routing) over `routing_sets` random routing sets (seed, seed + 1, ...),
// rotated so that consecutive forwards touch different experts: untimed
// forwards for at least `min_warmup_s` (none for 0), then `iterations` timed
// forwards; the median and the minimum, and each forward's time in order
// (batch_us). No board power
// on the host: a window asked for (power_window_s > 0) gets power_note.
Status time_host_forward(const MoeShape& shape, int64_t tokens, int routing_sets, int iterations, uint64_t seed,
                         double min_warmup_s, double power_window_s, const std::function<Status(const RoutingView&)>& forward,
                         ForwardTiming* out);

}  // namespace mxmoe
