#include "activation_options.h"

namespace mxmoe::cli {

ActivationOptions ActivationChoice::options() const {
  ActivationOptions a;
  a.format = parse_activation_format(format).value_or(ActivationFormat::kBf16);  // the parser checked it
  a.mxfp8_scale_rule = scale_rule == "ocp" ? MxScaleRule::kOcp : MxScaleRule::kTriton;
  return a;
}

void add_activation_options(CLI::App& app, ActivationChoice& o) {
  app.add_option("--activations", o.format, "What the expert GEMMs consume: bf16, or mxfp8 (E4M3 + E8M0 per 32)")
      ->capture_default_str()
      ->check(CLI::IsMember({"bf16", "mxfp8"}));
  app.add_option("--mxfp8-scale-rule", o.scale_rule,
                 "MXFP8 scales: ceil (2^ceil(log2(amax/448)), the Blackwell engines') or ocp (2^(floor(log2 amax)-8))")
      ->capture_default_str()
      ->check(CLI::IsMember({"ceil", "ocp"}));
}

Status choose_backend_for(const std::string& backend, const MoeShape& shape, const ActivationOptions& activations,
                          DispatchResult* out) {
  DispatchInput in = dispatch_input_for_this_process(backend, shape);
  in.activations = activations.format;
  return choose_backend(in, out);
}

}  // namespace mxmoe::cli
