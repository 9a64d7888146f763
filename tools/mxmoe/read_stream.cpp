#include "read_stream.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>

#include "cpu/huge_pages.h"

namespace mxmoe::cli {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// GB/s of one pass over `buf` on `threads` threads.
double one_pass(const cpu::HostBuffer& buf, int threads) {
  uint64_t total = 0;
  const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : total)
  {
    const size_t words = buf.size() / 8, n = size_t(omp_get_num_threads()), t = size_t(omp_get_thread_num());
    const uint64_t* p = reinterpret_cast<const uint64_t*>(buf.data());
    uint64_t s[4] = {0, 0, 0, 0};  // four chains, so the adds keep up with the loads
    for (size_t i = words * t / n / 4 * 4; i < words * (t + 1) / n / 4 * 4; i += 4)
      for (int j = 0; j < 4; ++j) s[j] += p[i + size_t(j)];
    total += s[0] + s[1] + s[2] + s[3];
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  static volatile uint64_t sink;  // the sum is used, so the loads stay
  sink = total;
  return double(buf.size()) / seconds * 1e-9;
}

}  // namespace

double ReadStream::median_4k() const { return median(gbps_4k); }
double ReadStream::median_huge() const { return median(gbps_huge); }

Status measure_read_stream(size_t bytes, int passes, ReadStream* out) {
  *out = ReadStream{};
  out->threads = omp_get_max_threads();
  out->bytes = bytes;
  for (bool huge : {false, true}) {
    cpu::HostBuffer buf;
    MXMOE_RETURN_IF_ERROR(cpu::HostBuffer::allocate(bytes, huge, &buf));
    // Written first: untouched anonymous pages all map the one zero page.
    std::memset(buf.data(), 1, buf.size());
    one_pass(buf, out->threads);  // warm: page tables and TLB fills are part of the first pass only
    for (int i = 0; i < passes; ++i) (huge ? out->gbps_huge : out->gbps_4k).push_back(one_pass(buf, out->threads));
  }
  return Status::Ok();
}

}  // namespace mxmoe::cli
