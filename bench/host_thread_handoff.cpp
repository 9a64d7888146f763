// What running the cpu backend's forward on another thread costs, as a
// host-memory layer does (CUDA's host-function thread starts its own OpenMP
// team): gpt-oss-120b's layer at T = 1 (routing rotated over 16 sets),
// median microseconds of 50 forwards run
//   direct:   on this thread;
//   sleeps:   on one persistent worker thread, this thread polling every 20 us;
//   spins:    on the worker, this thread spinning until it is done (as a
//             thread in cudaStreamSynchronize does under CUDA's default).
// Run it under OMP_WAIT_POLICY=active / passive and OMP_NUM_THREADS = the
// cores to see the two teams' idle threads and the spinning waiter take
// cores from the work. CPU only. Usage: host_thread_handoff [--experts 128]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "mxmoe/format.h"
#include "mxmoe/layer.h"

using namespace mxmoe;

int main(int argc, char** argv) {
  int64_t experts = 128;
  for (int i = 1; i + 1 < argc; i += 2)
    if (!std::strcmp(argv[i], "--experts")) experts = std::atoll(argv[i + 1]);
  const MoeShape s{experts, 2880, 2880, 4};
  const MoeWeights w = make_random_weights(s, 7);
  std::unique_ptr<MoeLayer> cpu;
  if (const Status st = MoeLayer::create(w.view(), {.backend = "cpu", .device = -1}, &cpu); !st.ok()) {
    std::fprintf(stderr, "%s\n", st.message().c_str());
    return 1;
  }
  std::vector<uint16_t> x(size_t(s.hidden), float_to_bf16(0.5f)), y(x.size());
  std::vector<Routing> routes;
  for (int r = 0; r < 16; ++r) routes.push_back(make_random_routing(1, s.experts, s.topk, 100 + r));
  std::vector<uint8_t> ws(cpu->workspace_bytes(1));
  auto forward = [&](int i) {
    const Routing& r = routes[size_t(i % 16)];
    (void)cpu->forward({.x = x.data(), .tokens = 1, .topk_ids = r.ids.data(), .topk_weights = r.weights.data(),
                        .y = y.data()},
                       ws.data(), ws.size(), nullptr);
  };
  std::atomic<int> job{-1};
  std::atomic<bool> done{false}, quit{false};
  std::thread worker([&] {
    while (!quit) {
      const int j = job.exchange(-1);
      if (j < 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
        continue;
      }
      forward(j);
      done = true;
    }
  });
  const char* names[] = {"direct", "sleeps", "spins"};
  for (int mode = 0; mode < 3; ++mode) {
    std::vector<double> us;
    for (int i = 0; i < 60; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      if (mode == 0) {
        forward(i);
      } else {
        done = false;
        job = i;
        while (!done.load())
          if (mode == 1) std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
      if (i >= 10) us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(us.begin(), us.end());
    std::printf("%-7s %8.0f us\n", names[mode], us[us.size() / 2]);
  }
  quit = true;
  worker.join();
  return 0;
}
