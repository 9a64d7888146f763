#include "bench_parallel.h"

#include <memory>

#include <fmt/format.h>

#include "mxmoe/backend.h"
#include "roofline.h"

namespace mxmoe::cli {
namespace {

// Halfway to white, channel by channel.
uint32_t lighter(uint32_t rgb) {
  uint32_t out = 0;
  for (int shift = 0; shift < 24; shift += 8) out |= ((((rgb >> shift) & 0xFF) + 0xFF) / 2) << shift;
  return out;
}

}  // namespace

Status bench_parallel_model(const std::string& name, const MoeShape& shape, const ParallelBench& b,
                            const DeviceCeilings& ceilings, uint32_t rgb, nlohmann::json* entry,
                            std::vector<PlotSeries>* plot) {
  const MoeWeights weights = make_random_weights(shape, b.seed);
  ParallelConfig config;
  config.mode = b.mode;
  config.size = b.size;
  config.backend = b.backend;
  std::unique_ptr<ParallelLayer> layer;
  MXMOE_RETURN_IF_ERROR(create_parallel_layer(weights.view(), config, &layer));
  std::unique_ptr<Backend> single;
  MXMOE_RETURN_IF_ERROR(create_backend(b.backend, weights.view(), &single));
  const ParallelConfig& c = layer->config();
  const std::string label = fmt::format("{}{}", parallel_mode_name(c.mode), c.size);

  fmt::print("{}: E={} H={} I={} top-{}; {} over devices {} against one GPU ({})\n", name, shape.experts,
             shape.hidden, shape.intermediate, shape.topk, label, fmt::join(c.devices, ", "), backend_name(c.backend));
  fmt::print("{:>7} {:>11} {:>11} {:>8} {:>7} {:>10} {:>9}\n", "T", "one_gpu_us", label + "_us", "speedup", "comm",
             "floor_us", "of_floor");
  nlohmann::json rows = nlohmann::json::array();
  PlotSeries many{name + " " + label, rgb, false, {}, {}};
  PlotSeries one{name + " one GPU", lighter(rgb), false, {}, {}};
  PlotSeries floor_line{name + " floor / " + std::to_string(c.size), rgb, true, {}, {}};
  for (int64_t T : b.tokens) {
    ForwardTiming t1;
    MXMOE_RETURN_IF_ERROR(single->time_forward(T, b.routing_sets, b.iterations, b.seed, 0.0, 0.0, &t1));
    ParallelTiming tn;
    MXMOE_RETURN_IF_ERROR(layer->time_forward(T, b.routing_sets, b.iterations, b.seed, &tn));
    std::vector<Routing> sets;
    for (int i = 0; i < b.routing_sets; ++i)
      sets.push_back(make_random_routing(T, shape.experts, shape.topk, b.seed + uint64_t(i)));
    // N GPUs together move N times the bytes and FLOPs per second of one.
    const Floor f = moe_floor(shape, T, mean_experts_touched(sets, shape.experts), ceilings);
    const double floor_us = f.us / c.size, pct = 100.0 * floor_us / tn.median_us;
    const double speedup = t1.median_us / tn.median_us;
    fmt::print("{:>7} {:>11.1f} {:>11.1f} {:>7.2f}x {:>6.0f}% {:>10.1f} {:>8.1f}%\n", T, t1.median_us, tn.median_us,
               speedup, 100.0 * tn.comm_share, floor_us, pct);
    rows.push_back({{"tokens", T}, {"median_us", tn.median_us}, {"min_us", tn.min_us},
                    {"iterations", tn.iterations}, {"compute_us", tn.compute_us}, {"comm_share", tn.comm_share},
                    {"single_gpu_us", t1.median_us}, {"speedup", speedup}, {"floor_us", floor_us},
                    {"percent_of_floor", pct}, {"bound", f.memory_bound ? "memory" : "math"}});
    many.x.push_back(double(T)), many.y.push_back(tn.median_us);
    one.x.push_back(double(T)), one.y.push_back(t1.median_us);
    floor_line.x.push_back(double(T)), floor_line.y.push_back(floor_us);
  }
  *entry = {{"model", name}, {"backend", backend_name(c.backend)}, {"mode", parallel_mode_name(c.mode)},
            {"size", c.size}, {"devices", c.devices}, {"routing_sets", b.routing_sets}, {"rows", rows}};
  plot->push_back(many);
  plot->push_back(one);
  plot->push_back(floor_line);
  return Status::Ok();
}

}  // namespace mxmoe::cli
