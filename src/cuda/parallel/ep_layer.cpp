// Expert-parallel layer. Rank r holds experts [r E/N, (r+1) E/N) (whole, from
// shard_expert_parallel) plus the whole router, and owns the token slice
// token_slice(T, N, r). One forward on rank r:
//   1. route its tokens (or take the caller's routing for them);
//   2. plan and pack: each (token, slot) pair becomes one bf16 x row with the
//      local id of its expert and its routing weight, in a send buffer ordered
//      by destination rank (src/parallel/expert_dispatch.h);
//   3. all-gather of the N row counts, copied to the host: the one host
//      synchronisation of the forward, since NCCL needs every message size
//      when the send/recv calls are made;
//   4. one NCCL group sends the rows (x, expert id, weight) to their owners;
//   5. the received rows run through the portable forward as tokens with top-1
//      routing: each output row is weight * (expert(x) + b2), exactly one
//      (token, slot) term of the single-GPU sum;
//   6. a second group sends the fp32 results back, into the rows the pairs
//      were sent from;
//   7. each token adds its k rows in slot order (no atomics): the output is
//      deterministic, and bitwise equal to the single-GPU combine of the same
//      rows.
// A rank's rows for itself are copied on its stream rather than sent.
#include <algorithm>
#include <memory>
#include <vector>

#include <cuda_runtime.h>
#include <nccl.h>

#include "cuda/parallel/device_array.h"
#include "cuda/parallel/layer_common.h"
#include "cuda/parallel/layers.h"
#include "cuda/parallel/rank_group.h"
#include "cuda/parallel/ranked_layer.h"
#include "cuda/parallel/smxx_ep_dispatch.h"
#include "cuda/portable/portable_backend.h"
#include "cuda/prepare/device_image.h"
#include "parallel/expert_dispatch.h"
#include "parallel/timing_summary.h"
#include "prepare/copy_slice.h"

namespace mxmoe::parallel {
namespace {

struct EpRank : RankBase {
  using RankBase::RankBase;
  ~EpRank() {
    if (host_counts) cudaFreeHost(host_counts);
  }
  portable::UploadedWeights weights;  // local experts, and the router over all experts
  portable::DeviceWeights router;     // weights.view with the global E and top-k (route_topk)
  portable::DeviceWeights experts;    // weights.view with top-1: one received row, one pair
  int32_t* host_counts = nullptr;     // pinned [N, N], the all-gathered counts
  // Own tokens: x, routing ([sets][tokens, k] when timing), the result.
  DeviceArray<uint16_t> x{memory};
  DeviceArray<int32_t> ids{memory};
  DeviceArray<float> rw{memory}, y{memory};
  // Dispatch: plan, rows out, results back (send buffer order).
  DeviceArray<int32_t> pair_pos{memory}, counts{memory}, all_counts{memory}, send_ids{memory};
  DeviceArray<uint16_t> send_x{memory};
  DeviceArray<float> send_w{memory}, back_y{memory};
  // Rows received from every rank (source-major) and their results.
  DeviceArray<uint16_t> recv_x{memory};
  DeviceArray<int32_t> recv_ids{memory};
  DeviceArray<float> recv_w{memory}, recv_y{memory};
  DeviceArray<uint8_t> ws{memory};
  DeviceArray<float> scratch{memory};  // start_together's float
};

// Events around the exchanges of one forward (time_forward).
struct CommEvents {
  cudaEvent_t out_begin, out_end, back_begin, back_end;
};

// One array moved by an exchange: rows of `row_elems` elements of `type`.
struct Moved {
  const void* from;
  void* to;
  int64_t row_elems;
  ncclDataType_t type;
  size_t elem_bytes;
};

class EpLayer final : public RankedLayer<EpRank> {
 public:
  using RankedLayer::RankedLayer;

  Status init(const MoeWeightsView& w) {
    const int n = config_.size;
    return group_->run([&](int r) -> Status {
      WeightShard shard;
      MXMOE_RETURN_IF_ERROR(shard_expert_parallel(BackendKind::kPortable, w, r, n, &shard));
      copy_router(w, 0, w.shape.experts, shard.prepared.plan.hidden_padded, &shard.prepared.weights);
      RankStream stream;
      MXMOE_RETURN_IF_ERROR(stream.create());
      auto k = std::make_unique<EpRank>(std::move(stream), config_.allocator, group_->device(r));
      smxx::DeviceImage image;
      MXMOE_RETURN_IF_ERROR(smxx::upload_image(shard.prepared, ScaleImage::kPlanOrder, 0, "ep", k->memory, &image));
      MXMOE_RETURN_IF_ERROR(portable::weights_from_image(image, &k->weights));
      k->router = k->weights.view;
      k->router.shape = w.shape;
      k->experts = k->weights.view;
      k->experts.shape.topk = 1;
      k->experts.router_weight = nullptr;  // the expert pass always gets its routing
      k->experts.router_bias = nullptr;
      PARALLEL_CUDA(cudaMallocHost(&k->host_counts, size_t(n * n) * sizeof(int32_t)));
      MXMOE_RETURN_IF_ERROR(k->counts.reserve(size_t(n)));
      MXMOE_RETURN_IF_ERROR(k->all_counts.reserve(size_t(n * n)));
      MXMOE_RETURN_IF_ERROR(k->scratch.reserve(1));
      PARALLEL_CUDA(cudaMemsetAsync(k->scratch.get(), 0, sizeof(float), k->stream));
      ranks_[size_t(r)] = std::move(k);
      return Status::Ok();
    });
  }

