// A GPU check shared by the CUDA backends' tests: two forwards enqueued back
// to back on one stream and one workspace (CUDA builds only).
#pragma once

#ifdef MXMOE_WITH_CUDA
#include <cstdint>

#include "cuda/common/device_backend.h"
#include "mxmoe/moe.h"

namespace mxmoe::testing {

// Enqueues forward A then forward B of `fwd` (over the weights `w`) on one
// stream with one poisoned workspace, each with its own x, routing and y, as an
// engine's graph of a whole step runs its layers: a forward's first kernels may
// start while the one before ends (programmatic dependent launch), so neither
// may write what the other still reads. Directly on the stream, then captured
// in one graph replayed twice; expects each output within 1e-2 (relative L2)
// of the fp64 reference and non-zero. Inputs from seeds seed .. seed + 3.
void expect_back_to_back_forwards(const smxx::DeviceForward& fwd, const MoeWeights& w, int64_t tokens,
                                  uint64_t seed);

// Forward A on one stream and forward B on another, each with its own
// workspace, x, routing and y, enqueued `rounds` times in turn so that they
// run at the same time; expects both outputs as above.
void expect_concurrent_forwards(const smxx::DeviceForward& fwd, const MoeWeights& w, int64_t tokens, uint64_t seed,
                                int rounds = 50);

}  // namespace mxmoe::testing
#endif
