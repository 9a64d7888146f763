#include "support/test_support.h"

#include <cmath>
#include <limits>
#include <random>

#include "mxmoe/device.h"
#include "mxmoe/format.h"

namespace mxmoe::testing {

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return std::numeric_limits<double>::infinity();
    const double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * double(b[i]);
  }
  return den == 0 ? (num == 0 ? 0 : std::numeric_limits<double>::infinity()) : std::sqrt(num / den);
}

double l2_norm(const std::vector<float>& a) {
  double s = 0;
  for (float v : a) s += double(v) * double(v);
  return std::sqrt(s);
}

std::vector<float> random_floats(size_t n, uint64_t seed, float sigma) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<float> round_to_bf16(std::vector<float> v) {
  for (auto& x : v) x = bf16_to_float(float_to_bf16(x));
  return v;
}

bool gpu_available(std::string* why) { return !list_devices(why).empty(); }

}  // namespace mxmoe::testing
