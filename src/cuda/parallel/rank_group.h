// The ranks of one multi-GPU layer: one NCCL communicator per GPU of this
// process (ncclCommInitAll), one host thread per rank per call, and what
// happens when a rank fails.
//
// Failure protocol: NCCL operations block the GPU until every peer joins, so a
// rank that returns early would leave its peers waiting for ever. A failing
// rank raises a flag and aborts its communicator; ranks waiting on their stream
// (wait) see the flag or NCCL's asynchronous error, abort theirs and return.
// The communicators are then unusable: later calls report the first failure.
// So that this stays rare, layers check arguments and reserve memory before
// they enqueue the first NCCL operation of a call.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <nccl.h>

#include "mxmoe/status.h"

namespace mxmoe::parallel {

Status cuda_check(cudaError_t err, const char* what);
Status nccl_check(ncclResult_t result, const char* what);
#define PARALLEL_CUDA(expr) MXMOE_RETURN_IF_ERROR(::mxmoe::parallel::cuda_check((expr), #expr))
#define PARALLEL_NCCL(expr) MXMOE_RETURN_IF_ERROR(::mxmoe::parallel::nccl_check((expr), #expr))

// Restores the calling thread's current device when it goes out of scope, for
// code that visits each rank's device from the caller's thread.
class CurrentDeviceGuard {
 public:
  CurrentDeviceGuard() { cudaGetDevice(&device_); }
  ~CurrentDeviceGuard() { cudaSetDevice(device_); }
  CurrentDeviceGuard(const CurrentDeviceGuard&) = delete;
  CurrentDeviceGuard& operator=(const CurrentDeviceGuard&) = delete;

 private:
  int device_ = 0;
};

class RankGroup {
 public:
  // Sets NCCL_NVLS_ENABLE=0 (NVLink multicast off), then creates one
  // communicator per device, rank r on devices[r].
  static Status create(const std::vector<int>& devices, std::unique_ptr<RankGroup>* out);
  ~RankGroup();
  RankGroup(const RankGroup&) = delete;
  RankGroup& operator=(const RankGroup&) = delete;

  int size() const { return int(devices_.size()); }
  int device(int rank) const { return devices_[size_t(rank)]; }
  ncclComm_t comm(int rank) const { return comms_[size_t(rank)]; }

  // Runs fn(rank) on one new host thread per rank, with the rank's device
  // current, and returns the first failure (prefixed with its rank) or Ok.
  Status run(const std::function<Status(int rank)>& fn);

  // Inside run: waits until `stream` of `rank` has drained. Fails instead when
  // the stream fails, NCCL reports an asynchronous error, or another rank of
  // this run failed.
  Status wait(int rank, cudaStream_t stream);

 private:
  explicit RankGroup(std::vector<int> devices);
  std::vector<int> devices_;
  std::vector<ncclComm_t> comms_;
  std::vector<char> aborted_;        // per rank; char: ranks write their own entry concurrently
  std::atomic<bool> failed_{false};  // a rank of the current run failed
  std::string broken_;               // the failure that aborted the communicators
};

}  // namespace mxmoe::parallel