  Status forward_host(const float* x, int64_t tokens, const RoutingView* routing, float* y) override {
    MXMOE_RETURN_IF_ERROR(check_forward_args("ep", shape_, has_router_, x, tokens, routing, y));
    const std::vector<uint16_t> xb = to_bf16(x, size_t(tokens * shape_.hidden));
    const int64_t H = shape_.hidden, K = shape_.topk;
    return group_->run([&](int r) -> Status {
      EpRank& k = *ranks_[size_t(r)];
      const TokenSlice s = token_slice(tokens, config_.size, r);
      MXMOE_RETURN_IF_ERROR(reserve(k, tokens, s.count(), 1));
      // On the rank's stream: a plain cudaMemcpy from pageable memory returns
      // before its DMA lands, and the non-blocking stream does not wait for it.
      if (s.count() > 0) {
        PARALLEL_CUDA(cudaMemcpyAsync(k.x.get(), xb.data() + s.begin * H, size_t(s.count() * H) * 2,
                                      cudaMemcpyHostToDevice, k.stream));
        if (routing) {
          const size_t nr = size_t(s.count() * K) * 4;
          PARALLEL_CUDA(
              cudaMemcpyAsync(k.ids.get(), routing->ids + s.begin * K, nr, cudaMemcpyHostToDevice, k.stream));
          PARALLEL_CUDA(
              cudaMemcpyAsync(k.rw.get(), routing->weights + s.begin * K, nr, cudaMemcpyHostToDevice, k.stream));
        }
      }
      MXMOE_RETURN_IF_ERROR(rank_forward(r, s.count(), routing ? k.ids.get() : nullptr,
                                         routing ? k.rw.get() : nullptr, nullptr));
      MXMOE_RETURN_IF_ERROR(group_->wait(r, k.stream));
      if (s.count() > 0)
        PARALLEL_CUDA(cudaMemcpy(y + s.begin * H, k.y.get(), size_t(s.count() * H) * 4, cudaMemcpyDeviceToHost));
      return Status::Ok();
    });
  }

 private:
  // Every buffer a forward of `tokens` tokens (`own` of them on this rank)
  // touches, before any NCCL operation: a rank receives at most tokens * k
  // rows (every pair of every rank), so nothing grows after the counts arrive.
  Status reserve(EpRank& k, int64_t tokens, int64_t own, int routing_sets) {
    const size_t H = size_t(shape_.hidden), pairs = size_t(own * shape_.topk);
    const size_t most = size_t(tokens * shape_.topk);
    MXMOE_RETURN_IF_ERROR(k.x.reserve(size_t(own) * H));
    MXMOE_RETURN_IF_ERROR(k.ids.reserve(pairs * size_t(routing_sets)));
    MXMOE_RETURN_IF_ERROR(k.rw.reserve(pairs * size_t(routing_sets)));
    MXMOE_RETURN_IF_ERROR(k.y.reserve(size_t(own) * H));
    MXMOE_RETURN_IF_ERROR(k.pair_pos.reserve(pairs));
    MXMOE_RETURN_IF_ERROR(k.send_x.reserve(pairs * H));
    MXMOE_RETURN_IF_ERROR(k.send_ids.reserve(pairs));
    MXMOE_RETURN_IF_ERROR(k.send_w.reserve(pairs));
    MXMOE_RETURN_IF_ERROR(k.back_y.reserve(pairs * H));
    MXMOE_RETURN_IF_ERROR(k.recv_x.reserve(most * H));
    MXMOE_RETURN_IF_ERROR(k.recv_ids.reserve(most));
    MXMOE_RETURN_IF_ERROR(k.recv_w.reserve(most));
    MXMOE_RETURN_IF_ERROR(k.recv_y.reserve(most * H));
    // The workspace only grows with the row count (larger token tiles, more tiles).
    return k.ws.reserve(portable::workspace_bytes(k.experts, int64_t(most)));
  }

