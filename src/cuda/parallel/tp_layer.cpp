// Tensor-parallel layer: rank r holds intermediate columns [r Ir, (r+1) Ir) of
// every expert (shard_tensor_parallel; b2 on rank 0 only) and runs the whole
// single-GPU forward of the configured backend (portable, or sm90 on SM90
// GPUs) on all tokens, so y_r is a partial sum of the output; an
// fp32 all-reduce (sum) of y in place gives every rank the full y. The router
// is replicated: every rank routes the same x with the same weights on the
// same kernel, so all ranks pick the same experts and weights.
#include <algorithm>
#include <memory>
#include <vector>

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include "cuda/parallel/device_array.h"
#include "cuda/parallel/layer_common.h"
#include "cuda/parallel/layers.h"
#include "cuda/parallel/rank_group.h"
#include "cuda/parallel/ranked_layer.h"
#include "cuda/portable/portable_backend.h"
#include "cuda/prepare/device_image.h"
#ifdef MXMOE_WITH_SM90
#include "cuda/sm90/sm90_backend.h"
#endif
#include "parallel/timing_summary.h"

namespace mxmoe::parallel {
namespace {

struct TpRank : RankBase {
  using RankBase::RankBase;
  std::unique_ptr<smxx::DeviceForward> forward;  // the backend's forward over this rank's shard
  DeviceArray<uint16_t> x{memory};    // bf16 [T, H]
  DeviceArray<float> y{memory};       // fp32 [T, H]: the partial, then (all-reduced) the sum
  DeviceArray<int32_t> ids{memory};   // caller's or timing routing, [sets][T, k]
  DeviceArray<float> rw{memory};
  DeviceArray<uint8_t> ws{memory};    // the forward's workspace
  DeviceArray<float> scratch{memory};  // start_together's float
};

// The configured backend's forward over a shard, uploaded from `memory` on
// the current device.
Status make_rank_forward(BackendKind backend, const PreparedWeights& shard, const smxx::MemorySource& memory,
                         std::unique_ptr<smxx::DeviceForward>* out) {
  smxx::DeviceImage image;
  MXMOE_RETURN_IF_ERROR(smxx::upload_image(shard, ScaleImage::kPlanOrder, 0, "tp", memory, &image));
#ifdef MXMOE_WITH_SM90
  if (backend == BackendKind::kSm90) return sm90::make_forward(image, sm90::Overrides{}, out);
#endif
  if (backend == BackendKind::kPortable) return portable::make_forward(image, out);
  return Status::Unsupported(fmt::format("tp: the {} backend is not built for the multi-GPU layer", backend_name(backend)));
}

// Instantiated graphs of one rank, destroyed with the set.
struct GraphSet {
  std::vector<cudaGraphExec_t> execs;
  ~GraphSet() {
    for (cudaGraphExec_t e : execs) cudaGraphExecDestroy(e);
  }
};

class TpLayer final : public RankedLayer<TpRank> {
 public:
  using RankedLayer::RankedLayer;

  // Shards, uploads and makes a stream on every rank, one thread each.
  Status init(const MoeWeightsView& w) {
    return group_->run([&](int r) -> Status {
      WeightShard shard;
      MXMOE_RETURN_IF_ERROR(shard_tensor_parallel(config_.backend, w, r, config_.size, &shard));
      RankStream stream;
      MXMOE_RETURN_IF_ERROR(stream.create());
      auto k = std::make_unique<TpRank>(std::move(stream), config_.allocator, group_->device(r));
      MXMOE_RETURN_IF_ERROR(make_rank_forward(config_.backend, shard.prepared, k->memory, &k->forward));
      MXMOE_RETURN_IF_ERROR(k->scratch.reserve(1));
      PARALLEL_CUDA(cudaMemsetAsync(k->scratch.get(), 0, sizeof(float), k->stream));
      ranks_[size_t(r)] = std::move(k);
      return Status::Ok();
    });
  }

