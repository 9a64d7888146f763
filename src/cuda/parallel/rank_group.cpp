#include "cuda/parallel/rank_group.h"

#include <cstdlib>
#include <exception>
#include <new>
#include <system_error>
#include <thread>

#include <fmt/format.h>

namespace mxmoe::parallel {

Status cuda_check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  if (err == cudaErrorMemoryAllocation)
    return Status::OutOfMemory(fmt::format("parallel: {}: {}", what, cudaGetErrorString(err)));
  return Status::CudaError(fmt::format("parallel: {}: {}", what, cudaGetErrorString(err)));
}

Status nccl_check(ncclResult_t result, const char* what) {
  if (result == ncclSuccess) return Status::Ok();
  return Status::CudaError(fmt::format("parallel: {}: NCCL: {}", what, ncclGetErrorString(result)));
}

RankGroup::RankGroup(std::vector<int> devices)
    : devices_(std::move(devices)), comms_(devices_.size(), nullptr), aborted_(devices_.size(), 0) {}

Status RankGroup::create(const std::vector<int>& devices, std::unique_ptr<RankGroup>* out) {
  // NVLink multicast (NVLS) must stay off on shared machines; NCCL reads this
  // when it initialises.
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  std::unique_ptr<RankGroup> g(new RankGroup(devices));
  const CurrentDeviceGuard keep;
  const ncclResult_t r = ncclCommInitAll(g->comms_.data(), g->size(), g->devices_.data());
  if (r != ncclSuccess) {
    g->aborted_.assign(g->aborted_.size(), 1);  // nothing to destroy
    return nccl_check(r, "ncclCommInitAll");
  }
  *out = std::move(g);
  return Status::Ok();
}

RankGroup::~RankGroup() {
  const CurrentDeviceGuard keep;
  for (int r = 0; r < size(); ++r) {
    if (aborted_[size_t(r)] || !comms_[size_t(r)]) continue;
    cudaSetDevice(devices_[size_t(r)]);
    ncclCommDestroy(comms_[size_t(r)]);
  }
}

Status RankGroup::run(const std::function<Status(int)>& fn) {
  if (!broken_.empty())
    return Status::Unsupported("parallel: the NCCL communicators were aborted after a failure (" + broken_ +
                               "); create the layer again");
  failed_ = false;
  std::vector<Status> results(devices_.size());
  int first = -1;  // the rank whose failure raised the flag
  auto fail = [&](int r, Status s) {
    bool expected = false;
    if (failed_.compare_exchange_strong(expected, true)) first = r;
    ncclCommAbort(comms_[size_t(r)]);
    aborted_[size_t(r)] = 1;
    results[size_t(r)] = std::move(s);
  };
  auto body = [&](int r) {
    Status s = cuda_check(cudaSetDevice(devices_[size_t(r)]), "cudaSetDevice");
    try {
      if (s.ok()) s = fn(r);
    } catch (const std::bad_alloc&) {  // an exception would end the process from this thread
      s = Status::OutOfMemory("parallel: host memory exhausted");
    } catch (const std::exception& e) {
      s = Status::InvalidArgument(std::string("parallel: ") + e.what());
    }
    if (!s.ok()) fail(r, std::move(s));
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < size(); ++r) {
    try {
      threads.emplace_back(body, r);
    } catch (const std::system_error& e) {  // the ranks already started see the flag
      fail(r, Status::Unsupported(std::string("parallel: no thread for the rank: ") + e.what()));
      break;
    }
  }
  for (std::thread& t : threads) t.join();
  if (first < 0) return Status::Ok();
  // Ranks that finished before the failure still hold live communicators of a
  // clique that can no longer agree: abort them too.
  const CurrentDeviceGuard keep;
  for (int r = 0; r < size(); ++r) {
    if (aborted_[size_t(r)]) continue;
    cudaSetDevice(devices_[size_t(r)]);
    ncclCommAbort(comms_[size_t(r)]);
    aborted_[size_t(r)] = 1;
  }
  const Status& s = results[size_t(first)];
  broken_ = fmt::format("rank {} (device {}): {}", first, devices_[size_t(first)], s.message());
  return Status(s.code(), broken_);
}

Status RankGroup::wait(int rank, cudaStream_t stream) {
  for (;;) {
    const cudaError_t q = cudaStreamQuery(stream);
    if (q == cudaSuccess) return Status::Ok();
    if (q != cudaErrorNotReady) return cuda_check(q, "stream");
    ncclResult_t async = ncclSuccess;
    PARALLEL_NCCL(ncclCommGetAsyncError(comms_[size_t(rank)], &async));
    if (async != ncclSuccess && async != ncclInProgress) return nccl_check(async, "asynchronous error");
    if (failed_.load()) return Status::CudaError("parallel: stopped because another rank failed");
    std::this_thread::yield();
  }
}

}  // namespace mxmoe::parallel
