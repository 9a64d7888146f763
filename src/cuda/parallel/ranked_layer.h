// What the tensor- and expert-parallel layers hold alike: the configuration,
// the layer's shape, the rank group and one Rank (device buffers, stream) per
// GPU, each freed on its own device; and how either is built.
#pragma once

#include <algorithm>
#include <memory>
#include <vector>

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "cuda/parallel/layer_common.h"
#include "cuda/parallel/rank_group.h"
#include "mxmoe/parallel.h"
#include "parallel/timing_summary.h"

namespace mxmoe::parallel {

template <typename Rank>
class RankedLayer : public ParallelLayer {
 public:
  RankedLayer(const ParallelConfig& config, const MoeWeightsView& w, std::unique_ptr<RankGroup> group)
      : config_(config), shape_(w.shape), has_router_(w.router_weight && w.router_bias),
        group_(std::move(group)), ranks_(size_t(config.size)) {}

  ~RankedLayer() override {
    const CurrentDeviceGuard keep;
    for (int r = 0; r < group_->size(); ++r) {  // free each rank's memory on its device
      cudaSetDevice(group_->device(r));
      ranks_[size_t(r)].reset();
    }
  }

  const ParallelConfig& config() const override { return config_; }

  // Timed batches on every rank at once (time_rank), summarised over ranks.
  Status time_forward(int64_t tokens, int routing_sets, int iterations, uint64_t seed,
                      ParallelTiming* out) override {
    if (!out || tokens <= 0 || tokens * shape_.topk >= (int64_t(1) << 30))
      return Status::InvalidArgument(fmt::format("{}: timing needs positive tokens (tokens * topk below 2^30)",
                                                 parallel_mode_name(config_.mode)));
    const int sets = std::max(routing_sets, 1);
    const int batches = std::max(std::max(iterations, 1) / sets, 3);
    const TimingInputs in = make_timing_inputs(shape_, tokens, sets, seed);
    std::vector<BatchTimes> times(size_t(batches), BatchTimes{std::vector<double>(size_t(config_.size)),
                                                              std::vector<double>(size_t(config_.size))});
    MXMOE_RETURN_IF_ERROR(group_->run([&](int r) { return time_rank(r, tokens, in, &times); }));
    *out = summarize_batches(times, sets);
    return Status::Ok();
  }

 protected:
  // Rank r's part of time_forward: fills total_us[r] and compute_us[r] of
  // every batch in `times`.
  virtual Status time_rank(int r, int64_t tokens, const TimingInputs& in, std::vector<BatchTimes>* times) = 0;

  ParallelConfig config_;
  MoeShape shape_;
  bool has_router_;
  std::unique_ptr<RankGroup> group_;
  std::vector<std::unique_ptr<Rank>> ranks_;
};

// Makes the rank group, then a Layer (a RankedLayer with init(weights)) on it.
template <typename Layer>
Status create_ranked_layer(const MoeWeightsView& weights, const ParallelConfig& config,
                           std::unique_ptr<ParallelLayer>* out) {
  std::unique_ptr<RankGroup> group;
  MXMOE_RETURN_IF_ERROR(RankGroup::create(config.devices, &group));
  auto layer = std::make_unique<Layer>(config, weights, std::move(group));
  MXMOE_RETURN_IF_ERROR(layer->init(weights));
  *out = std::move(layer);
  return Status::Ok();
}

}  // namespace mxmoe::parallel