  // Steps 1-7 of one forward of rank r on its `tokens` tokens in k.x, into
  // k.y. ids/rw: the rank's routing, or null to run the router into k.ids/rw.
  Status rank_forward(int r, int64_t tokens, const int32_t* ids, const float* rw, const CommEvents* ev) {
    EpRank& k = *ranks_[size_t(r)];
    const int n = config_.size;
    const int64_t H = shape_.hidden, K = shape_.topk, pairs = tokens * K, per_rank = shape_.experts / n;
    if (tokens > 0 && !ids) {
      MXMOE_RETURN_IF_ERROR(portable::route_topk(k.router, k.x.get(), tokens, k.ids.get(), k.rw.get(), k.stream));
      ids = k.ids.get();
      rw = k.rw.get();
    }
    MXMOE_RETURN_IF_ERROR(launch_ep_plan(ids, pairs, per_rank, n, k.counts.get(), k.pair_pos.get(), k.stream));
    MXMOE_RETURN_IF_ERROR(launch_ep_pack(k.x.get(), H, K, ids, rw, k.pair_pos.get(), pairs, per_rank,
                                         k.send_x.get(), k.send_ids.get(), k.send_w.get(), k.stream));
    if (ev) PARALLEL_CUDA(cudaEventRecord(ev->out_begin, k.stream));
    PARALLEL_NCCL(ncclAllGather(k.counts.get(), k.all_counts.get(), size_t(n), ncclInt32, group_->comm(r), k.stream));
    PARALLEL_CUDA(cudaMemcpyAsync(k.host_counts, k.all_counts.get(), size_t(n * n) * sizeof(int32_t),
                                  cudaMemcpyDeviceToHost, k.stream));
    MXMOE_RETURN_IF_ERROR(group_->wait(r, k.stream));  // the host synchronisation
    const ExchangeLayout xl = exchange_layout(k.host_counts, n, r);
    MXMOE_RETURN_IF_ERROR(exchange(r, xl, false));
    if (ev) PARALLEL_CUDA(cudaEventRecord(ev->out_end, k.stream));
    if (xl.received > 0) {
      portable::ForwardArgs a;
      a.x = k.recv_x.get();
      a.tokens = xl.received;
      a.topk_ids = k.recv_ids.get();
      a.topk_weights = k.recv_w.get();
      a.y = k.recv_y.get();
      MXMOE_RETURN_IF_ERROR(portable::moe_forward(k.experts, a, k.ws.get(), k.ws.bytes(), k.stream));
    }
    if (ev) PARALLEL_CUDA(cudaEventRecord(ev->back_begin, k.stream));
    MXMOE_RETURN_IF_ERROR(exchange(r, xl, true));
    if (ev) PARALLEL_CUDA(cudaEventRecord(ev->back_end, k.stream));
    return launch_ep_combine(k.back_y.get(), k.pair_pos.get(), tokens, K, H, k.y.get(), k.stream);
  }

  // Rows out (x, local expert id, weight: send buffer -> owners' receive
  // buffers) or results back (receive-side results -> the senders' back_y),
  // as one NCCL group. Within a group, sends to one peer are matched with its
  // receives in call order, which is the same loop on both sides.
  Status exchange(int r, const ExchangeLayout& xl, bool back) {
    EpRank& k = *ranks_[size_t(r)];
    const int64_t H = shape_.hidden;
    const std::vector<int64_t>& n_to = back ? xl.recv_count : xl.send_count;
    const std::vector<int64_t>& at_to = back ? xl.recv_offset : xl.send_offset;
    const std::vector<int64_t>& n_from = back ? xl.send_count : xl.recv_count;
    const std::vector<int64_t>& at_from = back ? xl.send_offset : xl.recv_offset;
    std::vector<Moved> moved;
    if (back) {
      moved = {{k.recv_y.get(), k.back_y.get(), H, ncclFloat32, 4}};
    } else {
      moved = {{k.send_x.get(), k.recv_x.get(), H, ncclBfloat16, 2},
               {k.send_ids.get(), k.recv_ids.get(), 1, ncclInt32, 4},
               {k.send_w.get(), k.recv_w.get(), 1, ncclFloat32, 4}};
    }
    auto bytes = [](const Moved& m, int64_t rows) { return size_t(rows * m.row_elems) * m.elem_bytes; };
    auto from = [&](const Moved& m, int64_t row) { return static_cast<const char*>(m.from) + bytes(m, row); };
    auto to = [&](const Moved& m, int64_t row) { return static_cast<char*>(m.to) + bytes(m, row); };
    ncclComm_t comm = group_->comm(r);
    PARALLEL_NCCL(ncclGroupStart());
    Status st = Status::Ok();
    for (int p = 0; p < config_.size && st.ok(); ++p) {
      if (p == r) continue;
      const size_t q = size_t(p);
      for (const Moved& m : moved) {
        if (st.ok() && n_to[q] > 0)
          st = nccl_check(ncclSend(from(m, at_to[q]), size_t(n_to[q] * m.row_elems), m.type, p, comm, k.stream),
                          "ncclSend");
        if (st.ok() && n_from[q] > 0)
          st = nccl_check(ncclRecv(to(m, at_from[q]), size_t(n_from[q] * m.row_elems), m.type, p, comm, k.stream),
                          "ncclRecv");
      }
    }
    const Status end = nccl_check(ncclGroupEnd(), "ncclGroupEnd");
    MXMOE_RETURN_IF_ERROR(st);
    MXMOE_RETURN_IF_ERROR(end);
    const size_t me = size_t(r);
    const int64_t own = n_to[me];  // == n_from[r]: the diagonal of the counts
    if (own == 0) return Status::Ok();
    for (const Moved& m : moved)
      PARALLEL_CUDA(cudaMemcpyAsync(to(m, at_from[me]), from(m, at_to[me]), bytes(m, own), cudaMemcpyDeviceToDevice,
                                    k.stream));
    return Status::Ok();
  }

