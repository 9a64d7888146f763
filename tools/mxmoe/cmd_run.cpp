// mxmoe run: one MoE layer forward.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>

#include <fmt/format.h>

#include "activation_options.h"
#include "commands.h"
#include "io/npy.h"
#include "mxmoe/dispatch.h"
#include "run_output.h"
#include "run_parallel.h"
#include "weights_source.h"

namespace mxmoe::cli {
namespace {

struct RunOptions {
  WeightsOptions weights;
  int64_t tokens = 8;
  std::string input, output, backend = "auto";
  bool check = false;
  int tp = 0, ep = 0;  // ranks of a multi-GPU run (0: one device)
  ActivationChoice activations;
};

int fail(const Status& s) {
  std::fprintf(stderr, "mxmoe run: %s\n", s.message().c_str());
  return 2;
}

// x: from --input (float32 [T, H], T >= 1, finite) or N(0, 1) in --seed.
Status load_input(const RunOptions& o, int64_t hidden, NpyArray* x) {
  if (!o.input.empty()) {
    MXMOE_RETURN_IF_ERROR(read_npy_f32_matrix(o.input, hidden, x));
    // Every backend refuses a forward of no tokens; this names the file.
    if (x->shape[0] == 0)
      return Status::InvalidArgument(fmt::format("{}: shape (0, {}) holds no tokens; x needs at least one row",
                                                 o.input, hidden));
    for (size_t i = 0; i < x->data.size(); ++i)
      if (!std::isfinite(x->data[i]))
        return Status::InvalidArgument(fmt::format("{}: non-finite value {} at [{}, {}]", o.input,
                                                   x->data[i], i / size_t(hidden), i % size_t(hidden)));
    return Status::Ok();
  }
  std::mt19937_64 rng(o.weights.seed + 1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  x->shape = {o.tokens, hidden};
  x->data.resize(size_t(o.tokens * hidden));
  for (auto& v : x->data) v = normal(rng);
  return Status::Ok();
}

int run(const RunOptions& o) {
  // The shape (and so H) is known only once the weights are open.
  LoadedWeights w;
  if (Status s = load_weights(o.weights, &w); !s.ok()) return fail(s);
  const MoeShape& shape = w.view.shape;
  NpyArray x;
  if (Status s = load_input(o, shape.hidden, &x); !s.ok()) return fail(s);
  const int64_t T = x.shape[0];
  const ActivationOptions act = o.activations.options();
  if (o.tp > 0 || o.ep > 0) {
    if (act.format != ActivationFormat::kBf16)
      return fail(Status::Unsupported("--tp / --ep run the bf16-activation GPU backends; drop --activations mxfp8"));
    const ParallelRun run{o.tp > 0 ? ParallelMode::kTensor : ParallelMode::kExpert, o.tp > 0 ? o.tp : o.ep,
                          o.backend, o.check, o.output};
    return run_parallel(run, w.view, x.data, T);
  }
  DispatchResult choice;
  if (Status s = choose_backend_for(o.backend, shape, act, &choice); !s.ok()) return fail(s);
  const BackendKind kind = choice.backend;
  const std::string& reason = choice.reason;
  std::unique_ptr<Backend> backend;
  if (Status s = create_backend(kind, w.view, act, &backend); !s.ok()) return fail(s);

  std::vector<float> y(size_t(T * shape.hidden));
  const auto t0 = std::chrono::steady_clock::now();
  if (Status s = backend->forward_host(x.data.data(), T, nullptr, y.data()); !s.ok()) return fail(s);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("backend: %s\n", reason.c_str());
  std::printf("activations: %s\n", act.format == ActivationFormat::kMxfp8
                                         ? (act.mxfp8_scale_rule == MxScaleRule::kOcp ? "mxfp8 (OCP scales)"
                                                                                      : "mxfp8 (ceil scales)")
                                         : "bf16");
  std::printf("layer: E=%lld H=%lld I=%lld top-%lld, T=%lld; forward %.3f ms (wall, host to host)\n",
              (long long)shape.experts, (long long)shape.hidden, (long long)shape.intermediate,
              (long long)shape.topk, (long long)T, ms);

  if (o.check) {
    // GPU backends consume bf16 activations: give the reference the same x
    // (and, for MXFP8, the same activation format).
    Comparison c;
    if (Status s = compare_with_reference(w.view, x.data, T, kind != BackendKind::kReference, act, y, &c); !s.ok())
      return fail(s);
    print_comparison("check: rel L2 vs fp64 reference", c);
    if (!c.ok()) return 1;
  }
  if (!o.output.empty())
    if (Status s = write_output(o.output, y, T, shape.hidden); !s.ok()) return fail(s);
  return 0;
}

}  // namespace

Runner add_run(CLI::App& parent) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* app = parent.add_subcommand("run", "Run one MoE layer forward");
  add_weights_options(*app, o->weights);
  app->add_option("--tokens", o->tokens, "Tokens T when no --input is given")->capture_default_str()
      ->check(integer_at_least(1));
  app->add_option("--input", o->input, "x: float32 [T, H] .npy (C order)");
  app->add_option("--output", o->output, "y: float32 [T, H] .npy");
  app->add_option("--backend", o->backend, "auto, cpu, portable, sm90, sm100, sm120")->capture_default_str();
  app->add_flag("--check", o->check, "Compare with the fp64 CPU reference (rel L2 <= 1e-2)");
  add_activation_options(*app, o->activations);
  auto* tp = app->add_option("--tp", o->tp, "Tensor parallel over N GPUs (1, 2, 4, 8); compares with one GPU")
                 ->check(integer_at_least(1));
  app->add_option("--ep", o->ep, "Expert parallel over N GPUs (N divides E); compares with one GPU")
      ->check(integer_at_least(1))->excludes(tp);
  return [o] { return run(*o); };
}

}  // namespace mxmoe::cli
