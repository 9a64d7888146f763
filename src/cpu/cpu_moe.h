// The cpu backend's MoE forward: the weights prepared by the cpu plan and
// packed in the kernels' order (in huge pages where the kernel grants them),
// and a forward on host pointers, split over OpenMP threads.
//
// A forward, T tokens, k slots, on n threads (one parallel region):
//   1. each thread quantises a share of x's rows (QuantRows) and computes a
//      share of the router's T x E logits;
//   2. (router) each thread takes a share of the tokens' top-k and softmax;
//   3. one thread groups the (token, slot) pairs by expert (stable);
//   4. GEMM1 + bias + SwiGLU: the items of the experts with rows, cut into n
//      runs of equal cost (cpu_work.h), write each pair's a row, quantised;
//   5. GEMM2 + bias: likewise, one fp32 row per pair;
//   6. each thread sums its tokens' k rows, in slot order, into y.
// Every output is computed by one thread in a fixed order: the result does
// not depend on the thread count.
#pragma once

#include <cstdint>
#include <memory>

#include "cpu/cpu_kernels.h"
#include "cpu/cpu_pack.h"
#include "mxmoe/cpu.h"
#include "mxmoe/layer.h"
#include "mxmoe/prepare.h"

namespace mxmoe::cpu {

class CpuMoe {
 public:
  // Prepares `weights` with the cpu plan and packs them; `isa` must run on
  // this CPU (cpu_isa_supported).
  static Status create(const MoeWeightsView& weights, CpuIsa isa, std::unique_ptr<CpuMoe>* out);
  // The same on the path choose_cpu_isa picks (MXMOE_CPU_ISA's, or the best).
  static Status create(const MoeWeightsView& weights, std::unique_ptr<CpuMoe>* out);

  const MoeShape& shape() const { return plan_.shape; }
  const PreparePlan& plan() const { return plan_; }
  // The packed weights the kernels read (cpu_pack.h's order).
  const PackedWeights& packed() const { return packed_; }
  bool has_router() const { return !packed_.router_weight.empty(); }
  const SwigluParams& swiglu() const { return swiglu_; }
  CpuIsa isa() const { return kernels_->isa; }

  size_t workspace_bytes(int64_t tokens) const;
  // y = MoE(x) as MoeLayer::forward on host pointers, on `threads` OpenMP
  // threads (0: omp_get_max_threads()). The caller has made the checks of
  // MoeLayer::check_common; the caller's routing ids are checked here.
  Status forward(const LayerForwardArgs& args, void* workspace, size_t workspace_size, int threads = 0) const;

 private:
  PreparePlan plan_;
  const Kernels* kernels_ = nullptr;
  PackedWeights packed_;
  SwigluParams swiglu_;
};

}  // namespace mxmoe::cpu
