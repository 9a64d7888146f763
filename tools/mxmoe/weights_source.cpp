#include "weights_source.h"

#include <fmt/format.h>

namespace mxmoe::cli {

void add_weights_options(CLI::App& app, WeightsOptions& o) {
  app.add_flag("--random-weights", o.random, "Synthetic MXFP4 weights (deterministic in --seed)");
  app.add_option("--seed", o.seed, "Seed for synthetic weights and inputs")->capture_default_str();
  app.add_option("--model", o.model, "Shape preset")->check(CLI::IsMember({"gpt-oss-20b", "gpt-oss-120b"}));
  app.add_option("--experts", o.shape.experts, "Experts E")->capture_default_str();
  app.add_option("--hidden", o.shape.hidden, "Hidden size H (multiple of 32)")->capture_default_str();
  app.add_option("--intermediate", o.shape.intermediate, "Expert intermediate size I (multiple of 32)")
      ->capture_default_str();
  app.add_option("--topk", o.shape.topk, "Experts per token")->capture_default_str();
}

Status load_weights(const WeightsOptions& o, LoadedWeights* out) {
  MoeShape shape = o.shape;
  if (o.model == "gpt-oss-20b") shape.experts = kGptOss20b.experts;
  if (o.model == "gpt-oss-120b") shape.experts = kGptOss120b.experts;
  if (!o.random) return Status::InvalidArgument("no weights: pass --random-weights");
  MXMOE_RETURN_IF_ERROR(validate_shape(shape));
  auto owned = std::make_shared<MoeWeights>(make_random_weights(shape, o.seed));
  out->view = owned->view();
  out->owner = owned;
  return Status::Ok();
}

}  // namespace mxmoe::cli
