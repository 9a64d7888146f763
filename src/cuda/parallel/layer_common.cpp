#include "cuda/parallel/layer_common.h"

#include <random>

#include <fmt/format.h>

#include "cuda/parallel/rank_group.h"
#include "cuda/portable/portable_launcher.h"
#include "mxmoe/format.h"

namespace mxmoe::parallel {

Status check_forward_args(const char* mode, const MoeShape& shape, bool has_router, const float* x,
                          int64_t tokens, const RoutingView* routing, const float* y) {
  if (tokens <= 0 || tokens * shape.topk >= (int64_t(1) << 30))
    return Status::InvalidArgument(
        fmt::format("{}: tokens = {} must be positive, with tokens * topk below 2^30", mode, tokens));
  if (!x || !y) return Status::InvalidArgument(fmt::format("{}: null x or y", mode));
  if (!routing) {
    if (has_router) return Status::Ok();
    return Status::InvalidArgument(fmt::format("{}: no routing given and the weights have no router", mode));
  }
  if (routing->tokens != tokens || routing->topk != shape.topk)
    return Status::InvalidArgument(fmt::format("{}: routing is [{}, {}], expected [{}, {}]", mode, routing->tokens,
                                               routing->topk, tokens, shape.topk));
  return validate_routing(*routing, shape.experts);
}

Status check_portable_limits(const char* mode, const MoeShape& shape) {
  // The router keeps its k picks in an 8-entry register array.
  if (shape.experts > portable::kMaxExperts || shape.topk > smxx::kMaxTopk)
    return Status::Unsupported(fmt::format("{}: {} experts, top-{}: the portable pipeline takes at most {} experts, top-8",
                                           mode, shape.experts, shape.topk, portable::kMaxExperts));
  return Status::Ok();
}

std::vector<uint16_t> to_bf16(const float* x, size_t n) {
  std::vector<uint16_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = float_to_bf16(x[i]);
  return out;
}

TimingInputs make_timing_inputs(const MoeShape& shape, int64_t tokens, int sets, uint64_t seed) {
  TimingInputs in;
  in.x.resize(size_t(tokens * shape.hidden));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (auto& v : in.x) v = float_to_bf16(nd(rng));
  for (int i = 0; i < sets; ++i)
    in.sets.push_back(make_random_routing(tokens, shape.experts, shape.topk, seed + uint64_t(i)));
  return in;
}

RankStream::~RankStream() {
  if (stream_) cudaStreamDestroy(stream_);
}

Status RankStream::create() { return cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream"); }

EventSet::~EventSet() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

Status EventSet::create(size_t count) {
  while (events_.size() < count) {
    cudaEvent_t e = nullptr;
    PARALLEL_CUDA(cudaEventCreate(&e));
    events_.push_back(e);
  }
  return Status::Ok();
}

Status elapsed_us(cudaEvent_t a, cudaEvent_t b, double* us) {
  float ms = 0;
  PARALLEL_CUDA(cudaEventElapsedTime(&ms, a, b));
  *us = double(ms) * 1e3;
  return Status::Ok();
}

Status start_together(float* scratch, ncclComm_t comm, cudaStream_t stream) {
  return nccl_check(ncclAllReduce(scratch, scratch, 1, ncclFloat32, ncclSum, comm, stream),
                    "ncclAllReduce (start)");
}

}  // namespace mxmoe::parallel