  Status forward_host(const float* x, int64_t tokens, const RoutingView* routing, float* y) override {
    MXMOE_RETURN_IF_ERROR(check_forward_args("tp", shape_, has_router_, x, tokens, routing, y));
    const std::vector<uint16_t> xb = to_bf16(x, size_t(tokens * shape_.hidden));
    const size_t nr = size_t(tokens * shape_.topk);
    return group_->run([&](int r) -> Status {
      TpRank& k = *ranks_[size_t(r)];
      MXMOE_RETURN_IF_ERROR(reserve(k, tokens, routing ? 1 : 0));
      // On the rank's stream: a plain cudaMemcpy from pageable memory returns
      // before its DMA lands, and the non-blocking stream does not wait for it.
      PARALLEL_CUDA(cudaMemcpyAsync(k.x.get(), xb.data(), xb.size() * 2, cudaMemcpyHostToDevice, k.stream));
      if (routing) {
        PARALLEL_CUDA(cudaMemcpyAsync(k.ids.get(), routing->ids, nr * 4, cudaMemcpyHostToDevice, k.stream));
        PARALLEL_CUDA(cudaMemcpyAsync(k.rw.get(), routing->weights, nr * 4, cudaMemcpyHostToDevice, k.stream));
      }
      MXMOE_RETURN_IF_ERROR(enqueue(r, tokens, routing ? k.ids.get() : nullptr,
                                    routing ? k.rw.get() : nullptr, true));
      MXMOE_RETURN_IF_ERROR(group_->wait(r, k.stream));
      if (r == 0) PARALLEL_CUDA(cudaMemcpy(y, k.y.get(), xb.size() * 4, cudaMemcpyDeviceToHost));
      return Status::Ok();
    });
  }

 private:
  Status reserve(TpRank& k, int64_t tokens, int routing_sets) {
    const size_t n = size_t(tokens * shape_.hidden), nr = size_t(tokens * shape_.topk) * size_t(routing_sets);
    MXMOE_RETURN_IF_ERROR(k.x.reserve(n));
    MXMOE_RETURN_IF_ERROR(k.y.reserve(n));
    MXMOE_RETURN_IF_ERROR(k.ids.reserve(nr));
    MXMOE_RETURN_IF_ERROR(k.rw.reserve(nr));
    return k.ws.reserve(k.forward->workspace_bytes(tokens));
  }

  // The rank's partial forward on x, then (with all_reduce) the sum over ranks.
  Status enqueue(int r, int64_t tokens, const int32_t* ids, const float* rw, bool all_reduce) {
    TpRank& k = *ranks_[size_t(r)];
    smxx::ForwardArgs a;
    a.x = k.x.get();
    a.tokens = tokens;
    a.topk_ids = ids;
    a.topk_weights = rw;
    a.y = k.y.get();
    MXMOE_RETURN_IF_ERROR(k.forward->forward(a, k.ws.get(), k.ws.bytes(), k.stream));
    if (!all_reduce) return Status::Ok();
    return nccl_check(ncclAllReduce(k.y.get(), k.y.get(), size_t(tokens * shape_.hidden), ncclFloat32, ncclSum,
                                    group_->comm(r), k.stream),
                      "ncclAllReduce");
  }

  Status capture(int r, int64_t tokens, const int32_t* ids, const float* rw, bool all_reduce, GraphSet* g) {
    TpRank& k = *ranks_[size_t(r)];
    PARALLEL_CUDA(cudaStreamBeginCapture(k.stream, cudaStreamCaptureModeThreadLocal));
    Status st = enqueue(r, tokens, ids, rw, all_reduce);
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(k.stream, &graph);
    if (st.ok()) st = cuda_check(end, "cudaStreamEndCapture");
    cudaGraphExec_t exec = nullptr;
    if (st.ok()) st = cuda_check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    if (graph) cudaGraphDestroy(graph);
    if (st.ok()) g->execs.push_back(exec);
    return st;
  }

