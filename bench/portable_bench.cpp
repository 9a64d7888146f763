// Times the portable backend on gpt-oss-20b / -120b MoE shapes (random MXFP4
// weights, random routing sets rotated so the touched experts do not stay in
// L2) and prints a markdown table against the floor
//   max(bytes of the experts touched / 4.14 TB/s, 2*T*k*(2I*H + H*I) / 730 TFLOP/s).
// Usage: portable_bench [20b|120b|both] [T,T,...]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/portable/portable_backend.h"
#include "mxmoe/backend.h"
#include "mxmoe/moe.h"

using namespace mxmoe;

namespace {
constexpr double kBandwidth = 4.14e12;  // bytes/s, measured device-to-device copy class
constexpr double kMatrixRate = 730e12;  // bf16 FLOP/s

double expert_bytes(const MoeShape& s) {
  const double H = double(s.hidden), I = double(s.intermediate);
  return 2 * I * H / 2 + 2 * I * H / 32 + H * I / 2 + H * I / 32 + 2 * I * 2 + H * 2;
}

int run(const char* name, const MoeShape& shape, const std::vector<int64_t>& Ts) {
  std::fprintf(stderr, "%s: making random weights...\n", name);
  const MoeWeights w = make_random_weights(shape, 1);
  std::unique_ptr<Backend> be;
  const Status st = create_portable_backend(w.view(), &be);
  if (!st.ok()) { std::fprintf(stderr, "create: %s\n", st.message().c_str()); return 1; }
  std::printf("\n### %s (E=%lld, H=%lld, I=%lld, k=%lld)\n\n", name, (long long)shape.experts,
              (long long)shape.hidden, (long long)shape.intermediate, (long long)shape.topk);
  std::printf("| T | median us | min us | floor us | %% of floor (floor/time) | TFLOP/s | experts touched |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int64_t T : Ts) {
    const int sets = 8;
    const int iters = T >= 4096 ? 40 : 200;
    const uint64_t seed = 1000;
    double touched = 0;
    for (int i = 0; i < sets; ++i) {
      const Routing r = make_random_routing(T, shape.experts, shape.topk, seed + uint64_t(i));
      touched += double(std::set<int32_t>(r.ids.begin(), r.ids.end()).size());
    }
    touched /= sets;
    const double flops = 2.0 * double(T) * double(shape.topk) *
                         (2.0 * shape.intermediate * shape.hidden + double(shape.hidden) * shape.intermediate);
    const double floor_us = std::max(touched * expert_bytes(shape) / kBandwidth, flops / kMatrixRate) * 1e6;
    ForwardTiming t;
    const Status ts = be->time_forward(T, sets, iters, seed, &t);
    if (!ts.ok()) { std::fprintf(stderr, "T=%lld: %s\n", (long long)T, ts.message().c_str()); return 1; }
    std::printf("| %lld | %.1f | %.1f | %.1f | %.0f%% | %.1f | %.1f |\n", (long long)T, t.median_us, t.min_us,
                floor_us, 100.0 * floor_us / t.median_us, flops / (t.median_us * 1e-6) / 1e12, touched);
    std::fflush(stdout);
  }
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  const std::string which = argc > 1 ? argv[1] : "both";
  std::vector<int64_t> Ts = {1, 4, 16, 64, 256, 1024, 4096, 16384};
  if (argc > 2) {
    Ts.clear();
    std::stringstream ss(argv[2]);
    for (std::string tok; std::getline(ss, tok, ',');) Ts.push_back(std::stoll(tok));
  }
  int rc = 0;
  if (which == "20b" || which == "both") rc |= run("gpt-oss-20b", kGptOss20b, Ts);
  if (which == "120b" || which == "both") rc |= run("gpt-oss-120b", kGptOss120b, Ts);
  return rc;
}
