// mxmoe bench: times a backend over a token sweep on GPT-OSS shapes and reports
// each time against the floor: on a GPU the bytes of the experts touched at
// its copy rate, or FLOPs at its bf16 GEMM rate (bench_ceilings.h: measured
// at the start, or kept from an earlier run); on the CPU the same bytes at
// the read bandwidth a stream measures in the same run (bench_host.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "activation_options.h"
#include "bench_ceilings.h"
#include "bench_host.h"
#include "bench_parallel.h"
#include "ceilings_cache.h"
#include "commands.h"
#include "mxmoe/cpu.h"
#include "mxmoe/device.h"
#include "model_presets.h"
#include "mxmoe/dispatch.h"
#include "plot_png.h"
#include "roofline.h"

namespace mxmoe::cli {
namespace {

struct BenchOptions {
  std::string model = "all";
  std::string backend = "auto";
  std::vector<int64_t> tokens;
  bool quick = false;
  int routing_sets = 8;
  int iterations = 0;  // 0: 200 on a GPU; cpu: about a second's worth; reference: 3
  uint64_t seed = 1;
  double warmup_s = 0;  // replays before timing, at least (GPU): 0 times a burst, ~1 s the sustained clock
  double power_s = 0;   // GPU: seconds of replays after the timings over which the board's power is read (0: none)
  std::string json, png;
  int tp = 0, ep = 0;  // ranks of a multi-GPU layer, against one GPU (0: none)
  // One GPU's share of the layer: a tensor-parallel rank's experts at TP =
  // tp_shard (tp_shard_intermediate), or an explicit intermediate size.
  int tp_shard = 0;
  int64_t intermediate = 0;
  ActivationChoice activations;
  bool remeasure_ceilings = false;
};

int fail(const Status& s) {
  std::fprintf(stderr, "mxmoe bench: %s\n", s.message().c_str());
  return 2;
}

std::string today() {
  const std::time_t t = std::time(nullptr);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&t));
  return buf;
}

// The default sweep on a GPU.
std::vector<int64_t> gpu_tokens(bool quick) {
  if (quick) return {1, 4};
  return {1, 4, 16, 64, 256, 1024, 4096, 16384};
}

// The default sweep of a host backend: decode to a prefill chunk for the
// CPU kernels; the reference (seconds a forward at T = 512) decode only.
std::vector<int64_t> host_tokens(BackendKind kind, bool quick) {
  if (quick || kind == BackendKind::kReference) return {1, 4};
  return {1, 4, 16, 64, 512};
}

