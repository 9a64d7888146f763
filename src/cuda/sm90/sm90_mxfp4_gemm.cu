// Instances of the sm90 MXFP4 grouped GEMM (every token tile of is_token_tile; SwiGLU or
// bias-and-route epilogue) and their launcher.
#include "cuda/sm90/sm90_mxfp4_gemm.cuh"
#include "cuda/sm90/heuristics.h"
#include "cuda/sm90/sm90_mxfp4_gemm_launch.h"

#include <iterator>
#include <utility>

namespace mxmoe::sm90 {
namespace {

template <int BN, bool kSwiglu>
cudaError_t launch(const GemmParams& p, int grid, bool overlap, cudaStream_t stream) {
  const int smem = smem_layout(BN, p.k, p.stages, p.staged_output).bytes;
  return smxx::launch_kernel(sm90_mxfp4_moe_gemm<BN, kSwiglu>, dim3(unsigned(grid)), dim3(kThreads), size_t(smem),
                             stream, overlap, p);
}

template <int BN, bool kSwiglu>
cudaError_t allow_max_smem() {
  return cudaFuncSetAttribute(sm90_mxfp4_moe_gemm<BN, kSwiglu>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              max_dynamic_smem(BN));
}

// One instance per entry of kTokenTiles, the token tile chosen at run time.
template <size_t... I>
cudaError_t launch_tile(std::index_sequence<I...>, const GemmParams& p, int token_tile, bool swiglu, int grid,
                        bool overlap, cudaStream_t stream) {
  using Launch = cudaError_t (*)(const GemmParams&, int, bool, cudaStream_t);
  constexpr Launch with_swiglu[] = {launch<kTokenTiles[I], true>...};
  constexpr Launch with_route[] = {launch<kTokenTiles[I], false>...};
  for (size_t i = 0; i < sizeof...(I); ++i)
    if (kTokenTiles[i] == token_tile) return (swiglu ? with_swiglu : with_route)[i](p, grid, overlap, stream);
  return cudaErrorInvalidValue;
}

template <size_t... I>
cudaError_t allow_max_smem_all(std::index_sequence<I...>) {
  using Allow = cudaError_t (*)();
  constexpr Allow each[] = {allow_max_smem<kTokenTiles[I], true>..., allow_max_smem<kTokenTiles[I], false>...};
  for (Allow allow : each)
    if (const cudaError_t e = allow(); e != cudaSuccess) return e;
  return cudaSuccess;
}

constexpr auto kTileIndices = std::make_index_sequence<std::size(kTokenTiles)>();

}  // namespace

cudaError_t launch_sm90_mxfp4_gemm(const GemmParams& p, int token_tile, bool swiglu, int grid, bool overlap,
                                   cudaStream_t stream) {
  if (p.stages < 2 || !is_token_tile(token_tile) ||
      (p.staged_output && !swiglu) ||
      smem_layout(token_tile, p.k, p.stages, p.staged_output).bytes > max_dynamic_smem(token_tile))
    return cudaErrorInvalidValue;
  return launch_tile(kTileIndices, p, token_tile, swiglu, grid, overlap, stream);
}

cudaError_t init_sm90_mxfp4_gemm() { return allow_max_smem_all(kTileIndices); }

}  // namespace mxmoe::sm90
