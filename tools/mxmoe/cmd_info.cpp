// mxmoe info: what this binary carries, what it sees, what `auto` picks and why,
// and what each backend's preparation would hold for a checkpoint's shape.
#include <cstdio>
#include <memory>

#include <fmt/format.h>

#include "commands.h"
#include "cuda/common/grouping_heuristics.h"
#include "cuda/common/router_heuristics.h"
#include "cuda/portable/heuristics.h"
#include "cuda/sm90/heuristics.h"
#include "model_presets.h"
#include "mxmoe/checkpoint.h"
#include "mxmoe/cpu.h"
#include "mxmoe/device.h"
#include "mxmoe/dispatch.h"
#include "mxmoe/prepare.h"

namespace mxmoe::cli {
namespace {

struct InfoOptions {
  std::string checkpoint;
  std::string model = "gpt-oss-20b";
  int tp_shard = 0;  // one rank's experts at tensor parallel N (tp_shard_intermediate)
};

int fail(const Status& s) {
  std::fprintf(stderr, "mxmoe info: %s\n", s.message().c_str());
  return 2;
}

int run(const InfoOptions& o) {
  MoeShape shape = *find_model(o.model);  // the option accepts preset names only
  std::string shape_source = o.model + " shape";
  if (!o.checkpoint.empty()) {
    std::unique_ptr<Checkpoint> ckpt;
    if (Status s = Checkpoint::open(o.checkpoint, std::nullopt, &ckpt); !s.ok()) return fail(s);
    shape = ckpt->info().shape;
    shape_source = "checkpoint " + o.checkpoint;
  }
  if (o.tp_shard > 0) {
    shape.intermediate = tp_shard_intermediate(shape.intermediate, o.tp_shard);
    shape_source += fmt::format(", one rank's experts at tensor parallel {}", o.tp_shard);
  }
  const auto archs = compiled_cuda_archs();
  fmt::print("mxmoe {}\n", MXMOE_VERSION);
  fmt::print("build: CUDA archs compiled in: {}\n",
             archs.empty() ? "none (CPU-only build)" : fmt::format("{}", fmt::join(archs, ", ")));
  std::vector<std::string> left_out;
  for (const LeftOutBackend& l : compiled_backends_left_out())
    left_out.push_back(fmt::format("{} ({})", backend_name(l.kind), l.reason));
  fmt::print("build: backends left out: {}\n", left_out.empty() ? "none" : fmt::format("{}", fmt::join(left_out, ", ")));
  std::string why;
  const auto devices = list_devices(&why);
  if (devices.empty()) fmt::print("devices: none ({})\n", why);
  for (const auto& d : devices)
    fmt::print("device {}: {}, SM{}, {} SMs, {:.1f} GiB, L2 {:.0f} MiB\n", d.index, d.name, d.sm,
               d.multiprocessors, double(d.memory_bytes) / (1 << 30), double(d.l2_bytes) / (1 << 20));
  fmt::print("{}\n", describe_cpu());
  fmt::print("\n{}", describe_backends(dispatch_input_for_this_process("auto", shape)));
  fmt::print("\npreparation for the {} (E={} H={} I={} top-{}):\n{}", shape_source, shape.experts, shape.hidden,
             shape.intermediate, shape.topk, describe_preparation(shape));
  // What the portable and sm90 backends would run at each token count of the bench sweep, on this
  // GPU's SM count or an H200's.
  const int sms = devices.empty() ? 132 : devices.front().multiprocessors;
  // The decode GEMMs' block warps for a plan's padded shape (8-token tiles
  // only): GEMM2's are the fused kernel's where it runs with the combine;
  // the one-launch decode's grid.
  const auto decode_blocks = [&](int64_t T, const PreparePlan& plan) {
    if (portable::fused_decode(T, shape.topk))
      return "; " + portable::describe_fused_decode_grid(T, shape.topk, 2 * plan.intermediate_padded / 32,
                                                         shape.hidden / 32, sms);
    portable::DecodeWarps w = portable::decode_warps(T, shape.topk, shape.experts, 2 * plan.intermediate_padded,
                                                     plan.hidden_padded, sms);
    if (const int fused = portable::down_combine_warps(T, shape.topk, shape.experts, plan.intermediate_padded))
      w.gemm2 = fused;
    return "; " + portable::describe_decode_warps(w, sms);
  };
  const PreparePlan portable_plan = make_plan(BackendKind::kPortable, shape);
  fmt::print("\nportable configuration per token count (docs/PERF.md):\n");
  for (int64_t T : {1, 4, 16, 64, 256, 1024, 4096, 16384})
    fmt::print("  T = {:>5}: {}{}\n", T, portable::describe_tiles(T, shape.topk, shape.experts, portable_plan.intermediate_padded),
               portable::token_tile(T, shape.topk, shape.experts) == 8 ? decode_blocks(T, portable_plan) : "");
  const PreparePlan sm90_plan = make_plan(BackendKind::kSm90, shape);
  fmt::print("\nsm90 configuration per token count (heuristics measured on an H200; docs/PERF.md):\n");
  for (int64_t T : {1, 4, 16, 64, 256, 1024, 4096, 16384}) {
    const sm90::Config c =
        sm90::choose_config(T, shape.topk, shape.experts, sm90_plan.hidden_padded, sm90_plan.intermediate_padded);
    const bool tiles8 = c.path == sm90::Path::kPortableDecode && portable::token_tile(T, shape.topk, shape.experts) == 8;
    fmt::print("  T = {:>5}: {}{}\n", T, sm90::describe(c), tiles8 ? decode_blocks(T, sm90_plan) : "");
  }
  // The fused router (forwards without the caller's routing), on this GPU or on an H200.
  fmt::print("\nfused router on SM90+ ({} SMs{}): {}; below SM90 one block a 16-token block\n", sms,
             devices.empty() ? ", an H200" : "", smxx::describe_router(shape.experts, sms));
  fmt::print("grouping by expert: {}\n", smxx::describe_grouping());
  return 0;
}

}  // namespace

Runner add_info(CLI::App& parent) {
  auto o = std::make_shared<InfoOptions>();
  CLI::App* app = parent.add_subcommand("info", "Build, devices, backends, the one `auto` picks, padded shapes");
  app->add_option("--checkpoint", o->checkpoint, "Show padded shapes and bytes for this checkpoint's shape");
  app->add_option("--model", o->model, "Shape preset when no checkpoint is given")
      ->check(CLI::IsMember(model_names()))->capture_default_str();
  app->add_option("--tp-shard", o->tp_shard,
                  "The shape one GPU holds at tensor parallel N (I / N rounded up to whole 32-blocks)")
      ->check(integer_at_least(1));
  return [o] { return run(*o); };
}

}  // namespace mxmoe::cli
