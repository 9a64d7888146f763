#include "read_stream.h"

#include <omp.h>

#include <chrono>
#include <cstdint>
#include <cstring>

namespace mxmoe::cli {

Status ReadStream::create(size_t bytes, ReadStream* out) {
  for (bool huge : {false, true}) {
    cpu::HostBuffer& b = huge ? out->huge_ : out->small_;
    MXMOE_RETURN_IF_ERROR(cpu::HostBuffer::allocate(bytes, huge, &b));
    std::memset(b.data(), 1, b.size());
    out->pass(huge);  // the first pass also fills the page tables
  }
  return Status::Ok();
}

int ReadStream::threads() const { return omp_get_max_threads(); }

double ReadStream::pass(bool huge) const {
  const cpu::HostBuffer& buf = huge ? huge_ : small_;
  uint64_t total = 0;
  const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel reduction(+ : total)
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

}  // namespace mxmoe::cli
