#include "weights_source.h"

#include <chrono>
#include <cstdio>

#include <fmt/format.h>

#include "commands.h"
#include "model_presets.h"
#include "mxmoe/checkpoint.h"

namespace mxmoe::cli {

void add_weights_options(CLI::App& app, WeightsOptions& o) {
  app.add_flag("--random-weights", o.random, "Synthetic MXFP4 weights (deterministic in --seed)");
  app.add_option("--seed", o.seed, "Seed for synthetic weights and inputs")->capture_default_str();
  CLI::Option* model = app.add_option("--model", o.model, "Shape preset (E, H and I)")
                           ->check(CLI::IsMember(model_names()));
  // A preset is the whole expert shape: an explicit size beside it would be
  // overridden without a word.
  model->excludes(app.add_option("--experts", o.shape.experts, "Experts E")->capture_default_str());
  model->excludes(app.add_option("--hidden", o.shape.hidden, "Hidden size H (multiple of 32)")->capture_default_str());
  model->excludes(app.add_option("--intermediate", o.shape.intermediate, "Expert intermediate size I (multiple of 32)")
                      ->capture_default_str());
  app.add_option_function<int64_t>(
         "--topk", [&o](const int64_t& k) { o.shape.topk = k; o.topk_given = k; },
         "Experts per token (default 4; with --checkpoint, overrides its config)")
      ->check(integer_at_least(1));
  model->excludes(app.add_option("--checkpoint", o.checkpoint,
                                 "GPT-OSS safetensors: a folder (config.json + shards) or one .safetensors file"));
  app.add_option("--layer", o.layer, "Layer of --checkpoint to run")->capture_default_str();
}

namespace {

// Progress on stderr once a step has run for more than a moment (a 120b
// layer's NaN-scale check reads ~100 MB of scales from disk).
CheckpointProgress stderr_progress() {
  const auto start = std::chrono::steady_clock::now();
  auto shown = std::make_shared<bool>(false);
  return [start, shown](const std::string& stage, int64_t done, int64_t total) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (s < 0.5 && !*shown) return;
    *shown = true;
    std::fprintf(stderr, "\rmxmoe: %s: %.0f / %.0f MB (%.1f s)", stage.c_str(), double(done) / 1e6,
                 double(total) / 1e6, s);
    if (done >= total) std::fputc('\n', stderr);
  };
}

Status load_checkpoint(const WeightsOptions& o, LoadedWeights* out) {
  CheckpointOptions opt;
  opt.topk = o.topk_given;
  opt.progress = stderr_progress();
  std::unique_ptr<Checkpoint> ckpt;
  MXMOE_RETURN_IF_ERROR(Checkpoint::open(o.checkpoint, opt, &ckpt));
  MXMOE_RETURN_IF_ERROR(ckpt->layer(o.layer, &out->view));
  const CheckpointInfo& info = ckpt->info();
  std::fprintf(stderr, "checkpoint: %s (%s names, %lld layers, %zu file(s)), layer %lld\n",
               o.checkpoint.c_str(), info.naming.c_str(), (long long)info.layers,
               info.files.size(), (long long)o.layer);
  // The view points into the checkpoint's mappings: keep them alive with it.
  out->owner = std::shared_ptr<Checkpoint>(std::move(ckpt));
  return Status::Ok();
}

}  // namespace

Status load_weights(const WeightsOptions& o, LoadedWeights* out) {
  MoeShape shape = o.shape;
  if (const MoeShape* preset = find_model(o.model)) {
    shape.experts = preset->experts;
    shape.hidden = preset->hidden;
    shape.intermediate = preset->intermediate;
  }
  if (o.random && !o.checkpoint.empty())
    return Status::InvalidArgument("pass either --random-weights or --checkpoint, not both");
  if (!o.checkpoint.empty()) return load_checkpoint(o, out);
  if (!o.random) return Status::InvalidArgument("no weights: pass --random-weights or --checkpoint PATH");
  MXMOE_RETURN_IF_ERROR(validate_shape(shape));
  auto owned = std::make_shared<MoeWeights>(make_random_weights(shape, o.seed));
  out->view = owned->view();
  out->owner = owned;
  return Status::Ok();
}

}  // namespace mxmoe::cli
