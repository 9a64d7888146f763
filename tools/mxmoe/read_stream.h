// The machine's read bandwidth, measured beside a CPU backend's timings: a
// read stream on as many threads as a forward uses, over a buffer of 4 KiB
// pages and over one of transparent huge pages.
#pragma once

#include <cstddef>

#include "cpu/huge_pages.h"
#include "mxmoe/status.h"

namespace mxmoe::cli {

class ReadStream {
 public:
  // Two buffers of `bytes` (far above the last-level cache, so that every
  // pass reads DRAM), written once: untouched anonymous pages all map the
  // one zero page.
  static Status create(size_t bytes, ReadStream* out);

  // GB/s of one pass over the 4 KiB-page buffer (huge: the huge-page one) on
  // the forward's threads (OpenMP's), each summing its contiguous part, as
  // each thread of a forward streams its contiguous run of experts.
  double pass(bool huge) const;
  int threads() const;
  size_t bytes() const { return small_.size(); }

 private:
  cpu::HostBuffer small_, huge_;
};

}  // namespace mxmoe::cli
