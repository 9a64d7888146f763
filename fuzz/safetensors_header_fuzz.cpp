// libFuzzer entry: any byte string is a candidate safetensors file. The parser
// must return a Status (never crash, hang or read outside [data, data + size)),
// and whatever it accepts must describe tensors inside the buffer.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "checkpoint/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A heap copy of exactly `size` bytes: ASan then flags even a one-byte over-read.
  std::vector<uint8_t> bytes(data, data + size);
  mxmoe::SafetensorsHeader h;
  const mxmoe::Status s =
      mxmoe::parse_safetensors_header(bytes.data(), bytes.size(), "fuzz.safetensors", &h);
  if (!s.ok()) return 0;
  uint64_t previous_end = h.data_start;
  for (const auto& t : h.tensors) {
    // Accepted tensors lie in the data section, in order, without overlap.
    if (t.begin < h.data_start || t.end > size || t.begin > t.end) std::abort();
    if (t.begin != t.end) {
      if (t.begin < previous_end) std::abort();
      previous_end = t.end;
    }
    if (h.find(t.name) == nullptr) std::abort();
    if (t.begin % uint64_t(t.element_size) != 0) std::abort();
    volatile uint8_t sink = 0;
    if (t.end > t.begin) sink = bytes[t.end - 1];  // in-bounds by construction
    (void)sink;
  }
  return 0;
}
