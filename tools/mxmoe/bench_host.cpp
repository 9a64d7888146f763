#include "bench_host.h"

#include <algorithm>

#include <fmt/format.h>

#include "read_stream.h"
#include "roofline.h"

namespace mxmoe::cli {
namespace {

// 512 MiB: 16 times the 32 MiB L3 of the machines measured (docs/PERF.md),
// so every pass reads DRAM.
constexpr size_t kStreamBytes = size_t(512) << 20;
// Each T's forwards are timed in this many rounds, each after one pass of
// each stream: the host's bandwidth moves over seconds (a shared machine),
// so the layer and the stream it is compared with are measured together.
constexpr int kRounds = 5;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Forwards to time at T: about a second's worth after one trial forward.
Status pick_iterations(Backend& backend, int64_t T, const HostBench& o, int* out) {
  if (o.iterations > 0) return *out = o.iterations, Status::Ok();
  ForwardTiming trial;
  MXMOE_RETURN_IF_ERROR(backend.time_forward(T, o.routing_sets, 1, o.seed, 0, 0, &trial));
  *out = int(std::clamp(1e6 / std::max(trial.median_us, 1.0), 5.0, 200.0));
  return Status::Ok();
}

struct Row {
  int64_t T = 0;
  std::vector<double> forward_us, gbps_4k, gbps_huge;
  double experts = 0, bytes = 0, flops = 0;
};

Status measure_row(Backend& backend, const MoeShape& shape, const ReadStream& stream, int64_t T, const HostBench& o,
                   Row* r) {
  int iterations = 0;
  MXMOE_RETURN_IF_ERROR(pick_iterations(backend, T, o, &iterations));
  r->T = T;
  for (int round = 0; round < kRounds; ++round) {
    r->gbps_4k.push_back(stream.pass(false));
    r->gbps_huge.push_back(stream.pass(true));
    const int n = iterations * (round + 1) / kRounds - iterations * round / kRounds;
    if (n == 0) continue;
    ForwardTiming t;
    MXMOE_RETURN_IF_ERROR(
        backend.time_forward(T, o.routing_sets, n, o.seed, round == 0 ? o.warmup_s : 0, 0, &t));
    r->forward_us.insert(r->forward_us.end(), t.batch_us.begin(), t.batch_us.end());
  }
  std::vector<Routing> sets;
  for (int i = 0; i < o.routing_sets; ++i)
    sets.push_back(make_random_routing(T, shape.experts, shape.topk, o.seed + uint64_t(i)));
  r->experts = mean_experts_touched(sets, shape.experts);
  r->bytes = r->experts * expert_bytes(shape);
  r->flops = moe_flops(shape, T);
  return Status::Ok();
}

}  // namespace

Status bench_host_model(const std::string& name, const MoeShape& shape, Backend& backend, const HostBench& o,
                        uint32_t rgb, nlohmann::json* entry, std::vector<PlotSeries>* plot) {
  ReadStream stream;
  MXMOE_RETURN_IF_ERROR(ReadStream::create(kStreamBytes, &stream));
  // read_4k, read_huge: the median read stream over the T's rounds (GB/s);
  // x_4k: the forward's median time over its touched experts' bytes at the
  // 4 KiB-page stream's rate (1.0: as fast as reading its weights; the
  // weights sit in huge pages where the kernel grants them), x_huge the same
  // at the huge-page stream's.
  fmt::print("read stream: {} threads over {} MiB, one pass of each before each of {} rounds of a T's forwards\n",
             stream.threads(), kStreamBytes >> 20, kRounds);
  fmt::print("{:>7} {:>11} {:>11} {:>6} {:>9} {:>8} {:>7} {:>8} {:>9} {:>8} {:>8} {:>9}\n", "T", "median_us",
             "min_us", "iters", "experts", "MB", "GB/s", "read_4k", "read_huge", "x_4k", "x_huge", "GFLOP/s");
  nlohmann::json rows = nlohmann::json::array();
  PlotSeries measured{name + " " + backend_name(backend.kind()), rgb, false, {}, {}};
  PlotSeries floor_line{name + " weights at the 4 KiB stream", rgb, true, {}, {}};
  for (int64_t T : o.tokens) {
    Row r;
    MXMOE_RETURN_IF_ERROR(measure_row(backend, shape, stream, T, o, &r));
    const double us = median(r.forward_us), bw4k = median(r.gbps_4k), bwhuge = median(r.gbps_huge);
    const double gbps = r.bytes / us * 1e-3, gflops = r.flops / us * 1e-3;
    const double x4k = us / (r.bytes / bw4k * 1e-3), xhuge = us / (r.bytes / bwhuge * 1e-3);
    const double min_us = *std::min_element(r.forward_us.begin(), r.forward_us.end());
    fmt::print("{:>7} {:>11.1f} {:>11.1f} {:>6} {:>9.2f} {:>8.1f} {:>7.1f} {:>8.1f} {:>9.1f} {:>8.2f} {:>8.2f} {:>9.1f}\n",
               T, us, min_us, r.forward_us.size(), r.experts, r.bytes * 1e-6, gbps, bw4k, bwhuge, x4k, xhuge, gflops);
    rows.push_back({{"tokens", T}, {"median_us", us}, {"min_us", min_us}, {"iterations", r.forward_us.size()},
                    {"experts_touched", r.experts}, {"expert_bytes", r.bytes}, {"flops", r.flops}, {"gbps", gbps},
                    {"gflops", gflops}, {"read_gbps_4k", bw4k}, {"read_gbps_huge", bwhuge}, {"of_read_4k", x4k},
                    {"of_read_huge", xhuge}, {"forward_us", r.forward_us}, {"read_passes_gbps_4k", r.gbps_4k},
                    {"read_passes_gbps_huge", r.gbps_huge}});
    measured.x.push_back(double(T)), measured.y.push_back(us);
    floor_line.x.push_back(double(T)), floor_line.y.push_back(r.bytes / bw4k * 1e-3);
  }
  *entry = {{"model", name},
            {"backend", backend_name(backend.kind())},
            {"routing_sets", o.routing_sets},
            {"min_warmup_s", o.warmup_s},
            {"read_stream", {{"threads", stream.threads()}, {"bytes", stream.bytes()}, {"rounds", kRounds}}},
            {"rows", rows}};
  plot->push_back(measured);
  plot->push_back(floor_line);
  return Status::Ok();
}

}  // namespace mxmoe::cli