int run(const BenchOptions& o) {
  std::vector<std::pair<std::string, MoeShape>> models;
  for (const ModelPreset& m : kModelPresets)
    if (o.model == "all" || o.model == m.name) models.emplace_back(m.name, m.shape);
  for (auto& [name, shape] : models) {
    if (o.tp_shard > 0) {
      shape.intermediate = tp_shard_intermediate(shape.intermediate, o.tp_shard);
      name += fmt::format(" TP{} shard", o.tp_shard);
    } else if (o.intermediate > 0) {
      shape.intermediate = o.intermediate;
      name += fmt::format(" I={}", o.intermediate);
    }
  }
  if (o.quick && o.model == "all") models.resize(1);

  std::string why;
  const auto devices = list_devices(&why);
  const bool host = o.backend == "cpu" || o.backend == "reference" || devices.empty();
  const std::string device = host ? cpu_model_name() : devices[0].name;
  nlohmann::json report = {{"date", today()}, {"device", device}, {"models", nlohmann::json::array()}};
  std::vector<PlotSeries> plot;
  const uint32_t colors[] = {0x1F77B4, 0xD62728};
  // The GPU's ceilings, on the first model timed on it, before its weights
  // reach the device (the idle draw is read first).
  std::optional<DeviceCeilings> ceilings;
  auto gpu_ceilings = [&]() -> const DeviceCeilings& {
    if (!ceilings) {
      std::string note;
      ceilings = bench_ceilings(devices.empty() ? 0 : devices[0].index, ceilings_cache_dir(), o.remeasure_ceilings,
                                &note);
      fmt::print("{}\n", describe(*ceilings));
      if (!note.empty()) fmt::print("{}\n", note);
      report["ceilings"] = *ceilings;
    }
    return *ceilings;
  };

  for (size_t m = 0; m < models.size(); ++m) {
    const auto& [name, shape] = models[m];
    if (o.tp > 0 || o.ep > 0) {
      const ParallelMode mode = o.tp > 0 ? ParallelMode::kTensor : ParallelMode::kExpert;
      BackendKind backend = BackendKind::kPortable;
      if (Status s = choose_parallel_backend(o.backend, mode, shape, &backend); !s.ok()) return fail(s);
      const ParallelBench pb{mode, o.tp > 0 ? o.tp : o.ep, backend,
                             o.tokens.empty() ? gpu_tokens(o.quick) : o.tokens, o.routing_sets,
                             o.iterations > 0 ? o.iterations : 200, o.seed};
      nlohmann::json entry;
      if (Status s = bench_parallel_model(name, shape, pb, gpu_ceilings(), colors[m % 2], &entry, &plot); !s.ok())
        return fail(s);
      report["models"].push_back(entry);
      continue;
    }
    DispatchResult choice;
    const ActivationOptions act = o.activations.options();
    if (Status s = choose_backend_for(o.backend, shape, act, &choice); !s.ok()) return fail(s);
    const BackendKind kind = choice.backend;
    const std::string& reason = choice.reason;
    const bool host_kind = kind == BackendKind::kCpu || kind == BackendKind::kReference;
    std::vector<int64_t> tokens = o.tokens;
    if (tokens.empty()) tokens = host_kind ? host_tokens(kind, o.quick) : gpu_tokens(o.quick);
    const int iterations = o.iterations > 0 ? o.iterations : (kind == BackendKind::kReference ? 3 : 200);

    if (!host_kind) gpu_ceilings();
    fmt::print("{}: E={} H={} I={} top-{}; backend {}; device {}\n", name, shape.experts, shape.hidden,
               shape.intermediate, shape.topk, reason, host_kind ? cpu_model_name() : device);
    const MoeWeights weights = make_random_weights(shape, o.seed);
    std::unique_ptr<Backend> backend;
    if (Status s = create_backend(kind, weights.view(), act, &backend); !s.ok()) return fail(s);
    if (host_kind) {
      const HostBench hb{tokens, o.routing_sets, kind == BackendKind::kReference ? iterations : o.iterations, o.seed,
                         o.warmup_s};
      nlohmann::json entry;
      if (Status s = bench_host_model(name, shape, *backend, hb, colors[m % 2], &entry, &plot); !s.ok())
        return fail(s);
      entry["reason"] = reason;
      report["models"].push_back(entry);
      continue;
    }

    const DeviceCeilings& gpu = gpu_ceilings();
    // capped_us: the time the board's power limit allows for the floor's
    // bytes and FLOPs (roofline.h), where it exceeds floor_us the bound; "-"
    // where the ceilings hold no energies for this board.
    // chained_us: per forward with all the sets' forwards in one graph
    // (ForwardTiming::chained_median_us), against the floor in of_floor_ch.
    // sm_MHz, ch_MHz: the median SM clock after the timed batches of each
    // (the power cap lowers it under load; the JSON has every batch's time
    // and clock). With --power-s: W, the board's mean power over that many
    // seconds of replays after the timings, and mJ_fwd, the energy per
    // forward there (the JSON adds that window's time per forward and clock).
    // x_limit, x_limit_ch: median_us and chained_us over the limit, the
    // larger of floor_us and capped_us.
    fmt::print("{:>7} {:>11} {:>10} {:>9} {:>9} {:>10} {:>8} {:>8} {:>10} {:>11} {:>8} {:>10} {:>7} {:>7} {:>6} {:>7}\n",
               "T", "median_us", "floor_us", "of_floor", "bound", "capped_us", "TFLOP/s", "TB/s", "chained_us",
               "of_floor_ch", "x_limit", "x_limit_ch", "sm_MHz", "ch_MHz", "W", "mJ_fwd");
    bool power_note_shown = false;
    nlohmann::json rows = nlohmann::json::array();
    PlotSeries measured{name + " " + backend_name(kind), colors[m % 2], false, {}, {}};
    PlotSeries floor_line{name + " floor", colors[m % 2], true, {}, {}};
    for (int64_t T : tokens) {
      ForwardTiming timing;
      if (Status s = backend->time_forward(T, o.routing_sets, iterations, o.seed, o.warmup_s, o.power_s, &timing);
          !s.ok())
        return fail(s);
      if (!timing.power_note.empty() && !power_note_shown) {
        fmt::print("board power not measured: {}\n", timing.power_note);
        power_note_shown = true;
      }
      std::vector<Routing> sets;
      for (int i = 0; i < o.routing_sets; ++i)
        sets.push_back(make_random_routing(T, shape.experts, shape.topk, o.seed + uint64_t(i)));
      const Floor f = moe_floor(shape, T, mean_experts_touched(sets, shape.experts), gpu);
      const double pct = 100.0 * f.us / timing.median_us;
      const double tflops = f.flops / timing.median_us * 1e-6;
      const double tbps = f.bytes / timing.median_us * 1e-6;
      const double chained = timing.chained_median_us;
      const double pct_chained = chained > 0 ? 100.0 * f.us / chained : 0.0;
      const double limit_us = std::max(f.us, f.capped_us);
      const double x_limit = timing.median_us / limit_us, x_limit_ch = chained / limit_us;
      const std::string chained_cols = chained > 0 ? fmt::format("{:>10.1f} {:>10.1f}%", chained, pct_chained)
                                                   : fmt::format("{:>10} {:>11}", "-", "-");
      const std::string limit_cols = chained > 0 ? fmt::format("{:>8.2f} {:>10.2f}", x_limit, x_limit_ch)
                                                 : fmt::format("{:>8.2f} {:>10}", x_limit, "-");
      const double mhz = timing.median_sm_clock_mhz, ch_mhz = timing.chained_median_sm_clock_mhz;
      auto clock_col = [](double v) { return v > 0 ? fmt::format("{:>7.0f}", v) : fmt::format("{:>7}", "-"); };
      const bool powered = timing.power_w > 0;
      const std::string power_cols = powered ? fmt::format("{:>6.0f} {:>7.2f}", timing.power_w, timing.energy_mj)
                                             : fmt::format("{:>6} {:>7}", "-", "-");
      const std::string capped_col =
          f.capped_us > 0 ? fmt::format("{:>10.1f}", f.capped_us) : fmt::format("{:>10}", "-");
      fmt::print("{:>7} {:>11.1f} {:>10.1f} {:>8.1f}% {:>9} {} {:>8.1f} {:>8.2f} {} {} {} {} {}\n", T,
                 timing.median_us, f.us, pct, f.memory_bound ? "memory" : "math", capped_col, tflops, tbps,
                 chained_cols, limit_cols, clock_col(mhz), clock_col(ch_mhz), power_cols);
      rows.push_back({{"tokens", T}, {"median_us", timing.median_us}, {"min_us", timing.min_us},
                      {"iterations", timing.iterations}, {"floor_us", f.us}, {"percent_of_floor", pct},
                      {"bound", f.memory_bound ? "memory" : "math"}, {"power_capped_us", f.capped_us},
                      {"tflops", tflops}, {"tbps", tbps},
                      {"expert_bytes", f.bytes}, {"flops", f.flops}, {"chained_median_us", chained},
                      {"percent_of_floor_chained", pct_chained}, {"times_limit", x_limit},
                      {"times_limit_chained", chained > 0 ? x_limit_ch : 0.0}, {"median_sm_clock_mhz", mhz},
                      {"chained_median_sm_clock_mhz", ch_mhz}, {"batch_us", timing.batch_us},
                      {"batch_sm_clock_mhz", timing.batch_sm_clock_mhz}, {"chained_batch_us", timing.chained_batch_us},
                      {"chained_batch_sm_clock_mhz", timing.chained_batch_sm_clock_mhz}, {"power_w", timing.power_w},
                      {"power_window_us", timing.power_window_us},
                      {"power_window_sm_clock_mhz", timing.power_window_sm_clock_mhz},
                      {"energy_mj", timing.energy_mj}, {"power_note", timing.power_note}});
      measured.x.push_back(double(T)), measured.y.push_back(timing.median_us);
      floor_line.x.push_back(double(T)), floor_line.y.push_back(f.us);
    }
    report["models"].push_back({{"model", name}, {"experts", shape.experts}, {"hidden", shape.hidden},
                                {"intermediate", shape.intermediate}, {"backend", backend_name(kind)}, {"reason", reason},
                                {"routing_sets", o.routing_sets}, {"min_warmup_s", o.warmup_s},
                                {"power_window_s", o.power_s}, {"rows", rows}});
    plot.push_back(measured);
    plot.push_back(floor_line);
  }
  if (!o.json.empty()) {
    std::ofstream f(o.json);
    f << report.dump(2) << "\n";
    if (!f) return fail(Status::IoError(o.json + ": write failed"));
    fmt::print("wrote {}\n", o.json);
  }
  if (!o.png.empty()) {
    if (Status s = write_loglog_png(o.png, "MXFP4 MOE FORWARD, " + device + ", " + today(), "TOKENS T",
                                    "TIME (US)", plot);
        !s.ok())
      return fail(s);
    fmt::print("wrote {}\n", o.png);
  }
  return 0;
}

}  // namespace

