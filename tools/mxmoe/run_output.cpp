#include "run_output.h"

#include <cmath>
#include <cstdio>

#include "io/npy.h"
#include "mxmoe/format.h"
#include "mxmoe/reference.h"

namespace mxmoe::cli {

Comparison compare_outputs(const std::vector<float>& y, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    num += (double(y[i]) - ref[i]) * (double(y[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  // NaN anywhere makes num or den NaN, and a NaN rel fails the comparison.
  return {den > 0 ? std::sqrt(num / den) : (num == 0 ? 0.0 : NAN), std::sqrt(den)};
}

Status compare_with_reference(const MoeWeightsView& w, const std::vector<float>& x, int64_t tokens,
                              bool bf16_activations, const ActivationOptions& activations,
                              const std::vector<float>& y, Comparison* out) {
  std::vector<float> xr = x;
  if (bf16_activations)
    for (auto& v : xr) v = bf16_to_float(float_to_bf16(v));
  std::vector<float> ref(y.size());
  MXMOE_RETURN_IF_ERROR(
      reference_forward(w, xr.data(), tokens, nullptr, ref.data(), {.fp64 = true, .activations = activations}));
  *out = compare_outputs(y, ref);
  return Status::Ok();
}

void print_comparison(const char* what, const Comparison& c) {
  std::printf("%s = %.3e, ||ref|| = %.3e (%s)\n", what, c.rel, c.ref_norm, c.ok() ? "ok" : "FAIL");
}

Status write_output(const std::string& path, const std::vector<float>& y, int64_t tokens, int64_t hidden) {
  MXMOE_RETURN_IF_ERROR(write_npy_f32(path, y.data(), {tokens, hidden}));
  std::printf("wrote %s [%lld, %lld] float32\n", path.c_str(), (long long)tokens, (long long)hidden);
  return Status::Ok();
}

}  // namespace mxmoe::cli
