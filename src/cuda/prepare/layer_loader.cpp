// Two pinned slots of one layer's checkpoint bytes each: a reader thread
// fills one (its own parallel preads: one stream of reads leaves an NVMe
// drive's queues mostly idle) while the calling thread uploads the other to
// a device staging buffer and prepares it there (MoeLayer::create on device
// pointers). Reads, not the mapping, bring the bytes in, so the process's
// resident memory stays the two slots (the header checks' pages are
// released after each layer).
#include "cuda/prepare/layer_loader.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "cuda/common/smxx_moe_kernels.h"
#include "cuda/prepare/staged_weights.h"

namespace mxmoe::smxx {
namespace {

constexpr int64_t kReadChunk = int64_t(8) << 20;  // one pread: large enough to stream, small enough to spread

struct PinnedBuffer {
  uint8_t* p = nullptr;
  ~PinnedBuffer() {
    if (p) cudaFreeHost(p);
  }
};

struct Slot {
  PinnedBuffer host;
  MoeWeightsView view;  // the layer's view, rebased onto host.p
  Status status;
  bool full = false;
};

// Open files by path, for the reads.
class Files {
 public:
  ~Files() {
    for (auto& [path, fd] : fds_) close(fd);
  }
  Status fd(const std::string& path, int* out) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = fds_.find(path);
    if (it == fds_.end()) {
      const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return Status::IoError(fmt::format("{}: cannot open", path));
      it = fds_.emplace(path, fd).first;
    }
    *out = it->second;
    return Status::Ok();
  }

 private:
  std::mutex mu_;
  std::map<std::string, int> fds_;
};

// Layer n's view (the checkpoint's checks run on the header and the scales)
// and its tensors read into `slot` by `threads` parallel preads.
Status read_layer(const Checkpoint& ckpt, int64_t n, int threads, Files* files, int64_t layer_bytes, Slot* slot) {
  MoeWeightsView view;
  MXMOE_RETURN_IF_ERROR(ckpt.layer(n, &view));
  struct Piece {
    int fd;
    int64_t offset, bytes;
    uint8_t* dst;
  };
  const std::vector<WeightSpan> spans = weight_spans(view);
  int64_t total = 0;
  const std::vector<int64_t> offsets = staging_offsets(spans, &total);
  if (total > layer_bytes) return Status::InvalidArgument("layer larger than its staging slot");
  std::vector<Piece> pieces;
  std::vector<const void*> placed;
  for (size_t i = 0; i < spans.size(); ++i) {
    const WeightSpan& t = spans[i];
    const int64_t at = offsets[i];
    placed.push_back(slot->host.p + at);
    if (!t.bytes) continue;
    std::string path;
    int64_t offset = 0;
    if (!ckpt.file_range(t.ptr, size_t(t.bytes), &path, &offset))
      return Status::InvalidArgument(fmt::format("{} lies outside the checkpoint's files", t.name));
    int fd = -1;
    MXMOE_RETURN_IF_ERROR(files->fd(path, &fd));
    for (int64_t c = 0; c < t.bytes; c += kReadChunk)
      pieces.push_back({fd, offset + c, std::min(kReadChunk, t.bytes - c), slot->host.p + at + c});
    ckpt.release_pages(t.ptr, size_t(t.bytes));
  }
  std::vector<std::thread> pool;
  std::vector<Status> st(static_cast<size_t>(threads));
  for (int i = 0; i < threads; ++i)
    pool.emplace_back([&, i] {
      for (size_t k = size_t(i); k < pieces.size(); k += size_t(threads)) {
        const Piece& p = pieces[k];
        for (int64_t done = 0; done < p.bytes;) {
          const ssize_t r = pread(p.fd, p.dst + done, size_t(p.bytes - done), p.offset + done);
          if (r <= 0) {
            st[size_t(i)] = Status::IoError(fmt::format("read of {} bytes at offset {} failed (truncated file?)",
                                                        p.bytes - done, p.offset + done));
            return;
          }
          done += r;
        }
      }
    });
  for (auto& t : pool) t.join();
  for (const Status& s : st) MXMOE_RETURN_IF_ERROR(s);
  slot->view = rebased(view, placed);
  return Status::Ok();
}

Status with_layer(int64_t n, const Status& st) {
  if (st.ok()) return st;
  return Status(st.code(), fmt::format("layer {}: {}", n, st.message()));
}

}  // namespace