  // One rank's share of time_forward: per batch, one forward of every routing
  // set back to back, with events around its exchanges.
  Status time_rank(int r, int64_t tokens, const TimingInputs& in, std::vector<BatchTimes>* times) override {
    EpRank& k = *ranks_[size_t(r)];
    const int sets = int(in.sets.size());
    const int64_t H = shape_.hidden, K = shape_.topk;
    const TokenSlice s = token_slice(tokens, config_.size, r);
    const size_t nr = size_t(s.count() * K);
    MXMOE_RETURN_IF_ERROR(reserve(k, tokens, s.count(), sets));
    if (s.count() > 0) {
      PARALLEL_CUDA(cudaMemcpyAsync(k.x.get(), in.x.data() + s.begin * H, size_t(s.count() * H) * 2,
                                    cudaMemcpyHostToDevice, k.stream));
      for (int i = 0; i < sets; ++i) {
        PARALLEL_CUDA(cudaMemcpyAsync(k.ids.get() + nr * size_t(i), in.sets[size_t(i)].ids.data() + s.begin * K,
                                      nr * 4, cudaMemcpyHostToDevice, k.stream));
        PARALLEL_CUDA(cudaMemcpyAsync(k.rw.get() + nr * size_t(i), in.sets[size_t(i)].weights.data() + s.begin * K,
                                      nr * 4, cudaMemcpyHostToDevice, k.stream));
      }
    }
    EventSet ev;
    MXMOE_RETURN_IF_ERROR(ev.create(2 + 4 * size_t(sets)));
    std::vector<CommEvents> comm;
    for (size_t b = 2; b < 2 + 4 * size_t(sets); b += 4) comm.push_back({ev[b], ev[b + 1], ev[b + 2], ev[b + 3]});
    auto forward = [&](int i, const CommEvents* e) {
      return rank_forward(r, s.count(), k.ids.get() + nr * size_t(i), k.rw.get() + nr * size_t(i), e);
    };
    for (int it = 0; it < std::max(3 * sets, 5); ++it) MXMOE_RETURN_IF_ERROR(forward(it % sets, nullptr));
    MXMOE_RETURN_IF_ERROR(group_->wait(r, k.stream));
    for (BatchTimes& b : *times) {
      MXMOE_RETURN_IF_ERROR(start_together(k.scratch.get(), group_->comm(r), k.stream));
      PARALLEL_CUDA(cudaEventRecord(ev[0], k.stream));
      for (int i = 0; i < sets; ++i) MXMOE_RETURN_IF_ERROR(forward(i, &comm[size_t(i)]));
      PARALLEL_CUDA(cudaEventRecord(ev[1], k.stream));
      MXMOE_RETURN_IF_ERROR(group_->wait(r, k.stream));
      double total = 0, exchanges = 0;
      MXMOE_RETURN_IF_ERROR(elapsed_us(ev[0], ev[1], &total));
      for (const CommEvents& c : comm) {
        double out = 0, back = 0;
        MXMOE_RETURN_IF_ERROR(elapsed_us(c.out_begin, c.out_end, &out));
        MXMOE_RETURN_IF_ERROR(elapsed_us(c.back_begin, c.back_end, &back));
        exchanges += out + back;
      }
      b.total_us[size_t(r)] = total;
      b.compute_us[size_t(r)] = total - exchanges;
    }
    return Status::Ok();
  }

};

}  // namespace

Status create_ep_layer(const MoeWeightsView& weights, const ParallelConfig& config,
                       std::unique_ptr<ParallelLayer>* out) {
  MXMOE_RETURN_IF_ERROR(check_portable_limits("ep", weights.shape));
  return create_ranked_layer<EpLayer>(weights, config, out);
}

}  // namespace mxmoe::parallel