Runner add_bench(CLI::App& parent) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* app = parent.add_subcommand("bench", "Time a backend over a token sweep on GPT-OSS shapes");
  app->add_option("--model", o->model, "gpt-oss-20b, gpt-oss-120b or all")
      ->check(CLI::IsMember([] {
        auto names = model_names();
        names.push_back("all");
        return names;
      }()))->capture_default_str();
  app->add_option("--backend", o->backend, "auto, cpu, portable, sm90, sm100, sm120")->capture_default_str();
  add_activation_options(*app, o->activations);
  app->add_option("--tokens", o->tokens, "Token counts (default 1 4 16 ... 16384; cpu: 1 4 16 64 512; reference: 1 4)")
      ->delimiter(',')
      ->check(integer_at_least(1));
  auto* shard = app->add_option("--tp-shard", o->tp_shard,
                                "One GPU's share at tensor parallel N: the model's experts with I / N rounded up "
                                "to whole 32-blocks (gpt-oss: 1440, 736, 384 at N = 2, 4, 8)")
                    ->check(integer_at_least(1));
  app->add_option("--intermediate", o->intermediate, "The model's experts with this intermediate size instead")
      ->check(integer_at_least(32))->excludes(shard);
  app->add_flag("--quick", o->quick, "A short smoke run: T = 1, 4 on one model");
  app->add_option("--routing-sets", o->routing_sets, "Routing sets rotated so weights do not stay in L2")
      ->capture_default_str()->check(integer_at_least(1));
  app->add_option("--iterations", o->iterations,
                  "Timed forwards per T (default or 0: 200 GPU; cpu about a second's worth, 5 to 200; reference 3)")
      ->check(integer_at_least(0));
  app->add_option("--seed", o->seed, "Seed for weights, inputs and routing")->capture_default_str();
  auto* warmup = app->add_option("--warmup-s", o->warmup_s,
                                 "GPU: replay for at least this many seconds before timing (default: three replays "
                                 "of every set, a burst; ~1 s reaches the clock a sustained load holds)")
                     ->check(CLI::Range(0.0, 60.0));
  auto* power = app->add_option("--power-s", o->power_s,
                                "GPU: after each T's timings, replay for about this many seconds and report the "
                                "board's mean power (W) and the energy per forward (mJ_fwd), from its energy counter")
                    ->check(CLI::Range(0.0, 60.0));
  app->add_flag("--remeasure-ceilings", o->remeasure_ceilings,
                "GPU: measure the copy and bf16 GEMM rates, power limit and idle draw again instead of reading "
                "them from the cache ($XDG_CACHE_HOME/mxmoe or ~/.cache/mxmoe), e.g. after a clock or power "
                "limit change");
  app->add_option("--json", o->json, "Write the results as JSON");
  app->add_option("--png", o->png, "Draw time vs T (log axes) with the floor as PNG");
  auto* tp = app->add_option("--tp", o->tp, "Time the layer tensor parallel over N GPUs against one GPU")
                 ->check(integer_at_least(1))->excludes(warmup)->excludes(power)->excludes(shard);
  app->add_option("--ep", o->ep, "Time the layer expert parallel over N GPUs against one GPU")
      ->check(integer_at_least(1))->excludes(tp)->excludes(warmup)->excludes(power);
  return [o] { return run(*o); };
}

}  // namespace mxmoe::cli