Status load_device_layers(const Checkpoint& ckpt, const std::vector<int64_t>& layers, const LoadOptions& o,
                          std::vector<std::unique_ptr<MoeLayer>>* out, LoadStats* stats) {
  const char* who = "load";
  const MoeShape& s = ckpt.info().shape;
  // One layer's checkpoint bytes, each tensor 256-aligned (weight_spans' order).
  const int64_t layer_bytes = (s.experts * 2 * s.intermediate * (s.hidden / 2) + 255) / 256 * 256 +
                              (s.experts * 2 * s.intermediate * (s.hidden / 32) + 255) / 256 * 256 +
                              (s.experts * s.hidden * (s.intermediate / 2) + 255) / 256 * 256 +
                              (s.experts * s.hidden * (s.intermediate / 32) + 255) / 256 * 256 +
                              (s.experts * 2 * s.intermediate * 2 + 255) / 256 * 256 +
                              (s.experts * s.hidden * 2 + 255) / 256 * 256 + (s.experts * s.hidden * 2 + 255) / 256 * 256 +
                              (s.experts * 2 + 255) / 256 * 256;
  // The load runs on o.device; the caller's current device is restored on return.
  int caller_device = 0;
  MXMOE_RETURN_IF_ERROR(cuda_status(cudaGetDevice(&caller_device), who, "cudaGetDevice"));
  const std::unique_ptr<int, void (*)(int*)> restore(&caller_device, [](int* d) { cudaSetDevice(*d); });
  MXMOE_RETURN_IF_ERROR(cuda_status(cudaSetDevice(o.device), who, "select the device"));
  Slot slots[2];
  for (Slot& sl : slots)
    MXMOE_RETURN_IF_ERROR(cuda_status(cudaHostAlloc(reinterpret_cast<void**>(&sl.host.p), size_t(layer_bytes),
                                                    cudaHostAllocDefault),
                                      who, "pinned staging"));
  DeviceBuffer staging(MemorySource{o.allocator, o.device, o.stream});
  MXMOE_RETURN_IF_ERROR(staging.reserve(size_t(layer_bytes)));
  if (stats) stats->staging_host_bytes = 2 * layer_bytes;

  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  Files files;
  const int threads = std::max(1, o.read_threads);
  std::thread reader([&] {
    for (size_t i = 0; i < layers.size(); ++i) {
      Slot& sl = slots[i % 2];
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return !sl.full || stop; });
        if (stop) return;
      }
      const Status st = with_layer(layers[i], read_layer(ckpt, layers[i], threads, &files, layer_bytes, &sl));
      std::lock_guard<std::mutex> lock(mu);
      sl.status = st;
      sl.full = true;
      cv.notify_all();
      if (!st.ok()) return;
    }
  });
  Status result;
  std::vector<std::unique_ptr<MoeLayer>> done;
  for (size_t i = 0; i < layers.size() && result.ok(); ++i) {
    Slot& sl = slots[i % 2];
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return sl.full; });
    }
    result = sl.status;
    if (result.ok()) {
      // The slot goes up whole, then the layer is prepared from the device
      // copy (create waits for the copy: the weights are on the device).
      std::vector<const void*> placed;
      for (const WeightSpan& t : weight_spans(sl.view))
        placed.push_back(staging.as<uint8_t>() + (static_cast<const uint8_t*>(t.ptr) - sl.host.p));
      result = cuda_status(
          cudaMemcpyAsync(staging.get(), sl.host.p, size_t(layer_bytes), cudaMemcpyHostToDevice, o.stream), who,
          "upload");
      std::unique_ptr<MoeLayer> layer;
      if (result.ok())
        result = MoeLayer::create(rebased(sl.view, placed),
                                  {.backend = o.backend,
                                   .device = o.device,
                                   .activations = o.activations,
                                   .allocator = o.allocator,
                                   .stream = o.stream},
                                  &layer);
      result = with_layer(layers[i], result);
      if (result.ok()) done.push_back(std::move(layer));
    }
    std::lock_guard<std::mutex> lock(mu);
    sl.full = false;
    stop = !result.ok();
    cv.notify_all();
    if (result.ok() && o.progress) o.progress(int64_t(i + 1), int64_t(layers.size()));
  }
  reader.join();
  MXMOE_RETURN_IF_ERROR(result);
  *out = std::move(done);
  return Status::Ok();
}

}  // namespace mxmoe::smxx
