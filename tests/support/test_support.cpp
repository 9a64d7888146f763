#include "support/test_support.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>

#include "mxmoe/device.h"
#include "mxmoe/format.h"
#include "mxmoe/reference.h"

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

ScopedEnv::ScopedEnv(const char* name, const char* value) : name_(name) {
  if (const char* old = std::getenv(name)) old_ = old;
  if (value) setenv(name, value, 1);
  else unsetenv(name);
}

ScopedEnv::~ScopedEnv() {
  if (old_) setenv(name_, old_->c_str(), 1);
  else unsetenv(name_);
}

std::vector<float> round_to_bf16(std::vector<float> v) {
  for (auto& x : v) x = bf16_to_float(float_to_bf16(x));
  return v;
}

bool gpu_available(std::string* why) { return !list_devices(why).empty(); }

bool quick_sweep() {
  const char* q = std::getenv("MXMOE_TEST_QUICK");
  return q && *q && std::string(q) != "0";
}

const char* route_mode_name(RouteMode m) {
  switch (m) {
    case RouteMode::kRouter: return "router";
    case RouteMode::kRandom: return "random";
    case RouteMode::kOneExpert: return "one-expert";
    case RouteMode::kRepeatedExpert: return "repeated-expert";
    case RouteMode::kFewExperts: return "few-experts";
    case RouteMode::kLowExperts: return "low-experts";
  }
  return "?";
}

std::string describe_case(const MoeShape& s, int64_t tokens, RouteMode mode) {
  return "E=" + std::to_string(s.experts) + " H=" + std::to_string(s.hidden) + " I=" + std::to_string(s.intermediate) +
         " k=" + std::to_string(s.topk) + " T=" + std::to_string(tokens) + " routing=" + route_mode_name(mode);
}

Routing make_test_routing(RouteMode mode, int64_t T, const MoeShape& s, uint64_t seed) {
  Routing r = make_random_routing(T, s.experts, s.topk, seed);
  const int64_t k = s.topk;
  for (int64_t t = 0; t < T; ++t) {
    int32_t* ids = r.ids.data() + t * k;
    switch (mode) {
      case RouteMode::kRouter:
      case RouteMode::kRandom: break;
      case RouteMode::kOneExpert:
        for (int64_t j = 0; j < k; ++j) ids[j] = int32_t(j == 0 ? s.experts - 1 : j - 1);
        break;
      case RouteMode::kLowExperts:
        for (int64_t j = 0; j < k; ++j) ids[j] = int32_t(j);
        break;
      case RouteMode::kRepeatedExpert:
        for (int64_t j = 0; j < k; ++j) ids[j] = int32_t(1 % s.experts);
        break;
      case RouteMode::kFewExperts: {
        std::vector<bool> seen(size_t(s.experts), false);
        for (int64_t j = 0; j < k; ++j) {
          int32_t id = int32_t((t + j) % k == 0 && k < s.experts ? s.experts - 1 : (t + j) % k);
          while (seen[size_t(id)]) id = (id + 1) % int32_t(s.experts);  // keep a token's ids distinct
          seen[size_t(id)] = true;
          ids[j] = id;
        }
        break;
      }
    }
  }
  return r;
}

std::vector<float> expect_matches_reference(Backend& be, const MoeWeights& w, const std::vector<float>& x,
                                            int64_t tokens, RouteMode mode, uint64_t routing_seed) {
  std::vector<float> y(x.size()), ref(x.size());
  Routing r;
  RoutingView view;
  const RoutingView* rv = nullptr;
  if (mode != RouteMode::kRouter) {
    r = make_test_routing(mode, tokens, w.shape, routing_seed);
    view = r.view();
    rv = &view;
  }
  const Status fs = be.forward_host(x.data(), tokens, rv, y.data());
  EXPECT_TRUE(fs.ok()) << fs.message();
  const Status rs = reference_forward(w.view(), x.data(), tokens, rv, ref.data());
  EXPECT_TRUE(rs.ok()) << rs.message();
  EXPECT_LE(rel_l2(y, ref), 1e-2);
  EXPECT_GT(l2_norm(y), 0.0);
  return y;
}

}  // namespace mxmoe::testing
