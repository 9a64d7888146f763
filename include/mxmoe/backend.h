// Backends: named implementations of the MoE forward, and the one interface the
// CLI, the Python op and the tests drive them through.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mxmoe/format.h"
#include "mxmoe/moe.h"
#include "mxmoe/status.h"

namespace mxmoe {

// kCpu: the CPU kernels (src/cpu/, SIMD paths chosen by the CPU's features);
// kReference: the fp64 CPU reference (src/reference/), the oracle the others
// are checked against, which also serves MXFP8 activations on the CPU.
enum class BackendKind { kCpu, kReference, kPortable, kSm90, kSm100, kSm120 };
inline constexpr BackendKind kAllBackends[] = {BackendKind::kCpu,  BackendKind::kReference, BackendKind::kPortable,
                                               BackendKind::kSm90, BackendKind::kSm100,     BackendKind::kSm120};

const char* backend_name(BackendKind kind);                        // "cpu", "reference", "portable", ...
std::optional<BackendKind> parse_backend_name(std::string_view);  // not "auto"

// What the expert GEMMs consume as activations: bf16 (x and the SwiGLU output
// rounded to bf16), or MXFP8 (each quantized to E4M3 with one E8M0 scale per
// 32 along K, before GEMM1 and before GEMM2; fp32 accumulation).
enum class ActivationFormat { kBf16, kMxfp8 };
const char* activation_format_name(ActivationFormat f);                  // "bf16", "mxfp8"
std::optional<ActivationFormat> parse_activation_format(std::string_view);

struct ActivationOptions {
  ActivationFormat format = ActivationFormat::kBf16;
  // MXFP8 scales: kTriton (2^ceil(log2(amax / 448)), the Blackwell engines'
  // rule; elements round to nearest even, never clip) or kOcp (2^(floor(log2
  // amax) - 8), elements saturate at +-448).
  MxScaleRule mxfp8_scale_rule = MxScaleRule::kTriton;
};

// W13Layout (how w13's 2I rows are ordered) lives in mxmoe/moe.h, with the views.

// Timing of one forward at a token count (see Backend::time_forward).
struct ForwardTiming {
  double median_us = 0;
  double min_us = 0;
  int iterations = 0;  // forwards timed
  // GPU backends: the median per forward with every routing set's forward
  // in one graph, so that a forward's first kernel may start as the one
  // before it ends (as in an engine's graph of a whole step); 0 on the CPU.
  double chained_median_us = 0;
  // GPU backends: each timed batch's time per forward (a batch: one replay of
  // every routing set) and the SM clock read after it, in the order timed,
  // and the clock's median over the batches; the same for the one-graph
  // batches. The CPU backends: each timed forward's time in batch_us, the
  // rest empty and 0.
  std::vector<double> batch_us, batch_sm_clock_mhz, chained_batch_us, chained_batch_sm_clock_mhz;
  double median_sm_clock_mhz = 0, chained_median_sm_clock_mhz = 0;
  // GPU backends, where a power window was asked for and the board's energy
  // counter is readable: the board's mean power (W) while every set's graph
  // is replayed back to back for about that window after the timed batches,
  // the time per forward over those replays (µs) and the SM clock after them,
  // and their product, the energy per forward (mJ). 0 otherwise, and
  // power_note says why where a window was asked for.
  double power_w = 0, power_window_us = 0, power_window_sm_clock_mhz = 0, energy_mj = 0;
  std::string power_note;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendKind kind() const = 0;

  // Synchronous host-to-host forward: x float [T, H] -> y float [T, H],
  // T >= 1. `routing` may be null (the backend runs the router).
  virtual Status forward_host(const float* x, int64_t tokens, const RoutingView* routing,
                              float* y) = 0;

  // Times the forward at `tokens` over `routing_sets` rotated routing sets
  // (so the experts' weights do not stay in L2), about `iterations` forwards in
  // all. GPU backends time CUDA-graph replays with events after warm-up (three
  // replays of every set, and replays for at least `min_warmup_s` seconds):
  // one replay of each set back to back per sample, the median sample per
  // forward; then replays of one graph of all the sets' forwards
  // (chained_median_us). With `power_window_s` > 0, the board's power and
  // the energy per forward over about that many seconds of replays after the
  // timed batches (ForwardTiming::power_w). The CPU backends run forwards for
  // `min_warmup_s` first (none for 0) and measure no power.
  virtual Status time_forward(int64_t tokens, int routing_sets, int iterations, uint64_t seed,
                              double min_warmup_s, double power_window_s, ForwardTiming* out) = 0;
};

// Builds `kind` for these (original, unpadded) weights: runs the backend's
// preparation and, for GPU backends, uploads to the current device.
Status create_backend(BackendKind kind, const MoeWeightsView& weights,
                      std::unique_ptr<Backend>* out);
// The same with an activation format: a backend whose GEMMs do not consume
// it answers Unsupported, naming the backends that do.
Status create_backend(BackendKind kind, const MoeWeightsView& weights, const ActivationOptions& activations,
                      std::unique_ptr<Backend>* out);
// Unsupported unless `kind`'s GEMMs consume `format` (backend_info).
Status check_activation_format(BackendKind kind, ActivationFormat format);

}  // namespace mxmoe
