#include "run_parallel.h"

#include <chrono>
#include <cstdio>
#include <memory>

#include <fmt/format.h>

#include "mxmoe/dispatch.h"
#include "run_output.h"

namespace mxmoe::cli {
namespace {

int fail(const Status& s) {
  std::fprintf(stderr, "mxmoe run: %s\n", s.message().c_str());
  return 2;
}

// Wall time of one host-to-host forward, in ms.
template <typename Forward>
Status timed(Forward&& forward, double* ms) {
  const auto t0 = std::chrono::steady_clock::now();
  MXMOE_RETURN_IF_ERROR(forward());
  *ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return Status::Ok();
}

}  // namespace

int run_parallel(const ParallelRun& run, const MoeWeightsView& w, const std::vector<float>& x, int64_t T) {
  const MoeShape& shape = w.shape;
  ParallelConfig config;
  config.mode = run.mode;
  config.size = run.size;
  if (Status s = choose_parallel_backend(run.backend, run.mode, shape, &config.backend); !s.ok()) return fail(s);
  std::unique_ptr<ParallelLayer> layer;
  if (Status s = create_parallel_layer(w, config, &layer); !s.ok()) return fail(s);
  const ParallelConfig& c = layer->config();
  std::vector<float> y(x.size()), one(x.size());
  double ms = 0, one_ms = 0;
  if (Status s = timed([&] { return layer->forward_host(x.data(), T, nullptr, y.data()); }, &ms); !s.ok())
    return fail(s);
  std::printf("parallel: %s %d over devices %s (%s)\n", parallel_mode_name(c.mode), c.size,
              fmt::format("{}", fmt::join(c.devices, ", ")).c_str(), backend_name(c.backend));
  std::printf("layer: E=%lld H=%lld I=%lld top-%lld, T=%lld; forward %.3f ms (wall, host to host)\n",
              (long long)shape.experts, (long long)shape.hidden, (long long)shape.intermediate,
              (long long)shape.topk, (long long)T, ms);

  // The same forward on one GPU: this thread's current device.
  std::unique_ptr<Backend> single;
  if (Status s = create_backend(c.backend, w, &single); !s.ok()) return fail(s);
  if (Status s = timed([&] { return single->forward_host(x.data(), T, nullptr, one.data()); }, &one_ms); !s.ok())
    return fail(s);
  const Comparison vs_one = compare_outputs(y, one);
  print_comparison(fmt::format("check: rel L2 vs one GPU ({}, {:.3f} ms)", backend_name(c.backend), one_ms).c_str(), vs_one);
  bool ok = vs_one.ok();
  if (run.check) {
    Comparison vs_ref;
    if (Status s = compare_with_reference(w, x, T, true, ActivationOptions{}, y, &vs_ref); !s.ok()) return fail(s);
    print_comparison("check: rel L2 vs fp64 reference", vs_ref);
    ok = ok && vs_ref.ok();
  }
  if (!run.output.empty())
    if (Status s = write_output(run.output, y, T, shape.hidden); !s.ok()) return fail(s);
  return ok ? 0 : 1;
}

}  // namespace mxmoe::cli
