// `--activations` and `--mxfp8-scale-rule`, shared by `run` and `bench`, and
// the backend choice that honours them.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "mxmoe/backend.h"
#include "mxmoe/dispatch.h"

namespace mxmoe::cli {

struct ActivationChoice {
  std::string format = "bf16";     // bf16 | mxfp8
  std::string scale_rule = "ceil";  // ceil (2^ceil(log2(amax / 448))) | ocp
  ActivationOptions options() const;
};

void add_activation_options(CLI::App& app, ActivationChoice& o);

// choose_backend_for_this_process for `backend`, skipping (auto) or refusing
// (forced) backends whose GEMMs do not consume the chosen activations.
Status choose_backend_for(const std::string& backend, const MoeShape& shape, const ActivationOptions& activations,
                          DispatchResult* out);

}  // namespace mxmoe::cli
