// A host-memory layer's experts streamed to its GPU for one forward: the cpu
// pack's bytes (pinned where they lie) are copied over PCIe, a chunk of
// experts at a time, into a staging area of the forward's workspace, and the
// device executor's gather kernels re-lay each chunk (GatherMatrix::cpu16)
// into a GPU backend's image in the same workspace; that backend's forward
// then runs on the image. The image's bytes are those the backend's own
// device layer holds for the same weights (the same gather, the same source
// values), so the output is too.
//
// The copies run on a stream of the layer's own, into two staging buffers
// in turn, while the caller's stream re-lays the previous chunk: the link
// stays busy, and the re-laying (about 13 ms for gpt-oss-120b's layer, H100,
// when it ran between the copies) hides behind it. Events fork the copy
// stream from the caller's stream and join it back, so there is no host
// synchronisation and a graph capture records both. It owns no device
// memory; the workspace is the caller's.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include <cuda_runtime.h>

#include "cpu/cpu_moe.h"
#include "cuda/common/device_backend.h"
#include "cuda/common/forward_args.h"
#include "mxmoe/prepare.h"
#include "prepare/device_image.h"

namespace mxmoe::smxx {

class ExpertStream {
 public:
  // Over `moe`'s pack (which must outlive the stream) for GPU backend `kind`
  // (portable or sm90: an image in the plan's scale order, no prefetch rows)
  // on the current device. Pins the pack's weight buffers in place
  // (cudaHostRegister) and copies its biases and router to pinned memory.
  static Status create(BackendKind kind, const cpu::CpuMoe& moe, std::unique_ptr<ExpertStream>* out);
  ~ExpertStream();
  ExpertStream(const ExpertStream&) = delete;
  ExpertStream& operator=(const ExpertStream&) = delete;

  BackendKind backend() const { return plan_.backend; }
  // The image, the staging and the backend's own workspace for T tokens.
  size_t workspace_bytes(int64_t tokens) const;
  // Enqueues the copies, the re-laying and the backend's forward on `stream`;
  // `workspace` is device memory of workspace_bytes(f.tokens), 256-byte aligned.
  Status forward(const ForwardArgs& f, void* workspace, size_t workspace_size, cudaStream_t stream) const;

 private:
  ExpertStream() = default;
  Status copy_chunk(int64_t e0, int64_t e1, int buffer, uint8_t* ws) const;
  Status relay_chunk(int64_t e0, int64_t e1, int buffer, uint8_t* ws, cudaStream_t stream) const;

  PreparePlan plan_;  // the GPU backend's
  const cpu::PackedWeights* pack_ = nullptr;
  SwigluParams swiglu_;
  bool has_router_ = false, w13_large_ = false, w2_large_ = false;
  std::array<size_t, kImagePieces> piece_offset_{};  // in the workspace
  // Two stagings of a chunk: the six per-expert pieces of the cpu pack, in
  // image piece order (kW13Codes .. kB2), 256-byte aligned.
  std::array<std::array<size_t, 6>, 2> stage_offset_{};
  size_t router_offset_ = 0, forward_offset_ = 0;
  int64_t chunk_experts_ = 0;
  std::unique_ptr<DeviceForward> sizing_;  // over an image of null pieces: workspace sizes only
  void* pinned_small_ = nullptr;           // b13, b2, router weight and bias (cudaHostAlloc)
  std::array<const uint8_t*, 4> small_{};  // into pinned_small_
  std::array<void*, 4> registered_{};      // the pack's buffers pinned in place
  // The copies' stream; `forked`: the caller's stream reached the forward;
  // copied[b] / relaid[b]: staging b was filled / has been read.
  cudaStream_t copies_ = nullptr;
  cudaEvent_t forked_ = nullptr;
  std::array<cudaEvent_t, 2> copied_{}, relaid_{};
};

}  // namespace mxmoe::smxx