  // One rank's share of time_forward: graphs of the full forward (with the
  // all-reduce) and of the compute alone, per routing set; per batch, every
  // set's full graph back to back, then every set's compute graph.
  Status time_rank(int r, int64_t tokens, const TimingInputs& in, std::vector<BatchTimes>* times) override {
    TpRank& k = *ranks_[size_t(r)];
    const int sets = int(in.sets.size());
    const size_t nr = size_t(tokens * shape_.topk);
    MXMOE_RETURN_IF_ERROR(reserve(k, tokens, sets));
    PARALLEL_CUDA(cudaMemcpyAsync(k.x.get(), in.x.data(), in.x.size() * 2, cudaMemcpyHostToDevice, k.stream));
    for (int i = 0; i < sets; ++i) {
      PARALLEL_CUDA(cudaMemcpyAsync(k.ids.get() + nr * size_t(i), in.sets[size_t(i)].ids.data(), nr * 4,
                                    cudaMemcpyHostToDevice, k.stream));
      PARALLEL_CUDA(cudaMemcpyAsync(k.rw.get() + nr * size_t(i), in.sets[size_t(i)].weights.data(), nr * 4,
                                    cudaMemcpyHostToDevice, k.stream));
    }
    // One forward outside the capture first: NCCL connects the ranks for this
    // message size there, not inside a graph.
    MXMOE_RETURN_IF_ERROR(enqueue(r, tokens, k.ids.get(), k.rw.get(), true));
    MXMOE_RETURN_IF_ERROR(group_->wait(r, k.stream));
    GraphSet full, compute;
    for (int i = 0; i < sets; ++i) {
      const int32_t* ids = k.ids.get() + nr * size_t(i);
      const float* rw = k.rw.get() + nr * size_t(i);
      MXMOE_RETURN_IF_ERROR(capture(r, tokens, ids, rw, true, &full));
      MXMOE_RETURN_IF_ERROR(capture(r, tokens, ids, rw, false, &compute));
    }
    EventSet ev;
    MXMOE_RETURN_IF_ERROR(ev.create(4));
    for (int it = 0; it < std::max(3 * sets, 5); ++it) {
      PARALLEL_CUDA(cudaGraphLaunch(full.execs[size_t(it % sets)], k.stream));
      PARALLEL_CUDA(cudaGraphLaunch(compute.execs[size_t(it % sets)], k.stream));
    }
    MXMOE_RETURN_IF_ERROR(group_->wait(r, k.stream));
    for (BatchTimes& b : *times) {
      MXMOE_RETURN_IF_ERROR(start_together(k.scratch.get(), group_->comm(r), k.stream));
      PARALLEL_CUDA(cudaEventRecord(ev[0], k.stream));
      for (cudaGraphExec_t g : full.execs) PARALLEL_CUDA(cudaGraphLaunch(g, k.stream));
      PARALLEL_CUDA(cudaEventRecord(ev[1], k.stream));
      MXMOE_RETURN_IF_ERROR(start_together(k.scratch.get(), group_->comm(r), k.stream));
      PARALLEL_CUDA(cudaEventRecord(ev[2], k.stream));
      for (cudaGraphExec_t g : compute.execs) PARALLEL_CUDA(cudaGraphLaunch(g, k.stream));
      PARALLEL_CUDA(cudaEventRecord(ev[3], k.stream));
      MXMOE_RETURN_IF_ERROR(group_->wait(r, k.stream));
      MXMOE_RETURN_IF_ERROR(elapsed_us(ev[0], ev[1], &b.total_us[size_t(r)]));
      MXMOE_RETURN_IF_ERROR(elapsed_us(ev[2], ev[3], &b.compute_us[size_t(r)]));
    }
    return Status::Ok();
  }

};

}  // namespace

Status create_tp_layer(const MoeWeightsView& weights, const ParallelConfig& config,
                       std::unique_ptr<ParallelLayer>* out) {
  MXMOE_RETURN_IF_ERROR(check_portable_limits("tp", weights.shape));
  return create_ranked_layer<TpLayer>(weights, config, out);
}

}  // namespace mxmoe::parallel
