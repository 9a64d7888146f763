#include "bench_host.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "read_stream.h"
#include "roofline.h"

namespace mxmoe::cli {
namespace {

// 512 MiB: 16 times the 32 MiB L3 of the machines measured (docs/PERF.md),
// so every pass reads DRAM; 3 passes each side of the sweep.
constexpr size_t kStreamBytes = size_t(512) << 20;
constexpr int kStreamPasses = 3;

nlohmann::json stream_json(const ReadStream& s) {
  return {{"threads", s.threads}, {"bytes", s.bytes}, {"gbps_4k_pages", s.gbps_4k}, {"gbps_huge_pages", s.gbps_huge}};
}

std::string spread(const std::vector<double>& v) {
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return fmt::format("{:.1f}-{:.1f}", *lo, *hi);
}

// Forwards to time at T: about a second's worth after one trial forward.
Status pick_iterations(Backend& backend, int64_t T, const HostBench& o, int* out) {
  if (o.iterations > 0) return *out = o.iterations, Status::Ok();
  ForwardTiming trial;
  MXMOE_RETURN_IF_ERROR(backend.time_forward(T, o.routing_sets, 1, o.seed, 0, 0, &trial));
  *out = int(std::clamp(1e6 / std::max(trial.median_us, 1.0), 5.0, 200.0));
  return Status::Ok();
}

}  // namespace

Status bench_host_model(const std::string& name, const MoeShape& shape, Backend& backend, const HostBench& o,
                        uint32_t rgb, nlohmann::json* entry, std::vector<PlotSeries>* plot) {
  ReadStream before, after;
  MXMOE_RETURN_IF_ERROR(measure_read_stream(kStreamBytes, kStreamPasses, &before));
  fmt::print("read stream before, {} threads over {} MiB: 4 KiB pages {} GB/s, huge pages {} GB/s\n", before.threads,
             kStreamBytes >> 20, spread(before.gbps_4k), spread(before.gbps_huge));
  struct Row {
    int64_t T;
    ForwardTiming timing;
    double experts, bytes, flops;
  };
  std::vector<Row> rows;
  for (int64_t T : o.tokens) {
    int iterations = 0;
    MXMOE_RETURN_IF_ERROR(pick_iterations(backend, T, o, &iterations));
    Row r{T, {}, 0, 0, 0};
    MXMOE_RETURN_IF_ERROR(backend.time_forward(T, o.routing_sets, iterations, o.seed, o.warmup_s, 0, &r.timing));
    std::vector<Routing> sets;
    for (int i = 0; i < o.routing_sets; ++i)
      sets.push_back(make_random_routing(T, shape.experts, shape.topk, o.seed + uint64_t(i)));
    r.experts = mean_experts_touched(sets, shape.experts);
    r.bytes = r.experts * expert_bytes(shape);
    r.flops = moe_flops(shape, T);
    rows.push_back(r);
  }
  MXMOE_RETURN_IF_ERROR(measure_read_stream(kStreamBytes, kStreamPasses, &after));
  fmt::print("read stream after:  4 KiB pages {} GB/s, huge pages {} GB/s\n", spread(after.gbps_4k),
             spread(after.gbps_huge));
  ReadStream all = before;
  all.gbps_4k.insert(all.gbps_4k.end(), after.gbps_4k.begin(), after.gbps_4k.end());
  all.gbps_huge.insert(all.gbps_huge.end(), after.gbps_huge.begin(), after.gbps_huge.end());
  const double bw4k = all.median_4k(), bwhuge = all.median_huge();
  fmt::print("median of the {} passes each: 4 KiB pages {:.1f} GB/s, huge pages {:.1f} GB/s\n", all.gbps_4k.size(),
             bw4k, bwhuge);

  // x_4k: the time over the touched experts' bytes at the 4 KiB-page
  // stream's rate (1.0: a forward as fast as reading its weights), x_huge
  // the same at the huge-page stream's.
  fmt::print("{:>7} {:>11} {:>11} {:>6} {:>9} {:>8} {:>7} {:>8} {:>9} {:>9}\n", "T", "median_us", "min_us", "iters",
             "experts", "MB", "GB/s", "x_4k", "x_huge", "GFLOP/s");
  nlohmann::json json_rows = nlohmann::json::array();
  PlotSeries measured{name + " " + backend_name(backend.kind()), rgb, false, {}, {}};
  PlotSeries floor_line{name + " weights at the 4 KiB stream", rgb, true, {}, {}};
  for (const Row& r : rows) {
    const double us = r.timing.median_us, gbps = r.bytes / us * 1e-3;
    const double x4k = us / (r.bytes / bw4k * 1e-3), xhuge = us / (r.bytes / bwhuge * 1e-3);
    const double gflops = r.flops / us * 1e-3;
    fmt::print("{:>7} {:>11.1f} {:>11.1f} {:>6} {:>9.2f} {:>8.1f} {:>7.1f} {:>8.2f} {:>9.2f} {:>9.1f}\n", r.T, us,
               r.timing.min_us, r.timing.iterations, r.experts, r.bytes * 1e-6, gbps, x4k, xhuge, gflops);
    json_rows.push_back({{"tokens", r.T}, {"median_us", us}, {"min_us", r.timing.min_us},
                         {"iterations", r.timing.iterations}, {"experts_touched", r.experts},
                         {"expert_bytes", r.bytes}, {"flops", r.flops}, {"gbps", gbps}, {"gflops", gflops},
                         {"of_read_4k", x4k}, {"of_read_huge", xhuge}});
    measured.x.push_back(double(r.T)), measured.y.push_back(us);
    floor_line.x.push_back(double(r.T)), floor_line.y.push_back(r.bytes / bw4k * 1e-3);
  }
  *entry = {{"model", name},           {"backend", backend_name(backend.kind())}, {"routing_sets", o.routing_sets},
            {"min_warmup_s", o.warmup_s}, {"read_stream_before", stream_json(before)},
            {"read_stream_after", stream_json(after)}, {"read_gbps_4k", bw4k}, {"read_gbps_huge", bwhuge},
            {"rows", json_rows}};
  plot->push_back(measured);
  plot->push_back(floor_line);
  return Status::Ok();
}

}  // namespace mxmoe::cli
