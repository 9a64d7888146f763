#include "cuda/common/recorded_launch.h"

namespace mxmoe::smxx {
namespace {

thread_local LaunchList* t_recording = nullptr;

bool same_dim(dim3 a, dim3 b) { return a.x == b.x && a.y == b.y && a.z == b.z; }

}  // namespace

bool RecordedLaunch::same_shape(const RecordedLaunch& o) const {
  return func == o.func && same_dim(grid, o.grid) && same_dim(block, o.block) && smem == o.smem &&
         overlap == o.overlap && cluster_x == o.cluster_x && cooperative == o.cooperative && args == o.args && used == o.used &&
         std::memcmp(size, o.size, sizeof(size)) == 0;
}

void RecordedLaunch::arguments(void** out) const {
  for (int i = 0; i < args; ++i) out[i] = const_cast<unsigned char*>(bytes + offset[i]);
}

cudaError_t RecordedLaunch::enqueue(cudaStream_t stream) const {
  cudaLaunchAttribute attrs[3]{};
  const cudaLaunchConfig_t cfg = launch_config(grid, block, smem, stream, overlap, cluster_x, cooperative, attrs);
  void* params[kMaxArgs];
  arguments(params);
  return cudaLaunchKernelExC(&cfg, func, params);
}

cudaLaunchConfig_t launch_config(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool overlap,
                                 unsigned cluster_x, bool cooperative, cudaLaunchAttribute (&attrs)[3]) {
  unsigned n = 0;
  if (overlap) {
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster_x > 1) {
    attrs[n].id = cudaLaunchAttributeClusterDimension;
    attrs[n++].val.clusterDim = {cluster_x, 1, 1};
  }
  if (cooperative) {
    attrs[n].id = cudaLaunchAttributeCooperative;
    attrs[n++].val.cooperative = 1;
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = n > 0 ? attrs : nullptr;
  cfg.numAttrs = n;
  return cfg;
}

LaunchRecording::LaunchRecording(LaunchList* list) : previous_(t_recording) { t_recording = list; }
LaunchRecording::~LaunchRecording() { t_recording = previous_; }

LaunchList* recording_list() { return t_recording; }

cudaError_t record_launch(LaunchList* list, const void* func, dim3 grid, dim3 block, size_t smem, bool overlap,
                          unsigned cluster_x, bool cooperative, int args, const void* const* values, const size_t* size,
                          const size_t* align) {
  if (list->count == LaunchList::kMaxLaunches || args > RecordedLaunch::kMaxArgs) {
    list->overflow = true;
    return cudaErrorInvalidValue;
  }
  RecordedLaunch& l = list->launches[list->count];
  size_t at = 0;
  for (int i = 0; i < args; ++i) {
    const size_t start = (at + align[i] - 1) / align[i] * align[i];
    if (start + size[i] > RecordedLaunch::kMaxArgBytes) {
      list->overflow = true;
      return cudaErrorInvalidValue;
    }
    std::memset(l.bytes + at, 0, start - at);  // gaps compare equal (same_arguments)
    at = start;
    std::memcpy(l.bytes + at, values[i], size[i]);
    l.offset[i] = uint16_t(at);
    l.size[i] = uint16_t(size[i]);
    at += size[i];
  }
  for (int i = args; i < RecordedLaunch::kMaxArgs; ++i) l.offset[i] = l.size[i] = 0;
  l.func = func;
  l.grid = grid;
  l.block = block;
  l.smem = smem;
  l.overlap = overlap;
  l.cluster_x = cluster_x;
  l.cooperative = cooperative;
  l.args = args;
  l.used = at;
  ++list->count;
  return cudaSuccess;
}

}  // namespace mxmoe::smxx
