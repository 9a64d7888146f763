// What `run` does with a forward's output: compare it with another output
// (relative L2, the gate is 1e-2 with a non-zero reference) and write it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mxmoe/backend.h"
#include "mxmoe/moe.h"
#include "mxmoe/status.h"

namespace mxmoe::cli {

struct Comparison {
  double rel = 0;       // ||y - ref|| / ||ref||; NaN when either holds NaN
  double ref_norm = 0;  // ||ref||
  bool ok() const { return rel <= 1e-2 && ref_norm > 0; }
};
Comparison compare_outputs(const std::vector<float>& y, const std::vector<float>& ref);

// y against the fp64 CPU reference on x, rounded to bf16 first when the
// backend consumed bf16 activations (every GPU backend does).
Status compare_with_reference(const MoeWeightsView& w, const std::vector<float>& x, int64_t tokens,
                              bool bf16_activations, const ActivationOptions& activations,
                              const std::vector<float>& y, Comparison* out);

// "<what> = 1.234e-03, ||ref|| = 5.678e+01 (ok)" (or FAIL).
void print_comparison(const char* what, const Comparison& c);

// --output: y as float32 [T, H] .npy, and a line saying so.
Status write_output(const std::string& path, const std::vector<float>& y, int64_t tokens, int64_t hidden);

}  // namespace mxmoe::cli
