// The text `mxmoe info` prints: the backend table and the preparation table.
#include <fmt/format.h>

#include "mxmoe/dispatch.h"
#include "mxmoe/prepare.h"

namespace mxmoe {
namespace {

const char* layout_name(W13Layout l) {
  switch (l) {
    case W13Layout::kInterleaved: return "interleaved";
    case W13Layout::kStackedUpGate: return "[up; gate]";
    case W13Layout::kStackedGateUp: return "[gate; up]";
    case W13Layout::kInterleavedChunkOrder: return "interleaved, chunk K order";
    case W13Layout::kBlockedGateUp16: return "[gate; up] by 16";
  }
  return "?";
}

std::string mib(int64_t bytes) { return fmt::format("{:.2f} MiB", double(bytes) / (1 << 20)); }

}  // namespace

std::string describe_backends(const DispatchInput& in) {
  std::string s;
  if (in.device_sm)
    s += fmt::format("device {}: SM{}{}\n", in.device_index, *in.device_sm,
                     in.device_name.empty() ? "" : " (" + in.device_name + ")");
  else
    s += fmt::format("device: none ({})\n", in.no_device_reason.empty() ? "no CUDA device" : in.no_device_reason);
  s += fmt::format("compiled CUDA code: {}\n\n", in.compiled_archs.empty() ? std::string("none")
                                                                           : fmt::format("{}", fmt::join(in.compiled_archs, ", ")));
  s += fmt::format("{:<9} {:<6} {:<34} {}\n", "backend", "built", "runs on", "here");
  for (BackendKind k : kAllBackends) {
    const BackendInfo& info = backend_info(k);
    std::string why;
    const bool ok = backend_available(k, in, &why);
    s += fmt::format("{:<9} {:<6} {:<34} {}: {}\n", backend_name(k), backend_built(k, in) ? "yes" : "no",
                     info.runs_on, ok ? "available" : "unavailable", why);
  }
  s += "\nsm100 and sm120 (MXFP8 activations x MXFP4 weights on CUTLASS's block-scaled grouped GEMMs) have not yet\n"
       "run on Blackwell hardware: their pipeline is tested on other GPUs with an emulated GEMM that reads the same\n"
       "buffers, and their CUTLASS GEMMs are compiled and checked on the host only.\n";
  DispatchResult r;
  const Status st = choose_backend(in, &r);
  if (st.ok()) s += fmt::format("\npick: {} ({})\n", backend_name(r.backend), r.reason);
  else s += fmt::format("\npick: none: {}\n", st.message());
  return s;
}

std::string describe_preparation(const MoeShape& shape) {
  const Status st = validate_shape(shape);
  if (!st.ok()) return fmt::format("preparation: {}\n", st.message());
  const int64_t orig = original_bytes(shape);
  std::string s = fmt::format("experts {}, H {}, I {}: original weights and biases {} ({} bytes)\n",
                              shape.experts, shape.hidden, shape.intermediate, mib(orig), orig);
  s += fmt::format("{:<9} {:>6} {:>6} {:<12} {:>9} {:>14} {:>9}\n", "backend", "H pad", "I pad",
                   "w13 rows", "prefetch", "bytes held", "vs orig");
  for (BackendKind k : kAllBackends) {
    const PreparePlan p = make_plan(k, shape);
    const int64_t held = p.prepared_bytes();
    s += fmt::format("{:<9} {:>6} {:>6} {:<12} {:>9} {:>14} {:>+8.2f}%\n", backend_name(k),
                     p.hidden_padded, p.intermediate_padded, layout_name(p.w13_layout),
                     p.prefetch_rows, mib(held), 100.0 * double(held - orig) / double(orig));
  }
  return s;
}

}  // namespace mxmoe
